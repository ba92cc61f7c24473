"""docs/operators.md's table of metrics, and what a real ``/metrics`` exposes, side by side
(tests/test_metrics_doc.py, tests/test_cluster_health.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.doctables import read_table

SOURCE = Path(__file__).resolve().parents[2] / "room" / "metrics.py"
TYPES = {"counter", "gauge", "histogram"}
WHEN = {"always", "postgresql", "bus", "backup"}


@dataclass(frozen=True, slots=True)
class Metric:
    name: str  # as scraped: a counter with its ``_total``
    type: str
    labels: frozenset[str]


def documented() -> dict[str, tuple[Metric, str]]:
    """The table's rows: each metric and when it appears."""
    header, rows = read_table("operators.md", "metrics")
    assert header == ["metric", "type", "labels", "when", "meaning"], header
    found: dict[str, tuple[Metric, str]] = {}
    for name, kind, labels, when, meaning in rows:
        assert name not in found, f"{name} listed twice"
        assert kind in TYPES and when in WHEN and meaning, (name, kind, when)
        names = frozenset(n.strip() for n in labels.replace("`", "").split(",") if n.strip())
        found[name] = (Metric(name, kind, names), when)
    return found


def exposed(text: str) -> dict[str, Metric]:
    """The families of a ``/metrics`` answer, named as a query names them (``_total`` on a
    counter), with the labels their samples carry (a histogram's ``le`` left out)."""
    found: dict[str, Metric] = {}
    for family in text_string_to_metric_families(text):
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {key for sample in family.samples for key in sample.labels if key != "le"}
        found[name] = Metric(name, family.type, frozenset(labels))
    return found


def in_source() -> set[str]:
    """Every metric name room/metrics.py makes (as its families are named: no ``_total``)."""
    return set(re.findall(r'"(room_[a-z_]+)"', SOURCE.read_text(encoding="utf-8")))


def undocumented(scraped: dict[str, Metric]) -> list[str]:
    """What a scrape shows that the table lacks or describes otherwise (type; the labels,
    where its samples carry any)."""
    table = documented()
    wrong = []
    for name, metric in sorted(scraped.items()):
        if name not in table:
            wrong.append(f"{name} ({metric.type}) is not in docs/operators.md's table")
            continue
        listed = table[name][0]
        if listed.type != metric.type:
            wrong.append(f"{name} is a {metric.type}, the table says {listed.type}")
        if metric.labels and metric.labels != listed.labels:
            wrong.append(f"{name}'s labels are {sorted(metric.labels)}, the table says "
                         f"{sorted(listed.labels)}")  # fmt: skip
    return wrong
