"""The printed table: ``workload | case | metric | value | reference | target | ok``."""

from __future__ import annotations

import math

from benchlib.stats import Row

COLUMNS = ("workload", "case", "metric", "value", "reference", "target", "ok")


def number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def reference_text(row: Row) -> str:
    label = row.reference_label
    if "{ref" in label:
        if row.reference is None:
            return label.split(":", 1)[0] + ": —"
        return label.format(ref=row.reference)
    if row.reference is not None:
        return f"{number(row.reference)} {label}".strip()
    return label


def cells(row: Row) -> list[str]:
    ok = row.ok
    mark = "" if ok is None else ("yes" if ok else "NO")
    value = number(row.value) if row.value is not None or not row.note else row.note
    return [row.workload, row.case, row.metric, value, reference_text(row), row.target, mark]


def render(rows: list[Row], title: str) -> str:
    table = [list(COLUMNS), *(cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    numeric = {3}

    def line(values: list[str]) -> str:
        parts = [
            v.rjust(widths[i]) if i in numeric else v.ljust(widths[i]) for i, v in enumerate(values)
        ]
        return "| " + " | ".join(parts) + " |"

    out = [title, line(table[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    previous = ""
    for values in table[1:]:
        shown = list(values)
        if values[0] == previous:
            shown[0] = ""
        previous = values[0]
        out.append(line(shown))
    return "\n".join(out)
