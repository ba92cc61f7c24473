"""SQL of model requests: the route each really observed, its latency and tokens."""

from __future__ import annotations

from typing import Any

from room.rules.entities import iso
from room.store import brakes
from room.store.dialect import Connection

STOPPED = "stopped"  # error_code of a call abandoned because a person stopped the turn


def record_request(conn: Connection, **row: Any) -> int:
    """One model request; ``research_id`` when a research session made it (its usage is the
    research's, and the project's)."""
    row = {"research_id": None, **row}
    cur = conn.execute(
        "INSERT INTO model_requests (project_id, member_id, turn_id, model_id, route_source,"
        " provider, model_reported, latency_ms, input_tokens, output_tokens, usage_reported, ok,"
        " error_code, attempts, research_id, created_at) VALUES (:project_id, :member_id,"
        " :turn_id, :model_id, :route_source, :provider, :model_reported, :latency_ms,"
        " :input_tokens, :output_tokens, :usage_reported, :ok, :error_code, :attempts,"
        " :research_id, :now) RETURNING id",
        row,
    )
    request_id = int(cur.fetchone()[0])
    tokens = int(row.get("input_tokens", 0)) + int(row.get("output_tokens", 0))
    if tokens:
        brakes.add_tokens(conn, int(row["project_id"]), tokens)
    return request_id


def observed_route(conn: Connection, member_id: int) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT model_id, route_source, provider, model_reported, latency_ms, input_tokens,"
        " output_tokens, usage_reported, ok, error_code, attempts, created_at FROM model_requests"
        " WHERE member_id = :m ORDER BY id DESC LIMIT 1",
        {"m": member_id},
    ).fetchone()
    if row is None:
        return None
    keys = [
        "model_id",
        "route_source",
        "provider",
        "model_reported",
        "latency_ms",
        "input_tokens",
        "output_tokens",
        "usage_reported",
        "ok",
        "error_code",
        "attempts",
        "at",
    ]
    data = dict(zip(keys, row, strict=True))
    data["at"] = iso(data["at"])
    data["ok"] = bool(data["ok"])
    data["usage_reported"] = bool(data["usage_reported"])
    return data


def usage(conn: Connection, project_id: int) -> dict[str, Any]:
    """A project's model calls and the tokens the providers reported, per member and in total.

    Every call counts, answered or not: ``failed_requests`` gave no answer (a provider error, or
    ``stopped_requests``: abandoned because a person stopped the turn), and their reported
    tokens are in the sums; ``attempts`` counts the HTTP requests sent (retries included);
    ``requests_without_usage`` are calls whose provider reported no tokens."""
    # Counts of a condition are FILTERed counts, and every sum goes through int(): PostgreSQL
    # sums no booleans and returns its integer sums as numeric (Decimal).
    members = {
        int(r[0]): {
            "requests": int(r[1]),
            "input_tokens": int(r[2]),
            "output_tokens": int(r[3]),
            "attempts": int(r[4]),
            "failed_requests": int(r[5]),
        }
        for r in conn.execute(
            "SELECT member_id, count(*), sum(input_tokens), sum(output_tokens), sum(attempts),"
            " count(*) FILTER (WHERE ok = 0) FROM model_requests WHERE project_id = :p"
            " GROUP BY member_id",
            {"p": project_id},
        )
    }
    total = conn.execute(
        "SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),"
        " count(*) FILTER (WHERE usage_reported = 0), coalesce(sum(attempts), 0),"
        " count(*) FILTER (WHERE ok = 0), count(*) FILTER (WHERE error_code = :stopped)"
        " FROM model_requests WHERE project_id = :p",
        {"p": project_id, "stopped": STOPPED},
    ).fetchone()
    return {
        "requests": int(total[0]),
        "input_tokens": int(total[1]),
        "output_tokens": int(total[2]),
        "requests_without_usage": int(total[3]),
        "attempts": int(total[4]),
        "failed_requests": int(total[5]),
        "stopped_requests": int(total[6]),
        "members": {str(k): v for k, v in members.items()},
    }
