"""Result rows, percentiles and the median-of-runs aggregation used by every workload.

A workload returns :class:`Row` objects; each carries its value, its reference (a number measured
in the same run, or a label) and a target such as ``≥ 10000`` or ``≤ 5``. ``ok`` is derived from
the value and the target, so the median of several runs is judged the same way as one run.
Rows from other modules (plain dicts with ``workload, case, metric, value, reference, target,
ok``) are accepted too.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

_TARGET = re.compile(r"^\s*(≤|<=|≥|>=|=|==)\s*([-+0-9.eE,]+)")


@dataclass(slots=True)
class Row:
    workload: str
    case: str
    metric: str
    value: float | None
    reference: float | None = None
    reference_label: str = ""
    target: str = ""
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool | None:
        return judge(self.value, self.target)

    def key(self) -> tuple[str, str, str]:
        return (self.workload, self.case, self.metric)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        return data


def judge(value: float | None, target: str) -> bool | None:
    """``True``/``False`` when the target is a comparison (``≤ 5``, ``≥ 10000``), else ``None``."""
    found = _TARGET.match(target or "")
    if found is None or value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    op, raw = found.groups()
    limit = float(raw.replace(",", ""))
    if op in ("≤", "<="):
        return value <= limit
    if op in ("≥", ">="):
        return value >= limit
    return value == limit


def from_dict(data: dict[str, Any]) -> Row:
    """A row in the shared dict shape (e.g. from ``benchlib.mentions``)."""
    ref = data.get("reference")
    value = data.get("value")
    return Row(
        workload=str(data.get("workload", "")),
        case=str(data.get("case", "")),
        metric=str(data.get("metric", "")),
        value=float(value) if isinstance(value, int | float) else None,
        reference=float(ref) if isinstance(ref, int | float) else None,
        reference_label="" if isinstance(ref, int | float) else str(ref or ""),
        target=str(data.get("target", "")),
    )


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of an already sorted sequence."""
    if not sorted_values:
        return math.nan
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    frac = pos - low
    return float(sorted_values[low]) * (1 - frac) + float(sorted_values[high]) * frac


def quantiles(values: Iterable[float], qs: Sequence[float]) -> list[float]:
    ordered = sorted(values)
    return [percentile(ordered, q) for q in qs]


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(present) if present else None


NOISE_CASE = "(machine noise)"
NOISE_METRIC = "other processes' CPU % during it"  # what --max-noise judges


def quiet_runs(runs: list[list[Row]], max_noise: float | None) -> dict[str, list[int]]:
    """Per workload, the runs whose background load stayed at most ``max_noise`` % of a core.

    When no run of a workload was quiet enough, all of its runs are used.
    """
    noise: dict[str, dict[int, float]] = {}
    for i, rows in enumerate(runs):
        for row in rows:
            if row.case == NOISE_CASE and row.metric == NOISE_METRIC and row.value is not None:
                noise.setdefault(row.workload, {})[i] = row.value
    chosen: dict[str, list[int]] = {}
    for workload, by_run in noise.items():
        quiet = [i for i, v in sorted(by_run.items()) if max_noise is None or v <= max_noise]
        chosen[workload] = quiet or sorted(by_run)
    return chosen


def median_rows(runs: list[list[Row]], max_noise: float | None = None) -> list[Row]:
    """One row per (workload, case, metric): the median value and reference over the runs.

    With ``max_noise``, a workload's runs during which other processes used more than that
    share of a core are left out of its median (unless every run was that noisy); each row's
    ``extra`` keeps every run's value and which runs were used.
    """
    use = quiet_runs(runs, max_noise)
    order: list[tuple[str, str, str]] = []
    grouped: dict[tuple[str, str, str], list[tuple[int, Row]]] = {}
    for i, rows in enumerate(runs):
        for row in rows:
            if row.key() not in grouped:
                order.append(row.key())
                grouped[row.key()] = []
            grouped[row.key()].append((i, row))
    out = []
    for key in order:
        indexed = grouped[key]
        wanted = use.get(key[0])
        picked = [r for i, r in indexed if wanted is None or i in wanted] or [r for _, r in indexed]
        first = picked[-1]
        out.append(
            Row(
                workload=first.workload,
                case=first.case,
                metric=first.metric,
                value=_median([r.value for r in picked]),
                reference=_median([r.reference for r in picked]),
                reference_label=first.reference_label,
                target=first.target,
                note=first.note,
                extra={
                    "runs": [r.value for _, r in indexed],
                    "used_runs": [i + 1 for i, _ in indexed if wanted is None or i in wanted],
                },
            )
        )
    return out
