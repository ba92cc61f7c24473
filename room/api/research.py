"""Deep research over HTTP (docs/research.md): the research view's reads, people's proposals and
the card's actions.

Reading is for every member. Proposing is for people here (the lead agent proposes through its
``room_research_propose`` tool); acting on a card — approve, reject, adjust, cancel, start,
pause, resume, stop — is for an authenticated person who owns the project. An agent's token is
refused before anything is read (``research_people_only``, 403), whatever it asks for, and so is
a plain member (``research_not_owner``, 403). Every refusal is audited by the action.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room.actions import research as research_actions
from room.api.requests import core_of, identity, json_object, member_in, path_id
from room.auth import Identity
from room.errors import BadRequestError, ForbiddenError, NotFoundError
from room.rules.entities import Member
from room.store import research as research_store


async def _people_only(request: Request, who: Identity, action: str) -> None:
    """An agent's token is refused (and the refusal audited with the agent as its actor)."""
    if who.agent is not None:
        await research_actions.refused(core_of(request), who.agent, None, action,
                                       "research_people_only")  # fmt: skip
        raise ForbiddenError(
            "研究卡片只有人可以操作；AI 负责人用 room_research_propose 提出研究 (Only people act "
            "on research; the lead agent proposes with its tool.)",
            code="research_people_only",
        )


async def _json(request: Request) -> dict[str, Any]:
    return await json_object(request)


def _int(data: dict[str, Any], name: str) -> int | None:
    value = data.pop(name, None)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequestError(f"{name} 是整数 ({name} is an integer.)", code="bad_body",
                              field=name)  # fmt: skip
    return value


async def _member_of_run(request: Request, *, mutation: bool) -> tuple[Member, int]:
    core = core_of(request)
    who = await identity(request, mutation=mutation)
    research_id = path_id(request, "research_id")
    if mutation:
        await _people_only(request, who, str(request.path_params.get("op", "act")))
    run = await core.db.read(lambda conn: research_store.get(conn, research_id))
    missing = NotFoundError(f"没有研究 {research_id} (No research {research_id}.)",
                            code="not_found")  # fmt: skip
    if run is None:
        raise missing
    try:
        return await member_in(core, who, int(run["project_id"])), research_id
    except (NotFoundError, ForbiddenError):
        raise missing from None


async def list_runs(request: Request) -> Response:
    core = core_of(request)
    who = await identity(request)
    member = await member_in(core, who, path_id(request, "project_id"))
    now = time.time()

    def read(conn: Any) -> dict[str, Any]:
        runs = research_store.of_project(conn, member.project_id)
        return {"research": [research_actions.wire(conn, r, now) for r in reversed(runs)],
                "budget": research_actions.budget_form(conn, core, member.project_id)}  # fmt: skip

    return JSONResponse(await core.db.read(read))


async def propose(request: Request) -> Response:
    core = core_of(request)
    who = await identity(request, mutation=True)
    await _people_only(request, who, "propose")
    member = await member_in(core, who, path_id(request, "project_id"))
    data = await _json(request)
    run = await research_actions.propose(core, member, data)
    return JSONResponse({"research": run}, status_code=201)


async def get_run(request: Request) -> Response:
    _member, research_id = await _member_of_run(request, mutation=False)
    now = time.time()

    def read(conn: Any) -> dict[str, Any]:
        return research_actions.detail(conn, research_actions.get_run(conn, research_id), now)

    return JSONResponse({"research": await core_of(request).db.read(read)})


async def act(request: Request) -> Response:
    member, research_id = await _member_of_run(request, mutation=True)
    data = await _json(request)
    op = str(request.path_params["op"])
    core = core_of(request)
    if op == "adjust":
        rev = _int(data, "rev")
        if rev is None:
            raise BadRequestError("rev 是你编辑时看到的版本号 (rev is required.)",
                                  code="bad_body", field="rev")  # fmt: skip
        run = await research_actions.adjust(core, member, research_id, rev, data)
        return JSONResponse({"research": run})
    rev = _int(data, "rev")
    digest = data.pop("scope_digest", None)
    if digest is not None and not isinstance(digest, str):
        raise BadRequestError("scope_digest 是字符串", code="bad_body", field="scope_digest")
    result = await research_actions.act(core, member, research_id, op, rev=rev, digest=digest)
    return JSONResponse({"research": result})


async def flowback(request: Request) -> Response:
    core = core_of(request)
    who = await identity(request, mutation=True)
    await _people_only(request, who, "flowback")
    item_id = path_id(request, "item_id")
    found = await core.db.read(lambda conn: research_store.item(conn, item_id))
    if found is None:
        raise NotFoundError(f"没有条目 {item_id} (No item {item_id}.)", code="not_found")
    run = await core.db.read(lambda conn: research_store.get(conn, int(found["research_id"])))
    assert run is not None
    member = await member_in(core, who, int(run["project_id"]))
    data = await _json(request)
    decision = data.get("decision")
    if decision not in ("accept", "reject"):
        raise BadRequestError("decision 是 accept 或 reject", code="bad_body", field="decision")
    item = await research_actions.settle_flowback(core, member, item_id, decision)
    return JSONResponse({"item": item})


endpoints = [
    Route("/api/projects/{project_id:int}/research", list_runs, methods=["GET"]),
    Route("/api/projects/{project_id:int}/research", propose, methods=["POST"]),
    Route("/api/research/{research_id:int}", get_run, methods=["GET"]),
    Route("/api/research/items/{item_id:int}/flowback", flowback, methods=["POST"]),
    Route("/api/research/{research_id:int}/{op}", act, methods=["POST"]),
]
