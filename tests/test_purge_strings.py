"""The cleanup preview in words: every step, count and kept item a real preview names has a
string in both of the page's tables (web/strings-zh.js, web/strings-en.js). The dialog showed raw
keys ("search — search_messages 5") for the ones added after the tables were written."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.server import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"zh": ROOT / "web" / "strings-zh.js", "en": ROOT / "web" / "strings-en.js"}


def keys_of(table: Path) -> set[str]:
    return set(re.findall(r'^\s*"([\w.]+)":', table.read_text(), re.M))


def test_every_key_of_a_real_preview_is_worded(server: ServerProcess) -> None:
    owner = server.login()
    status, body = server.request(
        "POST", "/api/projects", {"name": "要清除的", "goal": "", "agents": []}, owner.headers
    )
    assert status == 201, body
    project = body["project"]["id"]
    status, body = server.request(
        "POST", f"/api/projects/{project}/lifecycle", {"op": "trash"}, owner.headers
    )
    assert status == 200, body
    preview = server.get_json(f"/api/projects/{project}/cleanup-preview", cookie=owner.cookie)
    wanted = {f"purgeStep.{item['step']}" for item in preview["delete"]}
    wanted |= {f"purgeCount.{key}" for item in preview["delete"] for key in item.get("counts", {})}
    wanted |= {f"purgeKeep.{item['what']}" for item in preview["keep"]}
    assert len(wanted) > 40  # the preview was read, not an empty answer
    for lang, table in TABLES.items():
        assert sorted(wanted - keys_of(table)) == [], lang
