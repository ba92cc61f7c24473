"""Documentation that cannot drift: every frame type and every setting is documented, and the
drawing of the layers is the import contract's."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from room.rules.protocol import _ADAPTER, CLIENT_FRAME_TYPES, SERVER_FRAME_TYPES
from room.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


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


def layers_drawing() -> list[str]:
    """The first drawing under "## Layers" in docs/architecture.md, line by line."""
    text = (DOCS / "architecture.md").read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```")[1].splitlines()


def test_the_layers_drawing_is_the_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c.get("containers") == ["room"]]
    assert contract["type"] == "layers" and contract["exhaustive"] is True
    wanted = [set(re.split(r"\s*[|:]\s*", layer.strip())) for layer in contract["layers"]]
    drawn = [
        names
        for line in layers_drawing()
        if (names := set(re.findall(r"(?<![\w.])room\.(\w+)", line)))
    ]
    assert drawn == wanted


def test_every_module_of_rules_and_infra_is_drawn() -> None:
    text = (DOCS / "architecture.md").read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    drawn = set(re.findall(r"\w+", section.split("```")[3]))
    for package in ("rules", "infra"):
        modules = {
            path.stem if path.suffix == ".py" else path.name
            for path in (ROOT / "room" / package).iterdir()
            if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").exists()
        }
        assert modules <= drawn, sorted(modules - drawn)
