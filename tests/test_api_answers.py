"""docs/protocol.md "Answers over HTTP": every endpoint is listed once with the shape of its
answer, so a new one must say whether it follows the convention (a stored thing under its name)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from room.api import endpoints
from tests.support.doctables import read_table
from tests.support.inproc import App, Team, running_app

KINDS = ("named", "fields", "not JSON")


def routes() -> list[str]:
    """``METHOD /path`` of every HTTP endpoint, path converters (``:int``) left out."""
    out = []
    for route in endpoints:
        path = re.sub(r":\w+\}", "}", route.path)
        out += [f"{method} {path}" for method in sorted((route.methods or set()) - {"HEAD"})]
    return out


def answers() -> dict[str, str]:
    header, rows = read_table("protocol.md", "api-answers")
    assert header == ["endpoint", "answer"]
    listed = [row[0] for row in rows]
    assert len(listed) == len(set(listed)), "an endpoint is listed twice"
    return {row[0]: row[1] for row in rows}


def test_every_endpoint_is_listed_with_the_shape_of_its_answer() -> None:
    table = answers()
    assert sorted(table) == sorted(routes())
    for endpoint, answer in table.items():
        assert answer.startswith(KINDS), (endpoint, answer)


def test_research_answers_are_named() -> None:
    table = answers()
    research = {e: a for e, a in table.items() if "/research" in e}
    assert len(research) == 5
    for endpoint, answer in research.items():
        key = "item" if endpoint.endswith("/flowback") else "research"
        assert answer.startswith(f"named `{key}"), (endpoint, answer)


def key_of(answer: str) -> str:
    """The key a named answer is under, as the table gives it."""
    found = re.match(r"named `(\w+)", answer)
    assert found, answer
    return found.group(1)


@pytest.fixture
def app(tmp_path: Path) -> Any:
    with running_app(tmp_path / "data", demo=False) as handle:
        yield handle


def test_the_stored_things_that_were_answered_bare_are_under_their_name(app: App) -> None:
    """The endpoints that answered a stored thing's own fields (issue 28) asked on a real app:
    each answer is an object whose key is the one the table names, holding the thing."""
    team = Team(app, "信封")
    p = f"/api/projects/{team.id}"
    plan = {"goal": "g", "items": [{"key": "api", "title": "接口", "owner": "owner",
                                     "acceptance": ["能用"]}]}  # fmt: skip
    assert team.owner("POST", f"{p}/plan", {**plan, "start": True})[0] == 201
    decision = {"title": "用 SQLite", "context": "单机", "decision": "只用 SQLite",
                "alternatives": [{"option": "PostgreSQL", "why_rejected": "多一个服务"}]}  # fmt: skip
    status, proposed = team.agent("POST", f"{p}/decisions", decision)
    assert status == 201, proposed
    status, fact = team.owner("POST", f"{p}/memory/fact", {"text": "端口 8470"})
    assert status == 201, fact
    entry = f"/api/memory/{fact['entry']['id']}"
    asked = [
        ("GET", f"{p}/brake", None, "GET /api/projects/{project_id}/brake"),
        ("POST", f"{p}/brake/clear", {}, "POST /api/projects/{project_id}/brake/clear"),
        ("GET", f"{p}/tasks/api", None, "GET /api/projects/{project_id}/tasks/{task}"),
        ("POST", f"{p}/tasks/api/start", {}, "POST /api/projects/{project_id}/tasks/{task}/{event}"),
        ("POST", f"{p}/decisions/{proposed['decision']['number']}/accept", {},
         "POST /api/projects/{project_id}/decisions/{number}/accept"),
        ("PUT", f"{p}/memory/summary", {"rev": 0, "sections": {"what": "信封"}},
         "PUT /api/projects/{project_id}/memory/summary"),
        ("GET", entry, None, "GET /api/memory/{entry_id}"),
        ("PATCH", entry, {"rev": 1, "text": "端口 9000"}, "PATCH /api/memory/{entry_id}"),
        ("POST", f"{entry}/archive", {}, "POST /api/memory/{entry_id}/archive"),
        ("POST", f"{entry}/restore", {}, "POST /api/memory/{entry_id}/restore"),
        ("POST", f"{p}/fork", {"name": "分支"}, "POST /api/projects/{project_id}/fork"),
    ]  # fmt: skip
    table = answers()
    assert key_of(table["POST /api/projects/{project_id}/decisions"]) == "decision"
    assert key_of(table["POST /api/projects/{project_id}/memory/{kind}"]) == "entry"
    for method, path, body, endpoint in asked:
        status, answer = team.owner(method, path, body)
        assert status in (200, 201), (endpoint, answer)
        key = key_of(table[endpoint])
        assert isinstance(answer, dict) and isinstance(answer.get(key), dict), (endpoint, answer)
        assert "id" in answer[key] or "tripped" in answer[key], (endpoint, answer)
