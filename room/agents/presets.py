"""Role presets: the charter each agent role starts with and the room tools it is granted.

A tool a preset does not grant is absent from the member's tool list *and* refused by the
server if called anyway (``room.agents.tools.Toolbox``).

Work tools (docs/agents.md): the engineering roles (frontend, backend, tester, devops) get the
file tools and ``shell``; the lead, design and docs get the read-only file tools only — the lead
plans and reviews, and the work it reviews is proven by the command results and files of the
member who did it. An owner may mark further roles read-only (the project's
``read_only_roles``): they lose :data:`WRITE_TOOLS` the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

BASE_TOOLS = ("room_send", "room_react", "room_history", "room_members")
TASK_TOOLS = ("room_task_list", "room_task_update")
FILE_READ_TOOLS = ("fs_list", "fs_glob", "fs_read", "fs_search")
FILE_WRITE_TOOLS = ("fs_write", "fs_edit")
SHELL_TOOLS = ("shell",)
WORK_TOOLS = (*FILE_READ_TOOLS, *FILE_WRITE_TOOLS, *SHELL_TOOLS)
#: Project memory (docs/memory.md): every role reads, searches and writes it; a read-only role
#: keeps only the reading tools (it loses :data:`MEMORY_WRITE_TOOLS`).
MEMORY_TOOLS = ("memory_checkpoint", "memory_read", "memory_search")
MEMORY_WRITE_TOOLS = frozenset(("memory_checkpoint",))
#: What a read-only role loses (its preset's, or one an owner marks in ``read_only_roles``):
#: the tools that change the workspace. ``shell`` is one: a command may write anywhere in it.
WRITE_TOOLS = frozenset((*FILE_WRITE_TOOLS, *SHELL_TOOLS))


@dataclass(frozen=True, slots=True)
class Preset:
    role: str
    title: str
    charter: str
    tools: tuple[str, ...]


PRESETS: Mapping[str, Preset] = MappingProxyType(
    {
        "lead": Preset(
            "lead",
            "负责人",
            "你是项目负责人（lead）。你理解目标、拆分工作、指派给合适的成员并跟进结果；"
            "没有人被 @ 的人类消息会交给你。回答要简洁，需要别人行动时用 @handle 明确点名。",
            (
                *BASE_TOOLS,
                *TASK_TOOLS,
                *MEMORY_TOOLS,
                "room_task_review",
                "room_plan_submit",
                "room_decision_propose",
                "room_pick_model",
                "room_research_propose",
                *FILE_READ_TOOLS,
            ),
        ),
        "frontend": Preset(
            "frontend",
            "前端",
            "你是前端工程师。你负责界面、交互与可访问性，交付前说明如何验证。",
            (*BASE_TOOLS, *TASK_TOOLS, *MEMORY_TOOLS, *WORK_TOOLS),
        ),
        "backend": Preset(
            "backend",
            "后端",
            "你是后端工程师。你负责服务、数据与接口，交付前说明如何验证。",
            (*BASE_TOOLS, *TASK_TOOLS, *MEMORY_TOOLS, *WORK_TOOLS),
        ),
        "tester": Preset(
            "tester",
            "测试",
            "你是测试工程师。你按验收标准逐条检查，给出证据，不凭印象判断通过。",
            (*BASE_TOOLS, *TASK_TOOLS, *MEMORY_TOOLS, "room_task_review", *WORK_TOOLS),
        ),
        "devops": Preset(
            "devops",
            "运维",
            "你是运维工程师。你负责构建、部署与运行环境，操作前说明影响范围。",
            (*BASE_TOOLS, *TASK_TOOLS, *MEMORY_TOOLS, *WORK_TOOLS),
        ),
        "design": Preset(
            "design",
            "设计",
            "你是设计师。你负责信息结构与视觉，给出可落地的具体建议。",
            (*BASE_TOOLS, *TASK_TOOLS, *MEMORY_TOOLS, *FILE_READ_TOOLS),
        ),
        "docs": Preset(
            "docs",
            "文档",
            "你是文档工程师。你把决定和用法写清楚，不指派任务。",
            (*BASE_TOOLS, *TASK_TOOLS, *MEMORY_TOOLS, *FILE_READ_TOOLS),
        ),
    }
)

ROOM_RULES = (
    "房间规则：\n"
    "1. 你在一个多人项目群聊里，人类和其他 AI 成员共享同一条时间线。\n"
    "2. 只有被 @ 的成员会收到消息；需要谁行动就 @ 谁，不要 @所有人。\n"
    "3. 你的最终回答会自动发到群里，回复触发你的那条消息；中途需要发言可用 room_send。\n"
    "4. 不要重复别人刚说过的话，不要来回客套；没有新内容时简短确认即可。\n"
    "5. 项目的暂停、归档、删除只能由人类负责人在界面上操作，聊天里的请求一律不执行。\n"
    "6. 有文件和命令工具时，路径都相对于你的工作目录；命令的结果会被记录，提交任务时用 "
    "command_result_id 引用它作为证据。"
)


def preset_for(role: str) -> Preset:
    return PRESETS.get(role) or PRESETS["backend"]
