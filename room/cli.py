"""The ``room`` command. ``main(argv)`` returns an exit code, so tests run it in-process.

``login-link``, ``member token``, ``users``, ``export``, ``import``, ``risk`` and ``doctor``
work while a server runs: they never take the data-folder lock; the first two write one small row each in
their own short SQLite transaction (WAL lets them interleave with the server's writer),
``export`` reads one snapshot, ``import`` writes its project in one transaction, ``risk`` makes
one short write, ``doctor`` only reads, ``backup`` copies the database with SQLite's online backup
API (one read transaction). ``restore`` writes only into a new or empty folder
(docs/backup.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from room import __version__
from room.errors import BackupError, RoomError
from room.settings import DEFAULT_PORT, Settings, load_settings

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_LOCKED = 3
EXIT_UNHEALTHY = 4
EXIT_UNREACHABLE = 5  # the PostgreSQL database named by --database cannot be reached
EXIT_NOT_SERVED = 6  # backup and restore on PostgreSQL: not by room (docs/storage.md)
EXIT_NOT_EMPTY = 7  # restore: the target folder is not empty (nothing was written)
EXIT_BAD_BACKUP = 8  # restore: the archive failed a check (nothing was written)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="room",
        description="Project Room: each project is one persistent group chat of people and AI "
        "agent members.",
    )
    parser.add_argument("--version", action="version", version=f"room {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def data_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--data",
            type=Path,
            default=None,
            help="data folder (default: $ROOM_DATA or ./.room-data)",
        )

    def database_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--database",
            default=None,
            metavar="URL",
            help="a PostgreSQL database, postgresql://… (default: $ROOM_DATABASE_URL, else SQLite "
            "in the data folder); exit 5 when it cannot be reached (docs/storage.md)",
        )

    def attachments_arg(command: argparse.ArgumentParser, what: str) -> None:
        command.add_argument(
            "--attachments-dir",
            type=Path,
            default=None,
            metavar="DIR",
            help=f"{what} (default: $ROOM_ATTACHMENTS_DIR, else <data>/attachments; "
            "docs/backup.md)",
        )

    serve = sub.add_parser(
        "serve",
        help="serve on SQLite in the data folder (creates it and a demo project on first start)",
        description="Serve Project Room. Prints the URL and a one-time owner login link.",
    )
    data_arg(serve)
    database_arg(serve)
    serve.add_argument(
        "--bus",
        default=None,
        metavar="URL",
        help="a NATS server, nats://… the servers on one PostgreSQL database share "
        "(default: $ROOM_BUS_URL; docs/cluster.md)",
    )
    serve.add_argument("--host", default=None, help="interface (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help=f"port (default {DEFAULT_PORT})")
    serve.add_argument("--log-level", default="info", help="uvicorn log level (default info)")

    cluster = sub.add_parser(
        "cluster",
        help="the servers sharing a PostgreSQL database and a bus (docs/cluster.md)",
    )
    cluster_sub = cluster.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")
    status = cluster_sub.add_parser(
        "status",
        help="the nodes heard on the bus and their running turns",
        description="Exit 0 when the database and the bus answer, 4 when the bus cannot be "
        "reached, 5 when the database cannot.",
    )
    data_arg(status)
    database_arg(status)
    status.add_argument(
        "--bus", default=None, metavar="URL", help="the NATS server (default: $ROOM_BUS_URL)"
    )
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    move = cluster_sub.add_parser(
        "move",
        help="make NODE the home of PROJECT: where its workspace is and its agent turns run",
        description="The new home dispatches the project's waiting deliveries within a third "
        "of lease_secs; the old home's running turns end once the new home adopted the lapsed "
        "lease (their later writes are refused). Move the workspace's folder first when the "
        "nodes do not share it (docs/cluster.md). Exit 1 when there is no such project.",
    )
    move.add_argument("project", help="the project's id or name")
    move.add_argument("node", help="the node id (its <data>/node-id; see `room cluster status`)")
    data_arg(move)
    database_arg(move)

    doctor = sub.add_parser(
        "doctor",
        help="read the boot reports and the database and print a health summary",
        description="Exit 0 when healthy, 4 when something needs attention, 5 when the "
        "PostgreSQL database named by --database cannot be reached.",
    )
    data_arg(doctor)
    database_arg(doctor)
    doctor.add_argument(
        "--bus",
        default=None,
        metavar="URL",
        help="a cluster's NATS server, to hear the nodes now (default: $ROOM_BUS_URL)",
    )
    doctor.add_argument("--json", action="store_true", help="print the summary as JSON")

    link = sub.add_parser(
        "login-link",
        help="print a fresh one-time owner login link",
        description="Works while the server runs.",
    )
    data_arg(link)
    database_arg(link)

    member = sub.add_parser("member", help="member tools")
    member_sub = member.add_subparsers(dest="member_command", metavar="SUBCOMMAND")
    token = member_sub.add_parser(
        "token",
        help="rotate an agent member's bearer token: print a fresh one, revoke the older ones",
        description="Issue a fresh bearer token for agent member HANDLE of PROJECT (name or id) "
        "and revoke its older tokens (the handle, session and tasks stay). Prints only the token. "
        "Works while the server runs; a socket already open with an old token stays open until "
        "it reconnects (the owner's API call cuts it at once).",
    )
    data_arg(token)
    database_arg(token)
    token.add_argument("project", metavar="PROJECT", help="project name or id")
    token.add_argument("handle", metavar="HANDLE", help="the agent's handle")
    revoke = member_sub.add_parser(
        "revoke",
        help="revoke every bearer token of an agent member (it keeps its handle)",
        description="Revoke all bearer tokens of agent member HANDLE of PROJECT; prints how many "
        "were live. Issue a new one with 'room member token'.",
    )
    data_arg(revoke)
    database_arg(revoke)
    revoke.add_argument("project", metavar="PROJECT", help="project name or id")
    revoke.add_argument("handle", metavar="HANDLE", help="the agent's handle")

    users = sub.add_parser(
        "users",
        help="list, disable and enable people; a login link for any person (docs/operators.md)",
        description="Administer the server's people. Works while the server runs: a disabled "
        "person's sessions end and their open sockets close within a second; they stay a member "
        "(messages and authorship kept), shown as disabled. Every action is audited.",
    )
    users_sub = users.add_subparsers(dest="users_command", metavar="SUBCOMMAND")
    users_list = users_sub.add_parser("list", help="every person, with their state")
    data_arg(users_list)
    database_arg(users_list)
    users_list.add_argument("--json", action="store_true", help="print the list as JSON")
    for name, text in (
        ("disable", "disable a person: sessions end, sockets close, sign-in refused"),
        ("enable", "enable a disabled person again"),
        ("login-link", "print a fresh one-time login link for a person"),
    ):
        one = users_sub.add_parser(name, help=text, description=text + ".")
        data_arg(one)
        database_arg(one)
        one.add_argument("who", metavar="PERSON", help="a handle (@ optional) or a user id")

    export = sub.add_parser(
        "export",
        help="write a project to a pack file (docs/packs.md)",
        description="Write PROJECT (name or id) with its members (no tokens), routes, messages, "
        "deliveries, tasks, decisions, memory and audit trail to FILE, a versioned JSON Lines "
        "pack. Works while the server runs (it reads one snapshot).",
    )
    data_arg(export)
    database_arg(export)
    export.add_argument("project", metavar="PROJECT", help="project name or id")
    export.add_argument("file", metavar="FILE", type=Path, help="the pack to write")
    import_ = sub.add_parser(
        "import",
        help="import a pack file as a new project (docs/packs.md)",
        description="Import FILE as a new project with fresh ids, owned by the server's owner; "
        "the project lands paused. Nothing is kept of a pack that is refused. Works while the "
        "server runs.",
    )
    data_arg(import_)
    database_arg(import_)
    import_.add_argument("file", metavar="FILE", type=Path, help="the pack to read")
    import_.add_argument("--name", default=None, help="name of the new project")
    copy = sub.add_parser(
        "copy",
        help="copy a whole server's database into an empty store, SQLite or PostgreSQL "
        "(docs/storage.md)",
        description="Copy every table of the database at --from (a data folder, or "
        "postgresql://…) into the empty store at --to, ids kept, in one transaction; rows and "
        "digests of every table are compared before it commits. The source is only read. "
        "Exit 7: the target is not empty (nothing written); 5: a database cannot be reached.",
    )
    copy.add_argument("--from", dest="source", required=True, metavar="FOLDER|URL")
    copy.add_argument("--to", dest="target", required=True, metavar="FOLDER|URL")
    copy.add_argument("--json", action="store_true", help="print the report as JSON only")
    risk = sub.add_parser(
        "risk",
        help="run the risk scan over every project and print it grouped 🔴 / 🟡 / 🟢",
        description="Run the eight risk rules (docs/portfolio.md) over every project, write each "
        "finding to its project's risk log and post one notice per new 🔴 finding. Works while "
        "the server runs (one short write); open pages see the notices when they next load. "
        "Exit 0 with no 🔴 finding, 4 with one or more.",
    )
    data_arg(risk)
    database_arg(risk)
    risk.add_argument("--json", action="store_true", help="print the findings as JSON")

    backup = sub.add_parser(
        "backup",
        help="write a consistent backup of the data folder to one file (docs/backup.md)",
        description="Copy the database with SQLite's online backup API (consistent at one "
        "instant, while the server runs) and the attachment files it references into FILE, a "
        "tar with a manifest (versions, rows per table, a SHA-256 per file), written atomically "
        "and 0600. Not included: the search index (rebuilt at start) and workspaces.",
    )
    data_arg(backup)
    database_arg(backup)
    backup.add_argument(
        "--to",
        required=True,
        type=Path,
        metavar="FILE",
        help="the archive; with --every, the folder for room-<UTC time>.tar files",
    )
    backup.add_argument(
        "--every",
        type=float,
        default=None,
        metavar="HOURS",
        help="keep running: a backup now and every HOURS (fractions allowed) into the --to folder",
    )
    attachments_arg(backup, "read the attachment files from DIR")
    backup.add_argument(
        "--keep",
        type=int,
        default=7,
        metavar="K",
        help="with --every: keep the K newest scheduled backups in the folder (default 7)",
    )
    restore = sub.add_parser(
        "restore",
        help="restore a backup into a new or empty data folder (docs/backup.md)",
        description="Check every member of FILE against its manifest, then unpack it into DIR "
        "(missing or empty: exit 7 otherwise; exit 8 for an archive that fails a check; "
        "nothing is written either way). Everyone is signed out; the first start says it was "
        "restored, settles agents' running turns as after a crash and rebuilds the search index.",
    )
    restore.add_argument("file", metavar="FILE", type=Path, help="the backup to read")
    restore.add_argument("--data", type=Path, required=True, help="the folder to restore into")
    database_arg(restore)
    attachments_arg(
        restore,
        "put the attachment files into DIR, the restored server's attachments_dir (it may "
        "hold files already: a cluster's shared folder)",
    )

    agent = sub.add_parser(
        "agent",
        help="drive an external agent member: run COMMAND for each batch of deliveries",
        description="Connect as an external agent member (driver 'external'). For each batch of "
        "deliveries, run COMMAND with the batch as JSON on stdin and post its stdout as the "
        "reply. Example: room agent --url http://127.0.0.1:8470 --token T -- ./my-agent.sh",
    )
    agent.add_argument("--url", required=True, help="server URL, e.g. http://127.0.0.1:8470")
    agent.add_argument("--token", required=True, help="the member's bearer token")
    agent.add_argument(
        "--state", type=Path, default=None, help="file remembering handled deliveries"
    )
    agent.add_argument(
        "--mcp",
        action="store_true",
        help="run a coding agent with the room's MCP server configured: COMMAND runs once per "
        "batch in the member's task worktree (if any), with {mcp_config} in its arguments "
        "replaced by a temporary MCP config file; it speaks through the room's tools, e.g. "
        "-- claude -p 'answer the room' --mcp-config {mcp_config}",
    )
    agent.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS]")

    bridge = sub.add_parser(
        "mcp",
        help="the room's MCP server on stdin/stdout, for MCP clients that only start stdio servers",
        description="Relay MCP between stdin/stdout and the room's /mcp endpoint (Streamable "
        "HTTP) as agent member TOKEN. Example MCP client entry: command 'room', args "
        "['mcp', '--url', 'http://127.0.0.1:8470', '--token', 'T'].",
    )
    bridge.add_argument("--url", required=True, help="server URL, e.g. http://127.0.0.1:8470")
    bridge.add_argument(
        "--token",
        default=os.environ.get("ROOM_TOKEN"),
        help="the member's bearer token (default: $ROOM_TOKEN, which keeps it out of the process "
        "list); write --token=T when it starts with '-'",
    )
    return parser


def entry() -> int:
    """``room`` and ``python -m room``: :func:`main` under umask 077 (room.infra.perms), so
    whatever a command creates in the data folder is its owner's alone."""
    from room.infra.perms import keep_private

    keep_private()
    return main()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            return serve(args)
        if args.command == "doctor":
            from room.doctor import run_doctor

            settings = _settings(args, database_url=args.database, bus_url=args.bus)
            healthy = run_doctor(settings, as_json=args.json)
            return EXIT_OK if healthy else EXIT_UNHEALTHY
        if args.command == "cluster" and args.cluster_command == "status":
            from room.doctor import cluster_status, print_cluster_status

            settings = _settings(args, database_url=args.database, bus_url=args.bus)
            if settings.database_url is None:
                print("room: cluster status needs --database (or $ROOM_DATABASE_URL): the "
                      "servers of a cluster share one PostgreSQL database", file=sys.stderr)  # fmt: skip
                return EXIT_USAGE
            found = cluster_status(settings)
            print_cluster_status(found, as_json=args.json)
            return EXIT_UNHEALTHY if found["problems"] else EXIT_OK
        if args.command == "cluster" and args.cluster_command == "move":
            settings = _settings(args, database_url=args.database)
            if settings.database_url is None:
                print("room: cluster move needs --database (or $ROOM_DATABASE_URL): home nodes "
                      "are a cluster's, on one PostgreSQL database", file=sys.stderr)  # fmt: skip
                return EXIT_USAGE
            return cluster_move(settings, args.project, args.node)
        if args.command == "login-link":
            return login_link(_settings(args, database_url=args.database))
        if args.command == "member" and args.member_command == "token":
            settings = _settings(args, database_url=args.database)
            return member_token(settings, args.project, args.handle)
        if args.command == "member" and args.member_command == "revoke":
            settings = _settings(args, database_url=args.database)
            return member_revoke(settings, args.project, args.handle)
        if args.command == "users" and args.users_command is not None:
            return users_command(_settings(args, database_url=args.database), args)
        if args.command == "export":
            settings = _settings(args, database_url=args.database)
            return export_project(settings, args.project, args.file)
        if args.command == "import":
            settings = _settings(args, database_url=args.database)
            return import_project(settings, args.file, args.name)
        if args.command == "copy":
            return copy_stores(args.source, args.target, as_json=args.json)
        if args.command == "risk":
            return risk_scan(_settings(args, database_url=args.database), as_json=args.json)
        if args.command == "backup" and args.every is not None:
            if args.every <= 0 or args.keep < 1:
                parser.error("--every takes a positive number of hours and --keep at least 1")
            settings = _settings(
                args, database_url=args.database, attachments_dir=args.attachments_dir
            )
            return scheduled_backups(settings, args.to, args.every, args.keep)
        if args.command == "backup":
            settings = _settings(
                args, database_url=args.database, attachments_dir=args.attachments_dir
            )
            return backup_data(settings, args.to)
        if args.command == "restore":
            settings = _settings(
                args, database_url=args.database, attachments_dir=args.attachments_dir
            )
            return restore_data(settings, args.file)
        if args.command == "agent":
            from room.client import run_agent_command

            command = list(args.argv)
            if command and command[0] == "--":
                command = command[1:]
            if not command:
                parser.error("agent needs a COMMAND after --")
            if args.mcp:
                from room.mcp_bridge import run_agent_mcp

                return run_agent_mcp(args.url, args.token, command)
            return run_agent_command(args.url, args.token, command, state_file=args.state)
        if args.command == "mcp":
            from room.mcp_bridge import run_bridge

            if not args.token:
                parser.error("mcp needs --token or ROOM_TOKEN")
            return run_bridge(args.url, args.token)
    except BackupError as exc:
        code = EXIT_NOT_EMPTY if exc.code == "target_not_empty" else EXIT_BAD_BACKUP
        print(f"room: {exc.message}", file=sys.stderr)
        print(json.dumps({**exc.to_dict(), "exit": code}, ensure_ascii=False), file=sys.stderr)
        return code
    except RoomError as exc:
        print(f"room: {exc.message}", file=sys.stderr)
        return EXIT_UNREACHABLE if exc.code == "database_unreachable" else EXIT_ERROR
    parser.print_help()
    return EXIT_USAGE


def _settings(args: argparse.Namespace, **extra: Any) -> Settings:
    return load_settings({"data": getattr(args, "data", None), **extra})


def serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from room.app import DEMOS, RoomServer, create_app
    from room.errors import LockHeldError
    from room.infra.transport import RoomWebSocketProtocol, http_protocol

    settings = _settings(
        args, host=args.host, port=args.port, database_url=args.database, bus_url=args.bus
    )
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    server = RoomServer(settings, ws_protocol=RoomWebSocketProtocol)
    try:
        opened = server.open()
    except LockHeldError as exc:
        print(f"room: {exc.message}", file=sys.stderr)
        return EXIT_LOCKED
    except RoomError as exc:
        if exc.code == "database_unreachable":
            return unreachable(settings, exc)
        raise
    print(f"Project Room {__version__} — data in {settings.data.resolve()}")
    if opened.demo_project_id is not None:
        name = DEMOS[settings.lang].name
        print(f"Created the demo project {name} (lead agent on the offline builtin/echo route).")
    print(f"  URL:        {settings.origin}/")
    print(f"  Owner login (one-time, {settings.login_link_minutes} min): {server.login_url()}")
    sys.stdout.flush()
    config = uvicorn.Config(
        create_app(settings, server),
        host=settings.host,
        port=settings.port,
        ws=server.ws_protocol,
        http=http_protocol(settings.header_timeout_secs),
        ws_max_size=settings.max_frame_bytes,
        ws_per_message_deflate=False,
        log_level=args.log_level,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    try:
        uvicorn.Server(config).run()
    finally:
        server.close()
    return EXIT_OK


def unreachable(settings: Settings, exc: RoomError) -> int:
    """``serve --database postgresql://…`` that cannot reach the database: exit 5, the message
    and one JSON line on stderr for scripts (the URL without its password); nothing started."""
    from room.store.pg import redact

    said = {
        "backend": "postgresql",
        "database": redact(settings.database_url or ""),
        "error": exc.code,
        "message": exc.message,
        "exit": EXIT_UNREACHABLE,
        "docs": "docs/storage.md",
    }
    print(f"room: {exc.message}", file=sys.stderr)
    print(json.dumps(said, ensure_ascii=False), file=sys.stderr)
    return EXIT_UNREACHABLE


def _open_current(settings: Settings) -> sqlite3.Connection:
    from room.errors import StorageError
    from room.store.migrate import check_version, connect
    from room.store.schema import SCHEMA_VERSION

    if settings.database_url is not None:
        return _open_postgres(settings.database_url)
    if not settings.db_path.exists():
        raise StorageError(
            f"no database in {settings.data}; start the server once with `room serve`"
        )
    conn = connect(settings.db_path, synchronous=settings.synchronous)
    version = check_version(conn, settings.db_path)
    if version != SCHEMA_VERSION:
        conn.close()
        raise StorageError(
            f"the database is at schema {version}, this room expects {SCHEMA_VERSION}; "
            "start the server once to migrate it"
        )
    return conn


def _open_postgres(url: str) -> sqlite3.Connection:
    """The PostgreSQL store for a short command, refused unless fully migrated (by a server)."""
    from room.errors import StorageError
    from room.store.pg import connect
    from room.store.pg_migrate import migration_status

    conn = connect(url)
    status = migration_status(conn)
    if status["pending"] or status["unknown"]:
        conn.close()
        raise StorageError(
            "the PostgreSQL database is not at this room's schema (pending: "
            f"{status['pending'] or 'none'}, unknown: {status['unknown'] or 'none'}); start "
            "`room serve --database …` once to migrate it"
        )
    # The store's functions run on both connections (docs/storage.md).
    return cast(sqlite3.Connection, conn)


def _origin(settings: Settings) -> str:
    try:
        report = json.loads((settings.data / "boot-report.json").read_text(encoding="utf-8"))
        return str(report["settings"]["origin"])
    except (OSError, ValueError, KeyError):
        return settings.origin


def login_link(settings: Settings) -> int:
    from room.actions import auth as auth_actions
    from room.store import run_write

    conn = _open_current(settings)
    try:

        def job(c: sqlite3.Connection, tx: Any) -> str:
            owner = auth_actions.ensure_owner(c, tx)
            return auth_actions.create_login_link(c, tx, owner.id, settings.login_link_minutes)

        secret = run_write(conn, job, now=time.time())
    finally:
        conn.close()
    print(f"{_origin(settings)}/login/{secret}")
    return EXIT_OK


def member_token(settings: Settings, project: str, handle: str) -> int:
    from room.actions import auth as auth_actions
    from room.store import run_write

    conn = _open_current(settings)
    try:
        token = run_write(
            conn, lambda c, tx: auth_actions.issue_agent_token(c, tx, project, handle)
        )
    finally:
        conn.close()
    print(token)
    return EXIT_OK


def cluster_move(settings: Settings, project: str, node: str) -> int:
    """``room cluster move PROJECT NODE`` (docs/cluster.md, "Agents across nodes")."""
    from room.actions import leases as lease_actions
    from room.store import run_write

    node = node.strip()
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", node):
        print(f"room: {node!r} is not a node id (see `room cluster status`)", file=sys.stderr)
        return EXIT_USAGE
    conn = _open_current(settings)
    try:
        project_id, before = run_write(
            conn, lambda c, tx: lease_actions.move_home(c, tx, project, node)
        )
    finally:
        conn.close()
    print(f"project {project_id}: home node {node} (was {before or 'none'})")
    return EXIT_OK


def member_revoke(settings: Settings, project: str, handle: str) -> int:
    from room.actions import auth as auth_actions
    from room.store import run_write

    conn = _open_current(settings)
    try:
        revoked = run_write(
            conn, lambda c, tx: auth_actions.revoke_agent_tokens_by_handle(c, tx, project, handle)
        )
    finally:
        conn.close()
    print(f"revoked {revoked} token(s) of @{handle.lstrip('@')}")
    return EXIT_OK


def users_command(settings: Settings, args: argparse.Namespace) -> int:
    """``room users list|disable|enable|login-link``: each in its own short transaction. A
    refusal prints its message and one JSON line (``code``, ``message``, ``details``, ``exit``)
    on stderr."""
    try:
        return _users_command(settings, args)
    except RoomError as exc:
        code = EXIT_UNREACHABLE if exc.code == "database_unreachable" else EXIT_ERROR
        print(f"room: {exc.message}", file=sys.stderr)
        print(json.dumps({**exc.to_dict(), "exit": code}, ensure_ascii=False), file=sys.stderr)
        return code


def _users_command(settings: Settings, args: argparse.Namespace) -> int:
    from room.actions import users as user_actions
    from room.store import run_write

    conn = _open_current(settings)
    try:
        if args.users_command == "list":
            people = user_actions.list_users(conn, time.time())
            if args.json:
                print(json.dumps({"users": people}, ensure_ascii=False, indent=2))
                return EXIT_OK
            for p in people:
                state = "disabled" if p["disabled_at"] else "active"
                role = " owner" if p["admin"] else ""
                print(
                    f"{p['id']:>5}  @{p['handle']:<20} {p['display_name']}  [{state}{role}]"
                    f"  projects {p['projects']}  sessions {p['sessions']}"
                    f"  last sign-in {p['last_sign_in'] or '-'}"
                )
            return EXIT_OK
        if args.users_command == "login-link":
            minutes = settings.login_link_minutes
            secret = run_write(
                conn, lambda c, tx: user_actions.user_login_link(c, tx, args.who, minutes)
            )
            if isinstance(secret, RoomError):
                raise secret
            print(f"{_origin(settings)}/login/{secret}")
            return EXIT_OK
        change = (
            user_actions.disable_user
            if args.users_command == "disable"
            else (user_actions.enable_user)
        )
        result = run_write(conn, lambda c, tx: change(c, tx, args.who))
    finally:
        conn.close()
    if isinstance(result, RoomError):
        raise result
    print(json.dumps(result, ensure_ascii=False))
    return EXIT_OK


def export_project(settings: Settings, project: str, file: Path) -> int:
    import os

    from room.actions import pack_export
    from room.errors import NotFoundError
    from room.store import projects as projects_store
    from room.store import run_write

    conn = _open_current(settings)
    if settings.database_url is None:  # a whole-database read: keep its pages out of RSS
        conn.execute("PRAGMA mmap_size = 0")
    partial = file.with_name(file.name + ".partial")
    try:
        found = projects_store.find(conn, project)
        if found is None or found.state == "purged":
            raise NotFoundError(f"no project {project!r}", code="no_project")
        with partial.open("wb") as out:
            size = pack_export.write_pack(
                conn, found.id, out, time.time(), settings.attachments_root
            )
            out.flush()
            os.fsync(out.fileno())
        partial.replace(file)
        run_write(
            conn,
            lambda c, tx: pack_export.record_export(c, tx, found.id, ("operator", None)),
        )
    finally:
        partial.unlink(missing_ok=True)
        conn.close()
    print(f"exported project {found.id} ({found.name}) to {file}: {size} bytes")
    return EXIT_OK


def import_project(settings: Settings, file: Path, name: str | None) -> int:
    from room.actions import auth as auth_actions
    from room.actions import pack_import
    from room.errors import BadRequestError
    from room.store import run_write

    if not file.is_file():
        raise BadRequestError(f"no pack at {file}", code="no_file")
    _warn_if_serving(settings, file)
    conn = _open_current(settings)
    if settings.database_url is None:  # a large write: keep the database's pages out of RSS
        conn.execute("PRAGMA mmap_size = 0")
    try:

        def job(c: sqlite3.Connection, tx: Any) -> dict[str, Any]:
            owner = auth_actions.ensure_owner(c, tx)
            with file.open("rb") as pack:
                options = pack_import.ImportOptions(
                    importer=owner, name=name, attachments=settings.attachments_root,
                    attachment_quota=settings.attachment_project_bytes,
                )  # fmt: skip
                return pack_import.import_pack(c, tx, pack_import.read_lines(pack), options)

        result = run_write(conn, job)
    finally:
        conn.close()
    print(
        f"imported project {result['project_id']} ({result['name']}), {result['state']}: "
        + ", ".join(f"{n} {t}" for t, n in result["rows"].items() if n)
    )
    return EXIT_OK


LARGE_PACK_BYTES = 16 * 1024 * 1024


def _warn_if_serving(settings: Settings, file: Path) -> None:
    """A large import holds the write lock for its one transaction: say so when a server (the
    pid in the data folder's lock file, alive) would wait on it."""
    import os

    from room.store.lock import read_holder_pid

    pid = read_holder_pid(settings.lock_path)
    if pid is None or file.stat().st_size < LARGE_PACK_BYTES:
        return
    try:
        os.kill(pid, 0)
    except OSError:
        return
    print(
        f"room: note: a server (pid {pid}) uses this data folder; the import holds the "
        "database's write lock for its one transaction, and the server's writes wait for it "
        "(failing after 5 s). For a pack this large, import over HTTP (POST "
        "/api/projects/import) or stop the server first.",
        file=sys.stderr,
    )


def copy_stores(source: str, target: str, *, as_json: bool = False) -> int:
    """``room copy``: room.actions.store_copy; a refusal is one JSON line on stderr."""
    from room.actions.store_copy import CopyError, copy_store

    try:
        report = copy_store(source, target).to_dict()
    except CopyError as exc:
        code = EXIT_NOT_EMPTY if exc.code == "target_not_empty" else EXIT_ERROR
        print(f"room: {exc.message}", file=sys.stderr)
        print(json.dumps({**exc.to_dict(), "exit": code}, ensure_ascii=False), file=sys.stderr)
        return code
    if as_json:
        print(json.dumps(report, ensure_ascii=False))
        return EXIT_OK
    print(f"Copied {report['source']} → {report['target']} in {report['secs']} s")
    for name, table in report["tables"].items():
        if table["rows"]:
            print(f"  {name:<24} {table['rows']:>10} rows (target {table['target_rows']})")
    print(f"  {report['rows']} rows; every table's rows and digest equal on both")
    print(f"  message bodies sha256 {report['message_bodies_sha256']}")
    return EXIT_OK


def risk_scan(settings: Settings, *, as_json: bool = False) -> int:
    from room.actions.portfolio import scan_job, scan_wire
    from room.store import run_write

    conn = _open_current(settings)
    try:
        result = run_write(conn, scan_job)
    finally:
        conn.close()
    wire = scan_wire(result, None)
    if as_json:
        print(json.dumps({k: v for k, v in wire.items() if k != "text"}, ensure_ascii=False))
    else:
        print(wire["text"])
    return EXIT_UNHEALTHY if wire["red"] else EXIT_OK


def backup_data(settings: Settings, target: Path) -> int:
    from room.actions.backup import remember, write_backup

    if settings.database_url is not None:
        return refuse_postgres_backup(settings, "backup")
    manifest = write_backup(settings.data, target, time.time(), settings.attachments_root)
    remember(settings.data, target, manifest)
    _said_backup(settings, target, manifest)
    return EXIT_OK


def scheduled_backups(settings: Settings, folder: Path, every_hours: float, keep: int) -> int:
    """``room backup --every``: a backup now and every ``every_hours``, the ``keep`` newest kept;
    runs until interrupted. A failed backup is said on stderr and tried again at the next time
    (``room doctor`` and ``/metrics`` show the last good one's age)."""
    from room.actions.backup import backup_into, remember

    if settings.database_url is not None:
        return refuse_postgres_backup(settings, "backup")
    import signal

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # a backup under way removes its temporary files

    signal.signal(signal.SIGTERM, stop)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    period = every_hours * 3600
    print(
        f"backing up {settings.data} into {folder} every {every_hours:g} h, keeping {keep}",
        flush=True,
    )
    try:
        while True:
            started = time.monotonic()
            try:
                target, manifest, removed = backup_into(
                    settings.data, folder, time.time(), keep, settings.attachments_root
                )
            except (RoomError, OSError, sqlite3.Error) as exc:
                print(f"room: backup failed, next try in {every_hours:g} h: {exc}", file=sys.stderr)
            else:
                remember(settings.data, target, manifest, every_hours=every_hours, keep=keep)
                _said_backup(settings, target, manifest)
                for old in removed:
                    print(f"removed {old} (keeping the {keep} newest)")
                sys.stdout.flush()
            time.sleep(max(0.0, period - (time.monotonic() - started)))
    except KeyboardInterrupt:
        return EXIT_OK


def _said_backup(settings: Settings, target: Path, manifest: dict[str, Any]) -> None:
    counts = manifest["counts"]
    found = manifest["attachments"]
    print(
        f"backed up {settings.data} to {target}: {target.stat().st_size} bytes, "
        f"{counts.get('messages', 0)} messages, {counts.get('tasks', 0)} tasks, "
        f"{counts.get('memory_entries', 0)} memory records, {found['included']} attachment files "
        f"(schema {manifest['schema_version']}; the search index and workspaces are not in it)"
    )
    if found["missing"]:
        print(
            f"room: warning: {len(found['missing'])} attachment file(s) the database references "
            f"were not in {settings.attachments_root} (listed in the manifest, 'missing')",
            file=sys.stderr,
        )


def restore_data(settings: Settings, archive: Path) -> int:
    from room.actions.backup import restore

    if settings.database_url is not None:
        return refuse_postgres_backup(settings, "restore")
    done = restore(archive, settings.data, time.time(), settings.attachments_dir)
    counts = done.manifest["counts"]
    elsewhere = settings.attachments_dir is not None
    print(
        f"restored {archive} (made {done.manifest['created']}, room "
        f"{done.manifest['room_version']}) into {settings.data}: {counts.get('messages', 0)} "
        f"messages, {counts.get('tasks', 0)} tasks, {counts.get('memory_entries', 0)} memory "
        f"records, {done.manifest['attachments']['included']} attachment files"
        + (f" (in {settings.attachments_dir})" if elsewhere else "")
        + f"; {done.sessions_ended} session(s) signed out. Start it with "
        f"`room serve --data {settings.data}`"
        + (f" and ROOM_ATTACHMENTS_DIR={settings.attachments_dir}" if elsewhere else "")
        + " (the search index is rebuilt then)."
    )
    return EXIT_OK


def refuse_postgres_backup(settings: Settings, command: str) -> int:
    """``backup``/``restore`` on PostgreSQL: the database is the operator's to dump with
    PostgreSQL's own tools; say exactly what to run, touch nothing."""
    from room.store.pg import redact

    url = redact(settings.database_url or "")
    # The attachments' folder: a cluster's shared attachments_dir, else the data folder's.
    root = settings.attachments_root
    if command == "backup":
        steps = [
            f"pg_dump --format=custom --file=room.pgdump '{url}'",
            f"tar -C '{root.parent}' --exclude='{root.name}/tmp' -cf attachments.tar '{root.name}'",
        ]
    else:
        steps = [
            f"pg_restore --no-owner --dbname='{url}' room.pgdump (into a new, empty database)",
            f"mkdir -m 700 -p '{root.parent}' && tar -C '{root.parent}' -xf attachments.tar",
        ]
    message = (
        f"room {command} copies the SQLite data folder only; for PostgreSQL use its own tools "
        '(docs/backup.md, "PostgreSQL"): ' + "; then ".join(steps) + ". Nothing was done."
    )
    refusal = {
        "backend": "postgresql",
        "database": url,
        "error": "postgres_backup_external",
        "message": message,
        "run": steps,
        "exit": EXIT_NOT_SERVED,
        "docs": "docs/backup.md",
    }
    print(f"room: {message}", file=sys.stderr)
    print(json.dumps(refusal, ensure_ascii=False), file=sys.stderr)
    return EXIT_NOT_SERVED
