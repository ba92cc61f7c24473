"""Documentation that cannot drift: every frame type and every setting is documented."""

from __future__ import annotations

import re
from pathlib import Path

from room.rules.protocol import _ADAPTER, CLIENT_FRAME_TYPES, SERVER_FRAME_TYPES
from room.settings import Settings

DOCS = Path(__file__).resolve().parent.parent / "docs"


def table_rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| `")
    ]


def test_every_frame_type_is_in_the_protocol_table() -> None:
    rows = table_rows((DOCS / "protocol.md").read_text())
    documented = {(row[0].strip("`"), row[1]) for row in rows}
    for frame_type in CLIENT_FRAME_TYPES:
        assert (frame_type, "client → server") in documented, frame_type
    for frame_type in SERVER_FRAME_TYPES:
        assert (frame_type, "server → client") in documented, frame_type
    # and nothing documented that does not exist
    assert {t for t, d in documented if d == "client → server"} == set(CLIENT_FRAME_TYPES)
    assert {t for t, d in documented if d == "server → client"} == set(SERVER_FRAME_TYPES)


def test_client_frame_list_matches_the_union() -> None:
    schema = _ADAPTER.json_schema()
    union_types = set(re.findall(r'"const": "(\w+)"', str(schema).replace("'", '"')))
    assert union_types == set(CLIENT_FRAME_TYPES)


def test_every_setting_is_documented() -> None:
    rows = table_rows((DOCS / "settings.md").read_text())
    documented = {row[0].strip("`") for row in rows}
    assert documented == set(Settings.model_fields)
    for name, field in Settings.model_fields.items():
        assert field.description, f"setting {name} has no description"
