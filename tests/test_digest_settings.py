"""A person's email digest settings over HTTP (issue 30 item 8): the address is read and set by
the person, the digest's language is the one their page sends (``PUT /api/me/lang``), and an
address set without a language keeps the one the page sent."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from room.store import notifications as notifications_store
from tests.support.inproc import App, running_app


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    with running_app(tmp_path / "data", digest_smtp_host="127.0.0.1") as handle:
        yield handle


def call(app: App, method: str, path: str, body: object = None) -> tuple[int, Any]:
    return app.request(method, path, body, cookie=app.owner_cookie)


def test_the_page_language_is_the_digests(app: App) -> None:
    assert call(app, "GET", "/api/me/digest") == (
        200,
        {"email": None, "lang": "zh", "enabled": True},
    )
    assert call(app, "PUT", "/api/me/lang", {"lang": "en"}) == (200, {"lang": "en"})
    # An address set without a language keeps the page's.
    status, body = call(app, "PUT", "/api/me/digest", {"email": " ann@example.test "})
    assert (status, body) == (200, {"email": "ann@example.test", "lang": "en"})
    assert call(app, "GET", "/api/me/digest")[1]["lang"] == "en"
    # The digest the server would mail this person now is in it.
    owner = call(app, "GET", "/api/me")[1]["identity"]["user_id"]

    def due_lang() -> str:
        due = app.call(
            app.core.db.read, lambda conn: notifications_store.digest_due(conn, time.time() + 10, 0)
        )
        [person] = [p for p in due if p["user_id"] == owner]
        return str(person["lang"])

    assert due_lang() == "en"
    assert call(app, "PUT", "/api/me/lang", {"lang": "zh"}) == (200, {"lang": "zh"})
    assert call(app, "GET", "/api/me/digest")[1] == {
        "email": "ann@example.test", "lang": "zh", "enabled": True,
    }  # fmt: skip
    assert due_lang() == "zh"
    # Removing the address leaves the language.
    assert call(app, "PUT", "/api/me/digest", {"email": None}) == (
        200, {"email": None, "lang": "zh"},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("path", "body", "code"),
    [
        ("/api/me/lang", {"lang": "fr"}, "bad_lang"),
        ("/api/me/lang", {}, "bad_body"),
        ("/api/me/lang", {"lang": "en", "extra": 1}, "bad_body"),
        ("/api/me/digest", {"email": "no-at-sign"}, "bad_email"),
        ("/api/me/digest", {"email": "a@b.test", "lang": "de"}, "bad_lang"),
    ],
)
def test_bad_settings_are_refused_with_their_code(
    app: App, path: str, body: dict[str, Any], code: str
) -> None:
    status, answer = call(app, "PUT", path, body)
    assert (status, answer["error"]["code"]) == (400, code)
    assert call(app, "GET", "/api/me/digest")[1]["lang"] == "zh"  # unchanged


def test_without_smtp_the_page_is_told_no_digest_is_sent(tmp_path: Path) -> None:
    with running_app(tmp_path / "data") as app:
        assert call(app, "GET", "/api/me/digest")[1]["enabled"] is False


@pytest.mark.parametrize(
    ("lang", "head", "ask"),
    [
        (
            "zh",
            "🎯 项目目标：",
            "@lead 请把目标拆成计划（每项：key、标题、负责人、依赖、验收标准）。",
        ),
        ("en", "🎯 Project goal:", "@lead please break the goal into a plan (each item: key,"),
    ],
)
def test_a_new_projects_goal_is_worded_in_its_creators_language(
    app: App, lang: str, head: str, ask: str
) -> None:
    assert call(app, "PUT", "/api/me/lang", {"lang": lang})[0] == 200
    status, made = call(app, "POST", "/api/projects", {"name": f"目标 {lang}", "goal": "Ship v1"})
    assert status == 201, made
    status, history = call(app, "GET", f"/api/projects/{made['project']['id']}/messages")
    assert status == 200, history
    [goal] = [m for m in history["messages"] if m["meta"].get("goal")]
    assert goal["body"].startswith(f"{head}\n\nShip v1\n\n{ask}")
