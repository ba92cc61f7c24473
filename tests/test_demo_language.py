"""The demo project made on first start reads in the server's language (setting ``lang``), which
``./scripts/serve`` takes from the shell's locale (issue 30, item 8: an English newcomer does not
meet a Chinese-only first screen)."""

from __future__ import annotations

from pathlib import Path

import pytest

from room.rules.languages import locale_language
from room.settings import load_settings
from tests.support.inproc import running_app


@pytest.mark.parametrize(
    ("lang", "name", "lead", "owner"),
    [("zh", "演示项目", "负责人", "管理员"), ("en", "Demo project", "Lead", "Admin")],
)
def test_the_demo_project_is_made_in_the_servers_language(
    tmp_path: Path, lang: str, name: str, lead: str, owner: str
) -> None:
    with running_app(tmp_path / "data", lang=lang) as app:
        status, me = app.request("GET", "/api/me", cookie=app.owner_cookie)
        assert status == 200, me
        [project] = me["projects"]
        assert project["name"] == name
        assert me["identity"]["display_name"] == owner
        status, members = app.request(
            "GET", f"/api/projects/{project['id']}", cookie=app.owner_cookie
        )
        assert status == 200, members
        shown = {m["handle"]: m["display_name"] for m in members["members"]}
        assert shown["lead"] == lead


def test_the_setting_comes_from_room_lang_and_refuses_other_languages() -> None:
    assert load_settings(env={}).lang == "zh"
    assert load_settings(env={"ROOM_LANG": "en"}).lang == "en"
    with pytest.raises(ValueError, match="lang"):
        load_settings(env={"ROOM_LANG": "fr"})


@pytest.mark.parametrize(
    ("env", "lang"),
    [
        ({}, "zh"),
        ({"LANG": "C.UTF-8"}, "zh"),
        ({"LANG": "POSIX"}, "zh"),
        ({"LANG": "zh_CN.UTF-8"}, "zh"),
        ({"LANG": "en_US.UTF-8"}, "en"),
        ({"LANG": "fr_FR.UTF-8"}, "en"),
        ({"LANG": "zh_TW.UTF-8", "LC_ALL": "en_GB.UTF-8"}, "en"),
        ({"LANG": "en_US.UTF-8", "LC_MESSAGES": "zh_CN.UTF-8"}, "zh"),
        ({"LANG": "de_DE@euro", "LC_ALL": ""}, "en"),
    ],
)
def test_a_shells_locale_picks_the_language(env: dict[str, str], lang: str) -> None:
    assert locale_language(env) == lang
