"""docs/protocol.md "Answers over HTTP": every endpoint is listed once with the shape of its
answer, so a new one must say whether it follows the convention (a stored thing under its name)."""

from __future__ import annotations

import re

from room.api import endpoints
from tests.support.doctables import read_table

KINDS = ("named", "fields", "bare", "not JSON")


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
