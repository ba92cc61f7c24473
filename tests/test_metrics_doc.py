"""Every metric ``/metrics`` exposes is in docs/operators.md's table (name, type, labels, when,
meaning), and the table names none that does not exist.

A real SQLite server is scraped after a message went through its lead agent (so the labelled
families have samples) and a ``room backup`` of its folder (so the backup gauges show); the
metrics only a server on PostgreSQL or with a bus exposes are checked here against
room/metrics.py's names, and scraped from a real cluster node by tests/test_cluster_health.py."""

from __future__ import annotations

import contextlib
import io
import uuid
from pathlib import Path

import anyio
import pytest

from room.cli import main as room_main
from tests.support.metricsdoc import documented, exposed, in_source, undocumented
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def test_every_scraped_metric_is_in_the_table_and_every_listed_one_exists(
    server: ServerProcess, tmp_path: Path
) -> None:
    owner = server.login()
    project = server.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"]
    status, sent = server.request(
        "POST", f"/api/projects/{project}/messages",
        {"body": "你好", "client_txn_id": uuid.uuid4().hex}, headers=owner.headers,
    )  # fmt: skip
    assert status == 201, sent
    with anyio.fail_after(30):  # the lead's turn (builtin/echo) answers: a turn, a model call
        while True:
            _, text = server.request("GET", "/metrics", cookie=owner.cookie)
            scraped = exposed(str(text))
            if "room_turns_total" in scraped and "room_model_calls_total" in scraped:
                break
            await anyio.sleep(0.2)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = room_main(["backup", "--to", str(tmp_path / "b.tar"), "--data", str(server.data)])
    assert code == 0
    status, text = server.request("GET", "/metrics", cookie=owner.cookie)
    assert status == 200, text
    scraped = exposed(str(text))
    # The server alone exposes what the table says is always there, and the backup's.
    table = documented()
    here = {name for name, (_, when) in table.items() if when in ("always", "backup")}
    assert set(scraped) == here, sorted(set(scraped) ^ here)
    assert scraped["room_deliveries"].labels == {"state"}  # samples came: labels checked
    assert scraped["room_model_tokens_total"].labels == {"provider", "direction"}
    assert undocumented(scraped) == []
    # The rest of the table: exactly the names room/metrics.py makes (a counter's family is
    # named without its `_total`).
    listed = {
        name.removesuffix("_total") if metric.type == "counter" else name
        for name, (metric, _) in table.items()
    }
    assert listed == in_source(), sorted(listed ^ in_source())


def test_the_check_finds_a_missing_or_mistyped_metric() -> None:
    """The comparison itself: a family the table lacks, or whose type or labels differ."""
    text = (
        "# HELP room_connections_total x\n# TYPE room_connections_total counter\n"
        "room_connections_total 1.0\n"
        "# HELP room_nonesuch x\n# TYPE room_nonesuch gauge\nroom_nonesuch 1.0\n"
        '# HELP room_deliveries x\n# TYPE room_deliveries gauge\nroom_deliveries{kind="a"} 1.0\n'
        "# HELP room_writer_batch_size x\n# TYPE room_writer_batch_size gauge\n"
        "room_writer_batch_size 1.0\n"
        "# HELP room_subscribers x\n# TYPE room_subscribers gauge\nroom_subscribers 1.0\n"
    )
    assert undocumented(exposed(text)) == [
        "room_connections_total (counter) is not in docs/operators.md's table",
        "room_deliveries's labels are ['kind'], the table says ['state']",
        "room_nonesuch (gauge) is not in docs/operators.md's table",
        "room_writer_batch_size is a gauge, the table says histogram",
    ]
