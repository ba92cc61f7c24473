"""Building the project records section every agent turn is given (``room.rules.injection.build``).

Three memories, each built ``ROUNDS`` times per sample and timed by the fastest of those (as
``timeit`` advises; garbage collection off), over ``SAMPLES`` distinct records:

* ``fits``: about 62 KB of records that fit the default 64,000-byte budget whole (step 1) — the
  full-budget build the issue asks to keep at p99 ≤ 2 ms;
* ``at every cap``: every kind at its cap in room.rules.records (five 8 KiB summary sections, 32 KiB
  of decisions, 15 session entries of 7 KB): over the default budget, down to the decision heads;
* the same memory under a 32,000-byte budget: every step down to the summary's hard cut (5).

The reference, in the same run, is what any build must at least do: join the same pieces of text
and encode them to UTF-8 once. Rows give p50, p90 and p99 in ms; the target applies to p99.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from functools import partial
from typing import Any

from room.rules import injection as inj
from room.rules.records import SUMMARY_SECTIONS

SAMPLES = 300
ROUNDS = 5
SEED = 20261203
TARGET_P99_MS = 2.0

_CHINESE = (
    "这个项目是一个自托管的群聊服务器，人和智能体在同一条时间线上协作。",
    "消息先写进 SQLite，提交之后才推送给订阅者，崩溃不会丢已确认的消息。",
    "测试用真实的 SQLite 和真实的 uvicorn 服务器，不用模拟对象。",
    "数据库迁移之前一定要先备份，别忘了检查完整性。",
)
_ENGLISH = (
    "Run ./scripts/test before pushing; it runs ruff, mypy and import-linter first. ",
    "The writer thread commits a batch in one transaction, so one fsync covers many sends. ",
    "Cafe\u0301 ☕ and 👍🏽 are multi-byte; a cut never splits them. ",
)


def _text(rng: random.Random, size: int) -> str:
    parts: list[str] = []
    used = 0
    while used < size:
        piece = rng.choice(_CHINESE + _ENGLISH)
        parts.append(piece)
        used += len(piece.encode())
    return "".join(parts)


def make_records(
    rng: random.Random, *, summary: int, decisions: int, decision_bytes: int, session_bytes: int
) -> inj.Records:
    sections = {key: _text(rng, summary // 5) for key, _ in SUMMARY_SECTIONS}
    return inj.Records(
        summary=inj.Summary(sections, rev=rng.randrange(1, 50), updated_at=1.76e9, author="@lead"),
        decisions=[
            inj.Decision(
                label=f"ADR-{n:04d}",
                title=_text(rng, 40),
                status=rng.choice(("accepted", "proposed", "superseded")),
                decision=_text(rng, decision_bytes // 4),
                context=_text(rng, decision_bytes // 4),
                alternatives=(
                    inj.Alternative(_text(rng, 30), _text(rng, decision_bytes // 8)),
                    inj.Alternative(_text(rng, 30), _text(rng, decision_bytes // 8)),
                ),
                constraints=_text(rng, decision_bytes // 8),
                consequences=_text(rng, decision_bytes // 8),
            )
            for n in range(1, decisions + 1)
        ],
        sessions=[
            inj.SessionEntry(
                id=10_000 - i,
                author=f"@coder{i % 4}",
                at=1.76e9 + i,
                summary=_text(rng, session_bytes // 4),
                did=_text(rng, session_bytes // 4),
                verified=_text(rng, session_bytes // 8),
                next=_text(rng, session_bytes // 8),
                blocked=_text(rng, session_bytes // 8) if i % 3 == 0 else "",
            )
            for i in range(15)
        ],
        sessions_total=200,
        version=rng.randrange(1, 10_000),
    )


#: (records shape, budget): a memory that fits the default budget, one at every cap of
#: room.rules.records (summary sections 8 KiB each, decisions 32 KiB, session entries up to 8 KiB),
#: and the same under half the budget, down to the summary's hard cut.
CASES: dict[str, tuple[dict[str, int], int]] = {
    "fits": (
        {"summary": 12_000, "decisions": 14, "decision_bytes": 1_600, "session_bytes": 1_250},
        inj.DEFAULT_BUDGET_BYTES,
    ),
    "at every cap": (
        {"summary": 40_000, "decisions": 16, "decision_bytes": 1_600, "session_bytes": 7_000},
        inj.DEFAULT_BUDGET_BYTES,
    ),
    "at every cap, 32 KB budget": (
        {"summary": 40_000, "decisions": 16, "decision_bytes": 1_600, "session_bytes": 7_000},
        32_000,
    ),
}


def _pieces(records: inj.Records) -> list[str]:
    out = [str(v) for v in (records.summary.sections.values() if records.summary else ())]
    for d in records.decisions:
        out += [d.label, d.title, d.decision, d.context, d.constraints, d.consequences]
        out += [p for a in d.alternatives for p in (a.option, a.why_rejected)]
    for e in records.sessions:
        out += [e.author, e.summary, e.did, e.verified, e.next, e.blocked]
    return out


def _fastest_ms(fn: Any, arg: Any) -> float:
    best = None
    for _ in range(ROUNDS):
        t0 = time.perf_counter_ns()
        fn(arg)
        spent = time.perf_counter_ns() - t0
        best = spent if best is None else min(best, spent)
    assert best is not None
    return best / 1e6


def _pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def run(quick: bool = False) -> list[dict[str, object]]:
    rng = random.Random(SEED)
    samples = 40 if quick else SAMPLES
    rows: list[dict[str, object]] = []
    for case, (shape, budget) in CASES.items():
        data = [make_records(rng, **shape) for _ in range(samples)]
        build = partial(inj.build, budget_bytes=budget)
        built = [build(r) for r in data]  # warm up, and what the case really is
        steps = sorted({b.step for b in built})
        size = statistics.median(b.size for b in built)
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            got = [_fastest_ms(build, r) for r in data]
            ref = [_fastest_ms(lambda r: "\n".join(_pieces(r)).encode(), r) for r in data]
        finally:
            if gc_was_enabled:
                gc.enable()
        label = f"{case}: step {'/'.join(map(str, steps))}, {size / 1000:.1f} KB built"
        if budget != inj.DEFAULT_BUDGET_BYTES:
            label += f" of {budget / 1000:g} KB"
        for q in (50, 90, 99):
            rows.append(
                {
                    "workload": "records injection",
                    "case": label,
                    "metric": f"p{q} ms",
                    "value": round(_pct(got, q), 3),
                    "reference": f"join + encode the same text p{q}: {_pct(ref, q):.3f} ms",
                    "target": f"≤ {TARGET_P99_MS:g}" if q == 99 else "",
                }
            )
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
