"""``room doctor``: read the boot reports and the database (never write), print a health summary.

Healthy means: the last start reached ``ready`` (or the server is running now), the database
opens, its schema is the one this code expects, ``PRAGMA quick_check`` says ok, and nobody but
its owner may read the data folder (room.infra.perms), and a scheduled backup
(``room backup --every``) is not more than two periods old.

With ``database_url`` (``--database``, ``ROOM_DATABASE_URL``) the database is PostgreSQL: the
summary names its server version and the migrations applied (pending ones are applied by the next
`room serve`: docs/storage.md); a database that cannot be reached raises
:class:`~room.errors.StorageError` (``database_unreachable``: exit 5).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any, cast

from room.infra import boot, perms
from room.infra.boot import last_start, read_trace
from room.infra.pdfpreview import find_poppler
from room.settings import Settings
from room.store.lock import is_locked, read_holder_pid
from room.store.migrate import integrity_problems
from room.store.schema import SCHEMA_VERSION


def collect(settings: Settings) -> dict[str, Any]:
    data = settings.data
    problems: list[str] = []
    summary: dict[str, Any] = {"data": str(data.resolve()), "problems": problems}
    running = is_locked(settings.lock_path)
    summary["server"] = {
        "running": running,
        "pid": read_holder_pid(settings.lock_path) if running else None,
    }
    try:
        report = json.loads((data / "boot-report.json").read_text(encoding="utf-8"))
        summary["report"] = {
            "room_version": report.get("room_version"),
            "python": report.get("python", {}).get("version"),
            "sqlite": report.get("sqlite", {}).get("library"),
            "started_at": report.get("started_at"),
            "activations": len(report.get("activations", [])),
            "recovery": report.get("recovery", {}),
            "workspaces": report.get("workspaces", {}),
        }
        shared = report.get("workspaces", {}).get("overlaps", {}).get("count", 0)
        if shared:
            problems.append(
                f"{shared} pairs of live projects share workspace folders, set before a folder "
                "belonged to one project (boot-report.json: workspaces.overlaps); an owner of "
                "each sets a folder of its own"
            )
    except (OSError, ValueError):
        report = {}
        problems.append("no boot-report.json: the server has not started here yet")
    summary["pdf_previews"] = pdf_previews(report.get("capabilities", {}).get("pdf_previews"))
    wide = [
        f"{path} is {mode:04o}"
        for path, allowed in perms.private_paths(data)
        if (mode := perms.too_wide(path, allowed)) is not None
    ]
    if wide:
        problems.append(
            "the data folder holds every conversation and token hash, but others may read it ("
            + "; ".join(wide)
            + "): the folder should be 0700 and its files 0600 (the server narrows them at start)"
        )
    trace = read_trace(data)
    holder = summary["server"]["pid"]
    # A running server is judged by its own start; a later start that died (a second instance
    # refused at the lock) is shown, not counted against it.
    phases = last_start(trace, holder) if holder is not None else []
    phases = phases or last_start(trace)
    summary["last_start"] = [p.get("phase") for p in phases]
    latest = last_start(trace)
    if latest and latest is not phases and latest[0].get("pid") != holder:
        summary["refused_start"] = {
            "pid": latest[0].get("pid"),
            "phases": [p.get("phase") for p in latest],
            "detail": latest[-1].get("detail"),
        }
    if phases and phases[-1].get("phase") not in ("ready", "stopping", "stopped"):
        failed = [p for p in phases if not p.get("ok", True)]
        detail = failed[-1].get("detail") if failed else {}
        problems.append(f"the last start stopped at phase {phases[-1].get('phase')!r} ({detail})")
    summary["backup"] = _last_backup(data, problems)
    if settings.database_url is not None:
        node_file = data / "node-id"  # a cluster's node (docs/cluster.md): `room cluster status`
        summary["node"] = node_file.read_text().strip() if node_file.exists() else None
        if settings.bus_url is not None:
            from room.store.pg import redact

            summary["bus"] = redact(settings.bus_url)
        summary["database"] = _postgres(settings.database_url, problems)
        summary["cluster"] = _cluster(settings, report if running else {}, problems)
        return summary
    if not settings.db_path.exists():
        problems.append(f"no database at {settings.db_path}")
        return summary
    try:
        conn = sqlite3.connect(f"file:{settings.db_path}?mode=ro", uri=True)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            check = "; ".join(integrity_problems(conn, "quick_check")) or "ok"
            counts = {
                table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("projects", "members", "messages", "deliveries")
            }
            open_deliveries = dict(
                conn.execute("SELECT state, count(*) FROM deliveries GROUP BY state").fetchall()
            )
        finally:
            conn.close()
    except sqlite3.Error as exc:
        problems.append(f"the database does not open: {exc}")
        return summary
    summary["database"] = {
        "backend": "sqlite",
        "version": sqlite3.sqlite_version,
        "schema_version": version,
        "expected_schema": SCHEMA_VERSION,
        "quick_check": check,
        "counts": counts,
        "deliveries": open_deliveries,
    }
    if check != "ok":
        problems.append(f"quick_check: {check}")
    if version > SCHEMA_VERSION:
        problems.append(f"the database (schema {version}) is newer than this code")
    elif version < SCHEMA_VERSION and not running:
        problems.append(f"schema {version} < {SCHEMA_VERSION}: start the server to migrate")
    if open_deliveries.get("unknown"):
        problems.append(f"{open_deliveries['unknown']} deliveries await reconciliation")
    return summary


def pdf_previews(at_start: str | None) -> str:
    """One line on PDF previews (optional: without them a PDF is a download only, never a
    problem): whether poppler is installed now, and what the last start found."""
    if None in find_poppler():
        return (
            "off: pdfinfo/pdftoppm not found (Debian: apt-get install poppler-utils); PDFs are "
            "downloads without a preview"
        )
    if at_start == "no_sandbox":
        return (
            "off: no sandbox at the last start (bubblewrap); PDFs are parsed only inside it, "
            "so they are downloads without a preview"
        )
    if at_start == "on":
        return "on: a PDF's first page is drawn by poppler in the sandbox"
    return "poppler-utils found: on from the next start where the sandbox works"


def _last_backup(data: Path, problems: list[str]) -> dict[str, Any] | None:
    """The last ``room backup`` (room.infra.boot); one scheduled (``--every``) that is more than
    two periods old is a problem: the schedule has stopped or its backups fail."""
    last = boot.read_last_backup(data)
    if last is None:
        return None
    age = max(0.0, time.time() - float(last["at"]))
    every = last.get("every_hours")
    if isinstance(every, int | float) and age > 2 * every * 3600:
        problems.append(
            f"the last backup ({last.get('file')}) is {age / 3600:.1f} h old, but backups run "
            f"every {every:g} h: is `room backup --every` still running?"
        )
    return {**last, "age_secs": round(age)}


def _cluster(settings: Settings, report: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """The nodes as ``room cluster status`` finds them (the database, and the bus when given),
    and the running server's own view from its boot report (``seen_by_server``: its bus up or
    down, the peers it heard and when). A home of projects not heard is a problem: its
    projects' agents wait until it is back or they are moved (docs/cluster.md)."""
    status = cluster_status(settings)
    problems.extend(status.pop("problems"))
    view = report.get("cluster")
    status["seen_by_server"] = view if isinstance(view, dict) else None
    reached = bool(status["bus"] and status["bus"]["reached"])
    if not reached and status["seen_by_server"] is not None:
        # Doctor heard nothing itself (no bus given, or it cannot reach it): the server's own
        # view of its peers, as it last wrote it.
        status["nodes"] = status["seen_by_server"]["peers"]
    if status["seen_by_server"] is not None and not status["seen_by_server"]["bus"]["up"]:
        problems.append(
            f"the server's bus {status['seen_by_server']['bus']['url']} is down: the nodes "
            "see each other's events on the database poll only, and cannot tell a dead home "
            "node from a live one"
        )
    heard_now = reached or status["seen_by_server"] is not None
    for found in status["nodes"]:
        if heard_now and not found["live"] and found["home_of"]["count"]:
            problems.append(
                f"node {found['node']} is home of {found['home_of']['count']} project(s) but "
                "is not heard on the bus: their agents wait (`room cluster move` moves them)"
            )
    return status


def _postgres(url: str, problems: list[str]) -> dict[str, Any]:
    from room.store.pg import connect, redact, server_version
    from room.store.pg_migrate import migration_status

    conn = connect(url)  # StorageError (database_unreachable) when it cannot be reached
    try:
        version, migrations = server_version(conn), migration_status(conn)
    finally:
        conn.close()
    if migrations["unknown"]:
        problems.append(
            f"the database has migrations this code does not know: {migrations['unknown']}"
        )
    return {
        "backend": "postgresql",
        "database": redact(url),
        "version": version,
        "migrations": migrations,
    }


def run_doctor(settings: Settings, *, as_json: bool = False) -> bool:
    """Print the health summary; True when healthy."""
    summary = collect(settings)
    if as_json:
        print(json.dumps(summary, ensure_ascii=False, indent=2, default=str))
    else:
        print(f"data:     {summary['data']}")
        server = summary["server"]
        print(
            f"server:   {'running, pid ' + str(server['pid']) if server['running'] else 'stopped'}"
        )
        if "report" in summary:
            r = summary["report"]
            print(f"version:  room {r['room_version']}, Python {r['python']}, SQLite {r['sqlite']}")
        if summary.get("last_start"):
            print(f"last start: {' → '.join(summary['last_start'])}")
        if refused := summary.get("refused_start"):
            print(
                f"refused:  a later start (pid {refused['pid']}) stopped at "
                f"{refused['phases'][-1]!r}: {refused['detail']}"
            )
        if summary.get("node") or summary.get("cluster"):
            _print_cluster(summary)
        d = summary.get("database")
        if d and d["backend"] == "postgresql":
            m = d["migrations"]
            print(
                f"database: postgresql {d['version']} at {d['database']}, migrations applied "
                f"{len(m['applied'])}, pending {len(m['pending'])}"
            )
        elif d:
            print(
                f"database: sqlite {d['version']}, schema {d['schema_version']}, "
                f"quick_check {d['quick_check']}, {d['counts']}"
            )
            if d["deliveries"]:
                print(f"ledger:   {d['deliveries']}")
        print(f"pdf:      {summary['pdf_previews']}")
        if b := summary.get("backup"):
            every = f", every {b['every_hours']:g} h" if b.get("every_hours") else ""
            print(f"backup:   {b['age_secs'] / 3600:.1f} h ago, {b['file']}{every}")
        else:
            print("backup:   none yet (room backup --to FILE; docs/backup.md)")
        for problem in summary["problems"]:
            print(f"PROBLEM:  {problem}")
        print("healthy" if not summary["problems"] else "needs attention")
    return not summary["problems"]


def _print_cluster(summary: dict[str, Any]) -> None:
    cluster = summary.get("cluster") or {}
    view = cluster.get("seen_by_server")
    at = f" at {view['address']}" if view and view.get("address") else ""
    print(f"node:     {summary.get('node') or '(not served yet)'}{at}")
    if cluster.get("cluster"):
        print(f"cluster:  {cluster['cluster']}")
    bus = cluster.get("bus")
    said = []
    if bus is not None:
        said.append("reached" if bus["reached"] else "NOT reached")
    if view is not None:
        ago = max(0.0, time.time() - float(view["updated_at"]))
        said.append(f"the server's link {'up' if view['bus']['up'] else 'DOWN'} {ago:.0f} s ago")
    shown = summary.get("bus") or (view["bus"]["url"] if view else None)
    print(f"bus:      {shown or 'none'}{' (' + ', '.join(said) + ')' if said else ''}")
    nodes = cluster.get("nodes") or []
    if nodes:
        print("peers:")
        for line in node_lines(nodes, heard_now=bus is not None or view is not None):
            print(line)


CLUSTER_MIGRATION = "0031_cluster_id"  # room.store.schema_cluster


def cluster_status(settings: Settings) -> dict[str, Any]:
    """``room cluster status`` (docs/cluster.md): this data folder's node id, the database and
    its running turns by node, and the nodes heard on the bus (their heartbeats, listened to for
    a little over one period). Only reads; a node's turns are those naming it (``turns.owner``).

    ``nodes`` lists every node heard or home of a project: when it was heard, the address its
    heartbeats give, its running turns and the projects it is home of (room.infra.bus)."""
    from room.infra.bus import describe_nodes
    from room.store import cluster as cluster_store
    from room.store import leases as leases_store
    from room.store.pg import connect, redact, server_version
    from room.store.pg_migrate import applied_migrations

    assert settings.database_url is not None  # the command refuses to run without it
    problems: list[str] = []
    node_file = settings.data / "node-id"
    here = node_file.read_text(encoding="utf-8").strip() if node_file.exists() else None
    status: dict[str, Any] = {"node": here, "database": redact(settings.database_url)}
    conn = connect(settings.database_url)  # StorageError (database_unreachable)
    try:
        typed = cast(sqlite3.Connection, conn)  # the store's functions run on both
        version = server_version(conn)
        # None on a database not migrated yet (no server of this release has started on it).
        cluster = (
            cluster_store.cluster_id(typed)
            if CLUSTER_MIGRATION in applied_migrations(conn)
            else None
        )
        running = leases_store.running_by_node(typed)
        homes = leases_store.homes_by_node(typed)
    finally:
        conn.close()
    status["database_server"] = {"backend": "postgresql", "version": version}
    # The database's id: its nodes' bus subjects are room.<cluster>.… (docs/cluster.md).
    status["cluster"] = cluster
    status["running_turns"] = {owner or "(none)": count for owner, count in running.items()}
    # Projects by home node: where their workspaces are and their agents run (a home that is
    # not heard on the bus holds its projects' agents: `room cluster move`).
    status["homes"] = {node or "(none)": found["count"] for node, found in homes.items()}
    status["bus"] = None
    heard: list[dict[str, Any]] = []
    if cluster is None:
        problems.append(
            f"the database has no cluster id yet (migration {CLUSTER_MIGRATION}): start a "
            "server of this release on it; its nodes' subjects cannot be listened to"
        )
    elif settings.bus_url is not None:
        heard, error = asyncio.run(_listen_for_nodes(settings.bus_url, cluster))
        shown = redact(settings.bus_url)
        status["bus"] = {
            "url": shown,
            "reached": error is None,
            "nodes": sorted(h["node"] for h in heard),
        }
        if error is not None:
            problems.append(f"the bus {shown} cannot be reached: {error}")
    status["nodes"] = [
        {**found, "this": found["node"] == here} for found in describe_nodes(heard, homes, running)
    ]
    status["problems"] = problems
    return status


async def _listen_for_nodes(url: str, cluster: str) -> tuple[list[dict[str, Any]], str | None]:
    """The nodes of ``cluster`` heard on the bus within a little over one heartbeat, as
    :meth:`room.infra.bus.Bus.seen` gives them; and the error when the bus cannot be reached."""
    import nats

    from room.infra.bus import HEARTBEAT_SECS, check_cluster, nodes_subject

    heard: dict[str, dict[str, Any]] = {}

    async def on_msg(msg: Any) -> None:
        try:
            hint = json.loads(msg.data)
        except ValueError:
            return
        if isinstance(hint, dict) and hint.get("k") == "hb":
            node = str(hint.get("n"))
            address = hint.get("ad")
            if not isinstance(address, str):  # a presence update: the address said before
                address = heard.get(node, {}).get("address")
            heard[node] = {
                "node": node,
                "last_heard": round(time.time(), 3),
                "address": address,
                "live": True,
            }

    try:
        nc = await asyncio.wait_for(
            nats.connect(servers=[url], allow_reconnect=False, connect_timeout=2),
            timeout=5,
        )
    except Exception as exc:  # nats-py's NoServersError, the socket's errors, the timeout
        return [], str(exc) or type(exc).__name__
    try:
        await nc.subscribe(nodes_subject(check_cluster(cluster)), cb=on_msg)
        await asyncio.sleep(HEARTBEAT_SECS + 0.5)
    finally:
        await nc.close()
    return [heard[node] for node in sorted(heard)], None


def print_cluster_status(status: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(status, ensure_ascii=False, indent=2))
        return
    print(f"node:     {status['node'] or '(this data folder has not served yet)'}")
    server = status["database_server"]
    print(f"database: {status['database']} ({server['backend']} {server['version']})")
    if status["cluster"] is not None:
        print(f"cluster:  {status['cluster']} (its bus subjects: room.{status['cluster']}.…)")
    bus = status["bus"]
    if bus is None:
        print("bus:      none (the servers poll the database for each other's events)")
    else:
        print(f"bus:      {bus['url']} ({'reached' if bus['reached'] else 'NOT reached'})")
    for line in node_lines(status["nodes"], heard_now=bus is not None):
        print(line)
    for problem in status["problems"]:
        print(f"problem:  {problem}")


def node_lines(nodes: list[dict[str, Any]], *, heard_now: bool) -> list[str]:
    """One line per node (room.infra.bus.describe_nodes): up or not heard, where it listens,
    its running turns and the projects it is home of."""
    lines = []
    for found in nodes:
        mark = " (this data folder's)" if found.get("this") else ""
        if found["live"]:
            state = "up"
        elif found["last_heard"] is not None:
            ago = max(0.0, time.time() - float(found["last_heard"]))
            state = f"not heard for {ago:.0f} s"
        else:
            state = "not heard" if heard_now else "unknown (no bus)"
        at = f" at {found['address']}" if found.get("address") else ""
        homes = found["home_of"]
        listed = ", ".join(f"{p['id']} {p['name']}" for p in homes["projects"])
        more = "…" if homes["count"] > len(homes["projects"]) else ""
        projects = f" ({listed}{more})" if listed else ""
        lines.append(
            f"  node {found['node']}{mark}: {state}{at}, {found['running_turns']} running "
            f"turn(s), home of {homes['count']} project(s){projects}"
        )
    return lines
