"""A resumed research session's messages are rebuilt from its transcript (room.agents.research_run)."""

from __future__ import annotations

from typing import Any

from room.agents.research_run import replay


def entry(role: str, content: str = "", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, "name": extra.get("name"),
            "tool_calls": extra.get("tool_calls", []), "tool_call_id": extra.get("call")}  # fmt: skip


def test_whole_steps_are_replayed_and_a_cut_step_is_left_out() -> None:
    call = {"id": "a", "name": "room_research_hypothesis", "arguments": {"text": "x"}}
    cut = [{"id": "b", "name": "fs_read", "arguments": {}}, {"id": "c", "name": "fs_list",
                                                              "arguments": {}}]  # fmt: skip
    messages = replay([
        entry("assistant", "想一想", tool_calls=[call]),
        entry("tool", '{"ok": true}', call="a", name="room_research_hypothesis"),
        entry("assistant", "", tool_calls=cut),
        entry("tool", '{"ok": true}', call="b", name="fs_read"),  # c's result never came
    ])  # fmt: skip
    assert [(m.role, m.tool_call_id) for m in messages] == [("assistant", None), ("tool", "a")]
    assert messages[0].tool_calls[0].arguments == {"text": "x"}
