"""Project packs through the real actions on a real database: export → import equals the
original modulo ids, bad packs are refused whole, fork → merge deduplicates (docs/packs.md)."""

from __future__ import annotations

import base64
import hashlib
import io
import itertools
import json
import sqlite3
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from PIL import Image

from room import cli
from room.actions import attachments as attachment_actions
from room.actions import decisions as decision_actions
from room.actions import memory as memory_actions
from room.actions import message_edits, pack_export, pack_import
from room.actions import messages as message_actions
from room.actions import reactions as reaction_actions
from room.actions import routes as route_actions
from room.actions import task_updates as updates
from room.actions.merge import merge_records
from room.app import RoomServer
from room.errors import PackError, RoomError
from room.infra import blobs
from room.infra.bodies import BodyInto
from room.rules.packs import PACK_TABLES, PACK_VERSION, remap_message
from room.settings import load_settings
from room.store import Tx, run_write
from room.store import auth as auth_store
from room.store import members as members_store
from room.store import reactions as reactions_store
from room.store import search as search_store
from room.store.messages import message_object
from room.store.migrate import connect
from tests.support.inproc import App, error, owner_user
from tests.support.task_world import World, item, plan, review, submit, write_file

pytestmark = pytest.mark.anyio


async def build(world: World) -> None:
    """A project with something in every part: a second person, messages with a reply and an
    edit, deliveries, a plan with dependencies, evidence and a review, decisions (one
    superseding another), memory of every kind, a route change."""
    owner = world["owner"]

    def add_person(conn: sqlite3.Connection, tx: Tx) -> None:
        user_id = auth_store.insert_user(
            conn, handle="lin", display_name="林", is_admin=False, now=tx.now
        )
        members_store.insert(
            conn, project_id=world.project_id, kind="human", user_id=user_id, role="member",
            handle="lin", display_name="林", now=tx.now,
        )  # fmt: skip

    await world.write(add_person)
    await world.refresh()
    first = await message_actions.send_message(
        world.core, owner, client_txn_id="t1", body="你好 @lead，先做接口"
    )
    await message_actions.send_message(
        world.core, world["lin"], client_txn_id="t2", body="收到", reply_to=first.message_id
    )
    await message_edits.edit_message(world.core, owner, first.message_id, "你好 @lead，先做 API")
    # Reactions: rows of their own, and who reacted in the message's stored object.
    for who, emoji in (("owner", "👍"), ("lin", "👍"), ("lin", "🎉")):
        await reaction_actions.react(world.core, world[who], first.message_id, emoji)
    # A plain message (no reply, no mention: its stored object is remapped by its head only),
    # with a line separator that JSON keeps raw.
    await message_actions.send_message(
        world.core, world["lin"], client_txn_id="t3", body="好的\u2028明天见"
    )
    await plan(world, item("api", "be", criteria=2), item("ui", "fe", "api"))
    await updates.change_task(world.core, world["be"], "api", "start")
    await submit(world, "be", "api", write_file(world, "api.py", "def api(): ...\n"))
    await review(world, "qa", "api", (1, True), (2, True))
    made = await decision_actions.propose_decision(
        world.core, owner, title="存储", context="单机", decision="用 SQLite",
        alternatives=[{"option": "PostgreSQL", "why_rejected": "多一个服务"}],
    )  # fmt: skip
    await decision_actions.propose_decision(
        world.core, owner, title="存储 2", context="单机", decision="用 SQLite 的 WAL",
        supersedes=made["number"], task_keys=["api", "ui"],
        alternatives=[{"option": "默认的日志模式", "why_rejected": "并发读会被写挡住"}],
    )  # fmt: skip
    for kind, body in (
        ("fact", {"text": "端口 8470"}),
        ("convention", {"text": "提交前跑 ruff"}),
        ("progress", {"text": "API 完成", "stage": "开发", "next": "联调", "tags": ["api"]}),
        ("session", {"summary": "写了 API"}),
        ("reference", {"ref_kind": "url", "target": "https://example.com/doc", "note": "文档"}),
    ):
        await memory_actions.add_entry(world.core, owner, kind, body)
    await memory_actions.set_summary(world.core, owner, None, {"what": "一个聊天室"})
    await route_actions.change_route(
        world.core, owner, scope="member", target=str(world["be"].id), value="builtin/echo",
        reason="离线测试",
    )  # fmt: skip
    # Attachments: an image (its content and its thumbnail are files), a text file, and the
    # same image again in a second message (one file in the pack for both rows).
    photo, notes, again = [
        await attachment_actions.upload(
            world.core, world[who], name=name, declared=len(content), body=_body(content)
        )
        for who, name, content in (
            ("owner", "照片.png", PNG), ("owner", "notes.txt", "笔记\n".encode() * 50),
            ("lin", "same.png", PNG),
        )
    ]  # fmt: skip
    await message_actions.send_message(
        world.core, owner, client_txn_id="a1", body="看图", attachments=[photo["id"], notes["id"]]
    )
    await message_actions.send_message(
        world.core, world["lin"], client_txn_id="a2", body="", attachments=[again["id"]]
    )


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), "teal").save(out, "PNG")
    return out.getvalue()


PNG = _png()


def _body(content: bytes) -> BodyInto:
    """An upload's body: ``content``, filling the server's buffers as a socket would."""
    sent = 0

    async def fill(view: memoryview) -> int:
        nonlocal sent
        size = min(len(view), len(content) - sent)
        view[:size] = content[sent : sent + size]
        sent += size
        return size

    return fill


def blob_files(world: World) -> dict[str, bytes]:
    """The content store (attachments/<sha[:2]>/<sha[2:]>) by SHA-256, and what is in tmp/."""
    root = world.core.settings.attachments_root
    found = {f"{f.parent.name}{f.name}": f.read_bytes() for f in root.glob("??/*")}
    return found | {f"tmp/{f.name}": b"" for f in (root / "tmp").glob("*")}


async def export(world: World, project_id: int | None = None) -> bytes:
    out = io.BytesIO()
    await world.read(
        lambda c: pack_export.write_pack(
            c, project_id or world.project_id, out, 1000.0, world.core.settings.attachments_root
        )
    )
    return out.getvalue()


async def import_(world: World, data: bytes, **options: Any) -> dict[str, Any]:
    owner = await world.read(lambda c: auth_store.admin_user(c))
    opts = pack_import.ImportOptions(
        importer=owner, attachments=world.core.settings.attachments_root, **options
    )
    return await world.write(
        lambda c, tx: pack_import.import_pack(c, tx, pack_import.read_lines(io.BytesIO(data)), opts)
    )


# Columns an import sets afresh (docs/packs.md, "Import"): compared on their own.
_FRESH = {
    "projects": {"name", "state", "state_from", "stop_target", "state_at", "epoch", "workspace",
                 "created_by", "updated_at", "lead_member_id"},
    "members": {"user_id"},
}  # fmt: skip


def canonical(conn: sqlite3.Connection, project_id: int) -> dict[str, list[Any]]:
    """Every part of a project with each id replaced by its position among its table's rows
    of the project (what "equal modulo ids" means)."""
    tables = [t.name for t in PACK_TABLES]  # the rows (the files are compared on their own)
    lines = [
        line.decode()
        for line in pack_export.export_lines(conn, project_id, 0.0, tables, attachments=None)
    ]
    ordinals: dict[str, dict[int, int]] = {}
    parts: dict[str, list[dict[str, Any]]] = {}
    columns: list[str] = []
    name = ""
    for line in lines[1:]:
        item = json.loads(line) if line.startswith("{") else None
        if item is not None and "part" in item:
            name, columns = item["part"], item["columns"]
            parts[name] = []
        elif item is None:
            for text in filter(None, line.split("\n")):
                parts[name].append(dict(zip(columns, json.loads(text), strict=True)))
    for table in PACK_TABLES:
        if table.key is not None:
            ordinals[table.name] = {r[table.key]: i for i, r in enumerate(parts[table.name])}

    def ordinal(table: str, value: Any) -> Any:
        return ordinals.get(table, {}).get(value) if value is not None else None

    out: dict[str, list[Any]] = {}
    for table in PACK_TABLES:
        rows = []
        for row in parts[table.name]:
            if table.key is not None:
                row[table.key] = ordinal(table.name, row[table.key])
            if "project_id" in row:
                row["project_id"] = 0
            for column, target in table.refs.items():
                if column in row:
                    row[column] = ordinal(target, row[column])
            for column in _FRESH.get(table.name, ()):
                row.pop(column, None)
            if table.name == "messages":
                row["frame"] = remap_message(json.loads(row["frame"]), 0, ordinal)
            if table.name == "events" and row["frame"] is not None:
                frame = json.loads(row["frame"])
                row["frame"] = remap_message(frame["message"], 0, ordinal)
            if table.name in ("audit_events", "route_changes", "route_settings"):
                for field in ("actor_id", "author_id"):
                    if field in row:
                        row[field] = ordinal("members", row[field])
                if row.get("scope") == "member":
                    row["target"] = ordinal("members", int(row["target"]))
            rows.append(row)
        if table.name == "audit_events":
            rows = [r for r in rows if r["action"] not in ("project.import", "project.export")]
        out[table.name] = rows
    return out


async def test_export_then_import_gives_the_same_project_modulo_ids(world: World) -> None:
    await build(world)
    data = await export(world)
    stored = blob_files(world)
    root = world.core.settings.attachments_root
    inodes = {f: f.stat().st_ino for f in root.glob("??/*")}
    result = await import_(world, data)
    new_id = result["project_id"]
    assert new_id != world.project_id and result["name"] == "任务项目 (2)"
    old = await world.read(lambda c: canonical(c, world.project_id))
    new = await world.read(lambda c: canonical(c, new_id))
    for table in PACK_TABLES:
        assert new[table.name] == old[table.name], table.name
    # Something in every part that matters (a round trip of empty tables proves nothing).
    for part in ("messages", "message_edits", "mentions", "events", "deliveries", "tasks",
                 "task_deps", "evidence", "task_reviews", "decisions", "decision_revisions",
                 "route_settings", "route_changes", "memory_entries", "memory_revisions",
                 "decision_tasks", "audit_events", "plans", "task_criteria",
                 "attachments", "reactions", "threads", "thread_replies", "thread_follows"):  # fmt: skip
        assert old[part], part
    seqs = [r["seq"] for r in old["messages"]]
    assert [r["seq"] for r in new["messages"]] == seqs and seqs == sorted(seqs)
    assert {r["state"] for r in new["deliveries"]} == {r["state"] for r in old["deliveries"]}
    assert {r["key"]: r["state"] for r in new["tasks"]} == {"api": "accepted", "ui": "ready"}

    def facts(conn: sqlite3.Connection) -> dict[str, Any]:
        project = conn.execute(
            "SELECT epoch, state, workspace, lead_member_id, created_by FROM projects"
            " WHERE id = ?", (new_id,),
        ).fetchone()  # fmt: skip
        old_epoch = conn.execute(
            "SELECT epoch FROM projects WHERE id = ?", (world.project_id,)
        ).fetchone()[0]
        humans = conn.execute(
            "SELECT m.handle, m.role, u.handle FROM members m JOIN users u ON u.id = m.user_id"
            " WHERE m.project_id = ? ORDER BY m.id", (new_id,),
        ).fetchall()  # fmt: skip
        lead = conn.execute("SELECT handle FROM members WHERE id = ?", (project[3],)).fetchone()
        secrets = conn.execute(
            "SELECT count(*) FROM agent_tokens t JOIN members m ON m.id = t.member_id"
            " WHERE m.project_id = ?", (new_id,),
        ).fetchone()[0]  # fmt: skip
        found = search_store.search(conn, new_id, "API")
        return {"project": project, "old_epoch": old_epoch, "humans": humans, "lead": lead,
                "tokens": secrets, "found": found}  # fmt: skip

    assert world.core.search_indexer is not None
    assert await world.core.search_indexer.settle(10.0)  # the imported messages are indexed
    got = await world.read(facts)
    assert got["project"][0] == got["old_epoch"] + 1  # DESIGN §2: an import is a new epoch
    assert got["project"][1] == "paused" and got["project"][2] is None
    assert got["lead"] == ("lead",) and got["tokens"] == 0
    admin = await world.read(lambda c: auth_store.admin_user(c))
    assert admin is not None
    owner_handle = admin.handle
    assert got["humans"][0] == ("owner", "owner", owner_handle)
    assert got["humans"][1][:2] == ("lin", "member") and got["humans"][1][2].startswith("imported-")
    kinds = {r["kind"] for r in got["found"]["results"]}
    assert "message" in kinds and {"progress", "decision"} & kinds

    # Who reacted, in the new messages' stored objects, are the new project's members: the same
    # as its reaction rows say.
    def reacted(conn: sqlite3.Connection, project_id: int) -> list[tuple[Any, Any]]:
        rows = conn.execute(
            "SELECT id, frame FROM messages WHERE project_id = ? AND frame LIKE '%reactions%'",
            (project_id,),
        ).fetchall()
        return [(json.loads(f)["reactions"], reactions_store.of_message(conn, i)) for i, f in rows]

    carried_reactions = await world.read(lambda c: reacted(c, new_id))
    assert len(carried_reactions) == 1
    for in_frame, in_rows in carried_reactions:
        assert in_frame == in_rows and in_rows[0]["count"] == 2

    # Attachments: the rows point at the new messages, the messages' objects at the new rows
    # (ids and URLs), and the content was already here: the store is as it was (deduplicated
    # by SHA-256), with nothing left in tmp/.
    assert blob_files(world) == stored
    assert {f: f.stat().st_ino for f in root.glob("??/*")} == inodes  # not even rewritten
    rows = await world.read(lambda c: attachment_rows(c, new_id))
    assert [r["name"] for r in rows] == ["照片.png", "notes.txt", "same.png"]
    frames = await world.read(
        lambda c: [json.loads(f) for (f,) in c.execute(
            "SELECT frame FROM messages WHERE project_id = ? AND frame LIKE '%attachments%'"
            " ORDER BY id", (new_id,))]
    )  # fmt: skip
    carried = [a for frame in frames for a in frame["meta"]["attachments"]]
    assert [(a["id"], a["url"]) for a in carried] == [
        (r["id"], f"/attachments/{r['id']}/{quote(r['name'])}") for r in rows
    ]
    assert carried[0]["thumb_url"] == f"/attachments/{rows[0]['id']}/thumb/{quote('照片.png')}"
    assert [f["id"] for f in frames] == [r["message_id"] for r in (rows[0], rows[2])]

    # Into a store that lacks the content, the import restores every file, byte for byte.
    names = {r["sha256"] for r in rows} | {r["thumb_sha256"] for r in rows if r["thumb_sha256"]}
    assert len(names) == 3  # the image, its thumbnail, the text
    for sha in names:
        blobs.remove(world.core.settings.attachments_root, sha)
    await import_(world, data)
    assert blob_files(world) == stored
    assert hashlib.sha256(stored[rows[0]["sha256"]]).hexdigest() == rows[0]["sha256"]


def attachment_rows(conn: sqlite3.Connection, project_id: int) -> list[dict[str, Any]]:
    cur = conn.execute(
        "SELECT a.*, m.project_id AS message_project FROM attachments a"
        " JOIN messages m ON m.id = a.message_id WHERE a.project_id = ? ORDER BY a.id",
        (project_id,),
    )
    rows = [dict(zip([d[0] for d in cur.description], r, strict=True)) for r in cur]
    assert all(r["message_project"] == project_id for r in rows)
    return rows


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def _without_part(data: bytes, part: str) -> bytes:
    out, skipping = [], False
    for line in _lines(data):
        if line.startswith(b'{"part":"' + part.encode()):
            skipping = True
        if not skipping:
            out.append(line)
        if skipping and line.startswith(b'{"end":"' + part.encode()):
            skipping = False
    return b"".join(out)


def _header(data: bytes, **change: Any) -> bytes:
    lines = _lines(data)
    header = json.loads(lines[0]) | change
    return json.dumps(header).encode() + b"\n" + b"".join(lines[1:])


def _row(data: bytes, part: str, fix: Any) -> bytes:
    out, inside, done = [], False, False
    columns: list[str] = []
    for line in _lines(data):
        if line.startswith(b'{"part":"' + part.encode() + b'"'):
            inside, columns = True, json.loads(line)["columns"]
        elif inside and not done and line.startswith(b"["):
            row = dict(zip(columns, json.loads(line), strict=True))
            fix(row)
            line = json.dumps([row[c] for c in columns if c in row]).encode() + b"\n"
            done = True
        out.append(line)
    return b"".join(out)


async def test_bad_packs_are_refused_with_a_reason_and_leave_nothing(world: World) -> None:
    await build(world)
    data = await export(world)
    # The content leaves the store, so that every import below would have to write it: a
    # refused one must leave no file behind either.
    rows = await world.read(lambda c: attachment_rows(c, world.project_id))
    for row in rows:
        for sha in (row["sha256"], row["thumb_sha256"]):
            if sha:
                blobs.remove(world.core.settings.attachments_root, sha)
    # Such a store cannot be exported: refused before the first line, not cut short.
    with pytest.raises(RoomError) as missing:
        await export(world)
    assert missing.value.code == "attachment_missing"

    async def counts() -> tuple[Any, ...]:
        return await world.read(
            lambda c: tuple(
                c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("projects", "users", "members", "messages", "deliveries", "tasks",
                          "memory_entries", "search_fts", "audit_events", "attachments")
            )
        ) + (blob_files(world),)  # fmt: skip

    before = await counts()
    lines = _lines(data)
    cases = [
        (_header(data, kind="room.project-pack-x"), "bad_kind"),
        (_header(data, version=PACK_VERSION + 1), "pack_too_new"),
        (_without_part(data, "deliveries"), "missing_part"),
        (b"".join(lines[: len(lines) // 2]), "truncated"),
        (b"".join(lines[:-1]), "truncated"),
        (_header(data, parts=[p for p in json.loads(lines[0])["parts"] if p != "tasks"]),
         "missing_part"),
        (_row(data, "deliveries", lambda r: r.update(state="teleported")), "bad_row"),
        (_row(data, "messages", lambda r: r.update(reply_to=10**9)), "bad_ref"),
        (_row(data, "messages", lambda r: r.pop("body")), "bad_row"),
        (_row(data, "tasks", lambda r: r.update(id="x")), "bad_row"),
        (data.replace(b'"columns":["id"', b'"columns":["token_hash"', 1), "bad_columns"),
        (b"not json\n", "bad_json"),
        (b"[" * (pack_import.MAX_LINE_BYTES + 2), "line_too_long"),
        (b"", "empty"),
        (_without_part(data, "files"), "missing_part"),
        (_files(data, lambda files: files[1:]), "missing_file"),
        (_files(data, lambda files: files[:-1]), "missing_file"),
        (_files(data, lambda files: [*files, files[0]]), "bad_file"),
        (_files(data, lambda files: [_spoiled(files[0]), *files[1:]]), "bad_file"),
        (_files(data, lambda files: [_spoiled(files[0], cut=1), *files[1:]]), "bad_file"),
        (_files(data, lambda files: [*files[:-1], _spoiled(files[-1], cut=1)]), "bad_file"),
        (_row(data, "attachments", lambda r: r.update(sha256="../../../etc/passwd")), "bad_row"),
        (_row(data, "attachments", lambda r: r.update(message_id=10**9)), "bad_ref"),
        (_row(data, "attachments", lambda r: r.update(size=r["size"] + 1)), "bad_file"),
    ]  # fmt: skip
    quota = sum({r["sha256"]: r["size"] for r in rows}.values()) - 1  # one byte short
    for pack, reason, options in [*((p, r, {}) for p, r in cases),
                                  (data, "over_quota", {"attachment_quota": quota})]:  # fmt: skip
        with pytest.raises(PackError) as caught:
            await import_(world, pack, **options)
        assert caught.value.reason == reason, (reason, caught.value.message)
        assert caught.value.code == "bad_pack"
        assert await counts() == before, reason
    newer = await refused_message(world, _header(data, version=PACK_VERSION + 1))
    assert "newer" in newer and f"version {PACK_VERSION + 1}" in newer


def _files(data: bytes, change: Any) -> bytes:
    """The pack with its files part changed: ``change`` takes and gives the files, each a list
    of its chunk rows (the end line's count follows)."""
    lines = _lines(data)
    start = next(i for i, line in enumerate(lines) if line.startswith(b'{"part":"files"'))
    end = next(i for i, line in enumerate(lines) if line.startswith(b'{"end":"files"'))
    files: list[list[list[Any]]] = []
    for line in lines[start + 1 : end]:
        row = json.loads(line)
        if not files or files[-1][0][0] != row[0]:
            files.append([])
        files[-1].append(row)
    rows = [row for file in change(files) for row in file]
    body = [json.dumps(row).encode() + b"\n" for row in rows]
    marker = json.dumps({"end": "files", "rows": len(rows)}).encode() + b"\n"
    return b"".join([*lines[: start + 1], *body, marker, *lines[end + 1 :]])


def _spoiled(file: list[list[Any]], cut: int = 0) -> list[list[Any]]:
    """The same file with other bytes of the same length (its SHA-256 no longer holds), or
    ``cut`` bytes short of its size."""
    sha, size, offset, encoded = file[0]
    length = len(base64.b64decode(encoded))
    other = base64.b64encode(bytes(length) if not cut else bytes(length - cut)).decode()
    return [[sha, size, offset, other], *file[1:]]


async def refused_message(world: World, pack: bytes) -> str:
    with pytest.raises(RoomError) as caught:
        await import_(world, pack)
    return caught.value.message


async def test_a_fork_copies_records_and_a_merge_back_deduplicates(world: World) -> None:
    await build(world)
    owner = world["owner"]
    fork = await world.write(
        lambda c, tx: pack_import.fork_project(c, tx, world.project_id, owner.id, None)
    )
    fork_id = fork["project_id"]

    def shape(conn: sqlite3.Connection, project_id: int) -> dict[str, Any]:
        def count(table: str) -> int:
            return int(conn.execute(
                f"SELECT count(*) FROM {table} WHERE project_id = ?", (project_id,)
            ).fetchone()[0])  # fmt: skip

        return {
            "row": conn.execute(
                "SELECT forked_from, state, merged_from FROM projects WHERE id = ?",
                (project_id,),
            ).fetchone(),
            "counts": {t: count(t) for t in ("messages", "deliveries", "tasks", "decisions",
                                            "memory_entries", "members", "route_settings")},
            "decisions": conn.execute(
                "SELECT number, title FROM decisions WHERE project_id = ? ORDER BY number",
                (project_id,),
            ).fetchall(),
            "facts": conn.execute(
                "SELECT body_json FROM memory_entries WHERE project_id = ? AND kind = 'fact'"
                " ORDER BY id", (project_id,),
            ).fetchall(),
        }  # fmt: skip

    original = await world.read(lambda c: shape(c, world.project_id))
    forked = await world.read(lambda c: shape(c, fork_id))
    assert forked["row"][:2] == (world.project_id, "active")
    assert forked["counts"]["messages"] == forked["counts"]["deliveries"] == 0
    assert forked["counts"]["tasks"] == 0
    for table in ("decisions", "memory_entries", "members", "route_settings"):
        assert forked["counts"][table] == original["counts"][table], table
    assert forked["decisions"] == original["decisions"]

    # Planted: in the fork, a fact equal but for case, width and spaces, a new fact, a new
    # decision whose number the original also takes meanwhile, and a duplicate decision text.
    fork_owner = await world.read(
        lambda c: next(m for m in members_store.list_for_project(c, fork_id) if m.role == "owner")
    )
    await memory_actions.add_entry(world.core, fork_owner, "fact", {"text": "端口  ８４７０。"})
    await memory_actions.add_entry(world.core, fork_owner, "fact", {"text": "日志写到 stderr"})
    # The same progress text at another stage is another record.
    await memory_actions.add_entry(
        world.core, fork_owner, "progress",
        {"text": "API 完成", "stage": "测试", "next": "发布", "tags": []},
    )  # fmt: skip
    rejected = [{"option": "别的做法", "why_rejected": "更重"}]
    await decision_actions.propose_decision(
        world.core, fork_owner, title="前端", context="c", decision="用原生 ES 模块",
        alternatives=rejected,
    )  # fmt: skip
    await decision_actions.propose_decision(
        world.core, owner, title="后端", context="c", decision="用 Starlette",
        alternatives=rejected,
    )  # fmt: skip
    await decision_actions.propose_decision(
        world.core, fork_owner, title="重复", context="c", decision="用   starlette",
        alternatives=rejected,
    )  # fmt: skip
    before = await world.read(lambda c: shape(c, world.project_id))
    report = await world.write(
        lambda c, tx: merge_records(c, tx, world.project_id, fork_id, owner.id)
    )
    after = await world.read(lambda c: shape(c, world.project_id))
    assert report["memory_added"] == 2 and report["memory_duplicates"] == 7
    assert report["decisions_added"] == 1
    front = [n for n, title in after["decisions"] if title == "前端"]
    assert len(front) == 1 and report["renumbered"] == [
        {"from": f"ADR-{front[0] - 1:04d}", "to": f"ADR-{front[0]:04d}"}
    ]
    assert len(after["decisions"]) == len(before["decisions"]) + 1
    assert [json.loads(f[0])["text"] for f in after["facts"]] == ["端口 8470", "日志写到 stderr"]
    assert json.loads(after["row"][2]) == [fork_id]
    # The source is kept as it was; both sides have the merge in their audit trail.
    kept = await world.read(lambda c: shape(c, fork_id))
    assert kept["row"][1] == "active" and len(kept["facts"]) == 3
    trail = await world.read(
        lambda c: c.execute(
            "SELECT project_id FROM audit_events WHERE action = 'project.merge'"
        ).fetchall()
    )
    assert sorted(r[0] for r in trail) == sorted([world.project_id, fork_id])


# -- HTTP and the CLI, on the real app ----------------------------------------------------------


def test_http_export_import_fork_merge_are_for_owners(app: App, tmp_path: Path) -> None:
    owner = owner_user(app)
    person, cookie = app.new_user("mei", "梅")
    project_id, members, token = app.project_with("外发", owner, person)
    app.call(
        message_actions.send_message, app.core, members["owner"], client_txn_id="x", body="第一条"
    )
    path = f"/api/projects/{project_id}"
    assert error(app.request("GET", f"{path}/export", cookie=cookie)) == (403, "not_owner")
    assert error(app.request("GET", f"{path}/export", token=token)) == (403, "not_owner")
    assert error(app.request("POST", f"{path}/fork", {}, cookie=cookie)) == (403, "not_owner")
    other, _, _ = app.project_with("别的", owner)
    merge = {"source_project_id": other}
    assert error(app.request("POST", f"{path}/merge", merge, cookie=cookie)) == (403, "not_owner")

    # The portfolio travels: timeline, milestones, a skill dependency (one on another project
    # does not: that project is not in the pack).
    timeline = {
        "start": "2026-12-01", "end": "2026-12-31", "hours_estimated": 40,
        "milestones": [{"name": "设计", "date": "2026-12-10", "status": "done"}],
    }  # fmt: skip
    assert app.request("PUT", f"{path}/timeline", timeline, cookie=app.owner_cookie)[0] == 200
    other_id, _, _ = app.project_with("被依赖", owner)
    deps = {"dependencies": [{"kind": "skill", "name": "Rust"},
                             {"kind": "project", "project_id": other_id}]}  # fmt: skip
    assert app.request("PUT", f"{path}/dependencies", deps, cookie=app.owner_cookie)[0] == 200
    response = app.client.get(
        f"{path}/export", headers={"Cookie": f"room_session={app.owner_cookie}"}
    )
    assert response.status_code == 200
    pack = response.content
    assert json.loads(pack.splitlines()[0])["kind"] == "room.project-pack"
    assert b"token_hash" not in pack and b"csrf" not in pack

    def upload(body: bytes, who: str | None = None, bearer: str | None = None) -> Any:
        headers = {"Origin": app.settings.origin}
        if who is not None:
            headers |= {"Cookie": f"room_session={who}", "X-CSRF-Token": app.csrf[who]}
        if bearer is not None:
            headers["Authorization"] = f"Bearer {bearer}"
        return app.client.post("/api/projects/import?name=导入", content=body, headers=headers)

    assert upload(pack, bearer=token).status_code == 403
    forged = upload(pack.replace(b"room.project-pack", b"room.other-pack", 1), app.owner_cookie)
    assert forged.status_code == 400 and forged.json()["error"]["details"]["reason"] == "bad_kind"
    made = upload(pack, app.owner_cookie)
    assert made.status_code == 201 and made.json()["project"]["name"] == "导入"
    assert made.json()["project"]["state"] == "paused" and made.json()["rows"]["milestones"] == 1
    new_id = made.json()["project"]["id"]
    _, copied = app.request("GET", f"/api/projects/{new_id}/timeline", cookie=app.owner_cookie)
    assert [m["name"] for m in copied["milestones"]] == ["设计"]
    with app.db() as conn:
        kinds = conn.execute(
            "SELECT kind, name FROM project_dependencies WHERE project_id = ?", (new_id,)
        ).fetchall()
    assert [tuple(k) for k in kinds] == [("skill", "rust")]
    assert not list((app.settings.data / "tmp").iterdir())  # the upload's temp file is gone
    status, forked = app.request("POST", f"{path}/fork", {"name": "分支"}, cookie=app.owner_cookie)
    assert status == 201 and forked["project"]["name"] == "分支", forked
    fork_id = forked["project"]["id"]
    status, merged = app.request(
        "POST", f"{path}/merge", {"source_project_id": fork_id, "trash_source": True},
        cookie=app.owner_cookie,
    )  # fmt: skip
    assert status == 200, merged
    with app.db() as conn:
        state = conn.execute("SELECT state FROM projects WHERE id = ?", (fork_id,))
        assert state.fetchone()[0] == "trashed"
    with app.db() as conn:
        trail = conn.execute(
            "SELECT action FROM audit_events WHERE project_id = ? ORDER BY id", (project_id,)
        ).fetchall()
    assert [a for (a,) in trail if a.startswith("project.")][-3:] == [
        "project.export", "project.fork", "project.merge",
    ]  # fmt: skip


def test_the_cli_exports_and_imports_while_the_server_runs(app: App, tmp_path: Path) -> None:
    owner = owner_user(app)
    _, members, _ = app.project_with("命令行", owner)
    for n in range(3):
        app.call(
            message_actions.send_message, app.core, members["owner"], client_txn_id=f"c{n}",
            body=f"消息 {n}",
        )  # fmt: skip
    file = tmp_path / "p.roompack"
    data = ["--data", str(app.settings.data)]
    assert cli.main(["export", "命令行", str(file), *data]) == 0
    assert cli.main(["import", str(file), "--name", "命令行副本", *data]) == 0

    def bodies(name: str) -> list[tuple[int, str]]:
        with app.db() as conn:
            return conn.execute(
                "SELECT m.seq, m.body FROM messages m JOIN projects p ON p.id = m.project_id"
                " WHERE p.name = ? ORDER BY m.seq", (name,),
            ).fetchall()  # fmt: skip

    copied = bodies("命令行副本")
    # The echo agent may answer between the person's messages: theirs are in order, all there.
    assert [b for _, b in copied if b.startswith("消息 ")] == ["消息 0", "消息 1", "消息 2"]
    assert copied == bodies("命令行")[: len(copied)]
    # The server's writer goes on taking ids after the imported ones.
    app.call(
        message_actions.send_message, app.core, members["owner"], client_txn_id="after",
        body="之后",
    )  # fmt: skip
    file.write_bytes(file.read_bytes().replace(b'"version":1', b'"version":99', 1))
    assert cli.main(["import", str(file), *data]) == 1


def test_a_plain_message_object_is_remapped_by_its_head_exactly_as_in_full() -> None:
    from room.actions.pack_import import _HEAD, _message, _Part
    from room.rules.packs import TABLES_BY_NAME
    from room.store.messages import message_object

    class Stub:
        project_id = 900

        def _map(self, table: str, value: Any) -> Any:
            shift = {"messages": 1000, "members": 50}.get(table)
            return None if value is None or shift is None else value + shift

    part = _Part(TABLES_BY_NAME["messages"], ["id", "frame"], 1)
    common: dict[str, Any] = {
        "message_id": 7, "project_id": 3, "seq": 12, "kind": "chat", "body": '引号 " 和 "meta":',
        "html": "<p>x</p>", "client_txn_id": "c", "created_at": 1.5, "reply_excerpt": None,
    }  # fmt: skip
    cases: list[dict[str, Any]] = [
        {"author_id": 4, "reply_to": None, "mentions": ()},
        {"author_id": None, "reply_to": None, "mentions": ()},
        {"author_id": 4, "reply_to": 5, "mentions": (2,)},
        {"author_id": 4, "reply_to": None, "mentions": (), "meta": {"turn_id": 9}},
    ]
    for case in cases:
        frame = message_object(**common, **case)
        values: list[Any] = [7, frame]
        _message(Stub(), part, values)  # type: ignore[arg-type]
        full = remap_message(json.loads(frame), 900, Stub()._map)
        assert json.loads(values[1]) == full
        assert values[1] == json.dumps(full, ensure_ascii=False, separators=(",", ":"))
    plain = message_object(**common, **cases[0])
    assert _HEAD.match(plain) is not None  # the fast path is taken for the plain one


async def test_a_merge_needs_another_project_that_is_open(world: World) -> None:
    owner = world["owner"]
    fork = await world.write(
        lambda c, tx: pack_import.fork_project(c, tx, world.project_id, owner.id, "分支")
    )
    with pytest.raises(RoomError) as caught:
        await world.write(
            lambda c, tx: merge_records(c, tx, world.project_id, world.project_id, owner.id)
        )
    assert caught.value.code == "merge_self"
    await world.write(
        lambda c, tx: c.execute("UPDATE projects SET state = 'archived' WHERE id = ?",
                                (world.project_id,))
    )  # fmt: skip
    with pytest.raises(RoomError) as caught:
        await world.write(
            lambda c, tx: merge_records(c, tx, world.project_id, fork["project_id"], owner.id)
        )
    assert caught.value.code == "project_not_open"


def test_merge_keys_fold_width_case_spaces_and_trailing_slashes() -> None:
    from room.actions.merge import _entry_key
    from room.rules.packs import normalized

    assert normalized("  用 ＵＶ   管理依赖。") == normalized("用 uv 管理依赖") == "用 uv 管理依赖"
    assert normalized("端口 8470!") != normalized("端口 8471")
    doc = {"ref_kind": "url", "target": "https://example.com/doc", "note": "a"}
    assert _entry_key("reference", doc, 1.0, "a") == _entry_key(
        "reference", {**doc, "target": "https://example.com/doc/", "note": "b"}, 9.0, "b"
    )
    body = {"text": "API 完成", "stage": "开发"}
    same = _entry_key("progress", body, 100.2, "Lead")
    assert same == _entry_key("progress", {**body, "text": "api  完成。"}, 99.9, "lead")
    assert same != _entry_key("progress", body, 102.0, "lead")  # another time
    assert same != _entry_key("progress", body, 100.2, "be")  # another session
    assert same != _entry_key("progress", {**body, "stage": "测试"}, 100.2, "lead")


# -- memory: bounded whatever the size of the project ---------------------------------------------


def _fill(conn: sqlite3.Connection, count: int) -> None:
    """``count`` more messages (every tenth a reply, so that both remaps run) and their events
    in project 1, as raw rows."""
    author = conn.execute(
        "SELECT id FROM members WHERE project_id = 1 AND kind = 'human'"
    ).fetchone()[0]
    first = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM messages").fetchone()[0])
    seq0 = int(conn.execute("SELECT last_seq FROM projects WHERE id = 1").fetchone()[0]) + 1
    messages, events = [], []
    for i in range(count):
        mid, seq = first + i, seq0 + i
        reply = mid - 1 if i % 10 == 9 else None
        body = f"第 {seq} 条 message {seq} " + "lorem ipsum " * 8
        frame = message_object(
            message_id=mid, project_id=1, seq=seq, author_id=author, kind="chat", body=body,
            html=f"<p>{body}</p>", reply_to=reply, reply_excerpt=None, mentions=(),
            client_txn_id=f"m{seq}", created_at=1_800_000_000 + i / 8,
        )  # fmt: skip
        messages.append((mid, 1, seq, author, "chat", body, reply, f"m{seq}", frame, 1.8e9 + i))
        events.append((1, seq, "message", mid, 1.8e9 + i))
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO messages (id, project_id, seq, author_id, kind, body, reply_to,"
        " client_txn_id, frame, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        messages,
    )
    conn.executemany(
        "INSERT INTO events (project_id, seq, kind, message_id, created_at) VALUES (?, ?, ?, ?, ?)",
        events,
    )
    conn.execute("UPDATE projects SET last_seq = ? WHERE id = 1", (seq0 + count - 1,))
    conn.execute("COMMIT")


def _traced_peak(job: Callable[[], object]) -> int:
    """The most Python memory ``job`` held at once, past what was held before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        job()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_export_and_import_hold_the_same_memory_for_five_times_the_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pack is streamed both ways: going from 4,000 to 20,000 messages (32,000 more rows)
    must not raise the peak of Python memory by what even one small object per row would
    (a list of ids alone would hold ~36 bytes a row, 1.1 MB here). SQLite's own memory is
    its page cache, bounded by its settings; the whole process's peak RSS at 1,000,000
    messages is ``scripts/bench --only packs``."""
    # Smaller batches than in service: a batch's own size varies a little with its rows (and
    # with how a buffer grew), and that must stay far below what a leak would add.
    monkeypatch.setattr(pack_export, "EXPORT_FETCH", 200)
    monkeypatch.setattr(pack_import, "INSERT_CHUNK", 50)
    server = RoomServer(load_settings({"data": tmp_path}, env={}))
    server.open()
    server.close()
    db = tmp_path / "room.sqlite"
    conn = connect(db)
    peaks: dict[int, tuple[int, int]] = {}
    owner = run_write(conn, lambda c, tx: auth_store.admin_user(c))
    options = pack_import.ImportOptions(importer=owner, attachments=tmp_path / "attachments")
    pack = tmp_path / "p.roompack"

    def export() -> None:
        with pack.open("wb") as out:
            pack_export.write_pack(conn, 1, out, 0.0, tmp_path / "attachments")

    def import_() -> None:
        with pack.open("rb") as lines:
            run_write(
                conn,
                lambda c, tx: pack_import.import_pack(
                    c, tx, pack_import.read_lines(lines), options
                ),
            )

    try:
        for total in (4_000, 20_000):
            have = conn.execute("SELECT count(*) FROM messages WHERE project_id = 1").fetchone()[0]
            _fill(conn, total - have)
            peaks[total] = (_traced_peak(export), _traced_peak(import_))
        counted = conn.execute("SELECT count(*) FROM messages WHERE project_id != 1").fetchone()
        assert counted[0] == 24_000  # both imports happened, whole
    finally:
        conn.close()
    (small_export, small_import), (large_export, large_import) = peaks[4_000], peaks[20_000]
    assert large_export - small_export < 256 * 1024, peaks
    assert large_import - small_import < 256 * 1024, peaks


def test_messages_come_in_id_order_whether_read_in_place_or_sorted(tmp_path: Path) -> None:
    """A project whose messages fill their id range is read along it (no sort); one whose
    messages are spread among other projects' is read through its index and sorted. Either
    way the part is in id order and imports."""
    server = RoomServer(load_settings({"data": tmp_path}, env={}))
    server.open()
    server.close()
    conn = connect(tmp_path / "room.sqlite")
    owner = run_write(conn, lambda c, tx: auth_store.admin_user(c))
    options = pack_import.ImportOptions(importer=owner, attachments=tmp_path / "attachments")
    messages = PACK_TABLES[[t.name for t in PACK_TABLES].index("messages")]
    columns = pack_export.table_columns(conn, "messages")

    def ids_in_pack(project_id: int) -> tuple[list[int], bytes]:
        out = io.BytesIO()
        pack_export.write_pack(conn, project_id, out, 0.0, tmp_path / "attachments")
        lines = out.getvalue().splitlines()
        start = lines.index(next(x for x in lines if x.startswith(b'{"part":"messages"')))
        rows = itertools.takewhile(lambda x: x.startswith(b"["), lines[start + 1 :])
        return [json.loads(x)[0] for x in rows], out.getvalue()

    def import_(pack: bytes) -> None:
        run_write(
            conn,
            lambda c, tx: pack_import.import_pack(
                c, tx, pack_import.read_lines(io.BytesIO(pack)), options
            ),
        )

    try:
        _fill(conn, 50)
        _, pack = ids_in_pack(1)
        for _ in range(3):  # three copies: their messages take the next ids
            import_(pack)
        _fill(conn, 5)  # project 1 now has 55 messages spread over 200 ids
        sparse = pack_export._select(conn, messages, columns, 1)
        dense = pack_export._select(conn, messages, columns, 2)
        assert "NOT INDEXED" not in sparse and "NOT INDEXED" in dense
        for project_id, count in ((1, 55), (2, 50)):
            ids, pack = ids_in_pack(project_id)
            assert len(ids) == count and ids == sorted(ids)
            import_(pack)
    finally:
        conn.close()


def test_a_merge_brings_the_sources_people_and_dependencies(app: App) -> None:
    """The source's people join as members (its owner too, never as owner here; agents stay);
    a person whose handle the target has reserved is skipped and named; its dependencies are
    added, the one on the target itself left out."""
    owner = owner_user(app)
    mei, _ = app.new_user("mei", "梅")
    wang, _ = app.new_user("wang", "小王")
    lin, _ = app.new_user("lin", "小林")
    target, _, _ = app.project_with("目标", owner)
    source, _, _ = app.project_with("来源", mei, wang)
    with app.db() as conn:  # lin is also in the source; the target holds @lin's name already
        conn.execute(
            "INSERT INTO members (project_id, kind, user_id, role, handle, display_name, created_at)"
            " VALUES (?, 'human', ?, 'member', 'lin', '小林', 0)",
            (source, lin.id),
        )
        conn.execute(
            "INSERT INTO member_names (project_id, member_id, name, name_key, kind)"
            " SELECT ?, id, 'lin', 'lin', 'alias' FROM members WHERE project_id = ? AND handle = 'lead'",
            (target, target),
        )
    other, _, _ = app.project_with("别的", owner)
    deps = {"dependencies": [{"kind": "skill", "name": "Rust"},
                             {"kind": "project", "project_id": target},
                             {"kind": "project", "project_id": other}]}  # fmt: skip
    with app.db() as conn:  # an owner of both merges: the server's owner owns the source too
        conn.execute(
            "INSERT INTO members (project_id, kind, user_id, role, handle, display_name, created_at)"
            " VALUES (?, 'human', ?, 'owner', ?, ?, 0)",
            (source, owner.id, owner.handle, owner.display_name),
        )
    app.core.rosters.invalidate(source)
    assert app.request("PUT", f"/api/projects/{source}/dependencies", deps,
                       cookie=app.owner_cookie)[0] == 200  # fmt: skip
    status, merged = app.request(
        "POST", f"/api/projects/{target}/merge", {"source_project_id": source},
        cookie=app.owner_cookie,
    )  # fmt: skip
    assert status == 200, merged
    assert merged["members_added"] == ["mei", "wang"]
    assert merged["members_skipped"] == [{"handle": "lin", "reason": "handle_taken"}]
    assert merged["dependencies_added"] == 2
    with app.db() as conn:
        people = conn.execute(
            "SELECT handle, role FROM members WHERE project_id = ? AND kind = 'human' ORDER BY id",
            (target,),
        ).fetchall()
        agents = conn.execute(
            "SELECT count(*) FROM members WHERE project_id = ? AND kind = 'agent'", (target,)
        ).fetchone()[0]
        kinds = conn.execute(
            "SELECT kind, target_project_id, name FROM project_dependencies WHERE project_id = ?"
            " ORDER BY kind DESC",
            (target,),
        ).fetchall()
    assert [tuple(p) for p in people] == [("owner", "owner"), ("mei", "member"), ("wang", "member")]
    assert agents == 1  # the target's own lead; the source's lead is not copied
    assert [tuple(k) for k in kinds] == [("skill", None, "rust"), ("project", other, "")]
