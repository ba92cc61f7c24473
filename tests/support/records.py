"""Records used by the injection tests and the benchmark: Chinese prose, ASCII, emoji with a
skin-tone modifier and a combining accent, so every cut lands somewhere multi-byte."""

from __future__ import annotations

from room.rules.injection import Alternative, Decision, Records, SessionEntry, Stale, Summary

T0 = 1_764_000_000.0  # 2025-11-24 UTC

_PROSE = (
    "这个项目是一个自托管的群聊服务器，人和智能体在同一条时间线上协作。",
    "每个项目就是一个持久的群聊；消息先写进 SQLite，再推送给订阅者。",
    "测试用真实的 SQLite 和真实的 uvicorn 服务器，不用模拟对象。",
    "Cafe\u0301 crème ☕ 和 👍🏽 都是多字节字符，截断时不能把它们切成两半。",
    "运行 scripts/test 会先跑 ruff、mypy 和 import-linter，再跑 pytest。",
)


def prose(n: int, seed: int = 0) -> str:
    return "".join(_PROSE[(seed + i) % len(_PROSE)] for i in range(n))


def summary(paragraphs: int = 6) -> Summary:
    return Summary(
        sections={
            "what": prose(paragraphs, 0),
            "run": "./scripts/serve 启动；./scripts/test 测试。\n" + prose(paragraphs, 1),
            "where": "room/ 是服务器，web/ 是页面，tests/ 是测试。\n" + prose(paragraphs, 2),
            "status": "",  # reads 暂无
            "pitfalls": "е́ 和 é 不一样：后者是 e 加上组合重音符。" + prose(paragraphs, 3),
        },
        rev=7,
        updated_at=T0,
        author="@lead（组长）",
    )


def decisions(count: int = 4, context_paragraphs: int = 3) -> list[Decision]:
    return [
        Decision(
            label=f"ADR-{n:04d}",
            title=f"第 {n} 个决定：存储用 SQLite" if n % 2 else f"第 {n} 个决定：前端不用构建步骤",
            status=("accepted", "proposed", "superseded")[n % 3],
            decision=prose(2, n),
            context=prose(context_paragraphs, n + 1),
            alternatives=(
                Alternative("PostgreSQL", "部署太重，一台机器用不上。"),
                Alternative("用 JSON 文件", "没有事务，崩溃会丢数据。"),
            ),
            constraints="单机、单写者；备份用 SQLite 的 backup API。",
            consequences=prose(1, n + 2),
            kind="requirement" if n == 1 else "decision",
        )
        for n in range(1, count + 1)
    ]


def sessions(count: int = 20) -> list[SessionEntry]:
    return [
        SessionEntry(
            id=1000 - i,
            author=f"@coder{i % 3}（小码{i % 3}）",
            at=T0 + 86_400 * 20 - 3_600 * i,
            summary=f"第 {count - i} 次会话：{prose(1, i)}",
            did=prose(2, i + 1),
            verified="./scripts/test tests/test_injection.py 通过 ✅" if i % 2 else "",
            next=prose(1, i + 2),
            blocked="等待评审 👀" if i % 4 == 0 else "",
        )
        for i in range(count)
    ]


def records(
    *,
    summary_paragraphs: int = 6,
    decision_count: int = 4,
    session_count: int = 20,
    stale: bool = True,
) -> Records:
    return Records(
        summary=summary(summary_paragraphs),
        decisions=decisions(decision_count),
        sessions=sessions(session_count),
        sessions_total=42,
        version=57,
        stale=Stale(days=20, entries_since=31) if stale else None,
    )
