"""Records used by the injection tests and the benchmark: Chinese prose, ASCII, emoji with a
skin-tone modifier and a combining accent, so every cut lands somewhere multi-byte."""

from __future__ import annotations

from room.rules.injection import (
    Alternative,
    Decision,
    Progress,
    Records,
    Reference,
    SessionEntry,
    Stale,
    Summary,
)

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
    """ADR-``count`` … ADR-0001: newest first."""
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
        for n in range(count, 0, -1)  # newest first, as the section lists them
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


CONVENTIONS = (
    "每次提交前先运行 pnpm test。",
    "生成的 protobuf 文件不要手改。",
    "staging 分支随时可以部署。",
)


def progress(count: int = 5) -> list[Progress]:
    return [
        Progress(
            text=f"第 {count - i} 段进展：{prose(1, i)}",
            stage=("设计", "实现", "验证")[i % 3],
            next=prose(1, i + 3),
            at=T0 + 86_400 * 19 - 7_200 * i,
            tags=("存储", "页面") if i % 2 else (),
        )
        for i in range(count)
    ]


def references(count: int = 6) -> list[Reference]:
    kinds = ("dir", "file", "url", "tool")
    return [
        Reference(kinds[i % 4], f"docs/part-{count - i}.md", prose(1, i) if i % 2 else "")
        for i in range(count)
    ]


def records(
    *,
    summary_paragraphs: int = 6,
    decision_count: int = 4,
    session_count: int = 20,
    stale: bool = True,
    extras: bool = False,
) -> Records:
    """The section's records; ``extras`` adds conventions, facts, progress and references."""
    return Records(
        summary=summary(summary_paragraphs),
        decisions=decisions(decision_count),
        sessions=sessions(session_count),
        sessions_total=42,
        version=57,
        stale=Stale(days=20, entries_since=31) if stale else None,
        conventions=CONVENTIONS if extras else (),
        facts=[prose(2, i) for i in range(4)] if extras else (),
        progress=progress() if extras else (),
        progress_total=12 if extras else 0,
        references=references() if extras else (),
        references_total=30 if extras else 0,
    )


def example() -> Records:
    """A small project's records: the section docs/memory.md shows (a test keeps it current)."""
    return Records(
        summary=Summary(
            sections={
                "what": "团队的记账小程序：记录支出，按月出报表。",
                "run": "pnpm install；pnpm dev 启动，pnpm test 测试。",
                "status": "登录和记账已上线，报表在做。",
            },
            rev=3,
            updated_at=T0,
            author="@owner（小王）",
        ),
        decisions=[
            Decision(
                label="ADR-0002",
                title="报表在服务端生成",
                status="proposed",
                decision="报表由服务端按月生成 PDF。",
                context="手机上生成大报表太慢。",
                alternatives=(Alternative("在浏览器里生成", "低端手机上要十几秒。"),),
            ),
            Decision(
                label="ADR-0001",
                title="数据存 SQLite",
                status="accepted",
                decision="一台机器，一个 SQLite 文件。",
                alternatives=(Alternative("PostgreSQL", "多一个要运维的服务。"),),
                constraints="单写者。",
            ),
        ],
        sessions=[
            SessionEntry(
                id=41,
                author="@coder（小码）",
                at=T0 + 7_200,
                summary="报表接口的第一版",
                did="加了 /api/reports，按月汇总。",
                verified="pnpm test 通过。",
                next="生成 PDF。",
            )
        ],
        sessions_total=1,
        version=12,
        conventions=("每次提交前先运行 pnpm test。", "金额一律用分（整数）存。"),
        facts=("生产环境在 app-1 上，数据库每天凌晨备份。",),
        progress=(Progress("报表接口完成", "实现", "生成 PDF", T0 + 3_600, tags=("报表",)),),
        progress_total=1,
        references=(Reference("dir", "docs/api", "接口文档"),),
        references_total=1,
    )
