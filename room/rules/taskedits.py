"""Editing one task by hand (pure: no I/O, no clock).

A person edits a task's title, acceptance criteria, owner and dependencies (its dates are the
portfolio's, :func:`room.rules.portfolio.parse_task_dates`). The fields obey the same rules as a
plan's items (:mod:`room.rules.plans`): a title of 1–200 characters, at least one criterion and
none empty, an active member as owner, dependencies on existing tasks that form no cycle.

What the task's state allows on top of that:

* the **acceptance** criteria only before the first submission (revision 0): once work was
  submitted and reviewed against them, changing them is a requirement change (``/change``);
* the **owner** only while nobody has started (``waiting``, ``ready``) or the task waits for a
  new owner (``handoff``, where the change is the ``reassign`` event);
* the **dependencies** only while the task is open (not ``accepted`` or ``cancelled``).

:func:`validate_edit` reports every problem at once in one :class:`TaskEditInvalidError` (400,
``task_edit_invalid``): ``problems`` is a list of ``{code, field, message, hint}`` (plus ``keys``
for a cycle), so the page shows each under the field it concerns. :data:`EDIT_PROBLEM_CODES`
lists the codes; ``docs/tasks.md`` prints them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NotRequired, TypedDict

from room.errors import BadRequestError
from room.rules.lifecycle import MemberStatus
from room.rules.plans import (
    MAX_TEXT_CHARS,
    MAX_TITLE_CHARS,
    OwnerInfo,
    find_cycles,
    normalize_handle,
)
from room.rules.tasks import OPEN_STATES, TaskState

EDIT_FIELDS = ("title", "acceptance", "owner", "depends_on")
OWNER_STATES = frozenset({TaskState.WAITING, TaskState.READY, TaskState.HANDOFF})
MAX_CRITERIA = 50
MAX_DEPENDENCIES = 200

EDIT_PROBLEM_CODES: Mapping[str, str] = MappingProxyType(
    {
        "empty_edit": "没有要修改的字段 (Nothing to change.)",
        "bad_field": "字段类型错误或未知 (A field is mistyped or unknown.)",
        "bad_title": f"标题需 1–{MAX_TITLE_CHARS} 个字符 (A title has 1–{MAX_TITLE_CHARS} characters.)",
        "missing_criteria": "没有验收标准，或有空的标准 (No acceptance criteria, or an empty one.)",
        "acceptance_locked": "已提交过的任务不能改验收标准 (Criteria are fixed after a submission.)",
        "unknown_owner": "负责人不是本项目成员 (The owner is not a member of this project.)",
        "inactive_owner": "负责人已暂停或已离开 (The owner is paused or has left.)",
        "owner_locked": "任务已开始，不能直接换负责人 (The task has started; its owner stays.)",
        "unknown_dependency": "依赖的任务不存在 (A dependency names no task.)",
        "self_dependency": "任务依赖它自己 (The task depends on itself.)",
        "cycle": "依赖形成环 (Dependencies form a cycle.)",
        "dependencies_locked": "已结束的任务不能改依赖 (A closed task keeps its dependencies.)",
    }
)


class EditProblem(TypedDict):
    code: str
    field: str | None
    message: str
    hint: str
    keys: NotRequired[list[str]]


class TaskEditInvalidError(BadRequestError):
    """The edit has problems; ``problems`` (also in ``details``) lists all of them."""

    code = "task_edit_invalid"

    def __init__(self, problems: list[EditProblem]) -> None:
        super().__init__(
            f"任务修改有 {len(problems)} 个问题 (The edit has {len(problems)} problem(s).)",
            problems=problems,
        )
        self.problems = problems


@dataclass(frozen=True, slots=True)
class TaskFacts:
    """What the rules need to know about the task being edited."""

    key: str
    state: TaskState
    revision: int
    owner: str  # handle, normalised
    depends_on: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TaskEdit:
    """A valid edit: the fields that change (``None``: unchanged)."""

    title: str | None = None
    acceptance: tuple[str, ...] | None = None
    owner: str | None = None
    depends_on: tuple[str, ...] | None = None

    @property
    def changed(self) -> list[str]:
        return [name for name in EDIT_FIELDS if getattr(self, name) is not None]


def _problem(code: str, field: str | None, message: str, hint: str) -> EditProblem:
    return {"code": code, "field": field, "message": message, "hint": hint}


def _strings(value: Any, limit: int) -> list[str] | None:
    if not isinstance(value, list) or len(value) > limit:
        return None
    if not all(isinstance(item, str) for item in value):
        return None
    return list(value)


def _title(value: Any) -> tuple[str | None, list[EditProblem]]:
    text = value.strip() if isinstance(value, str) else ""
    if not text or len(text) > MAX_TITLE_CHARS:
        return None, [
            _problem(
                "bad_title",
                "title",
                f"标题需 1–{MAX_TITLE_CHARS} 个字符 (A title has 1–{MAX_TITLE_CHARS} characters.)",
                "写一个简短的标题 (Write a short title.)",
            )
        ]
    return text, []


def _acceptance(value: Any, task: TaskFacts) -> tuple[tuple[str, ...] | None, list[EditProblem]]:
    texts = _strings(value, MAX_CRITERIA)
    cleaned = tuple(t.strip() for t in texts or [])
    if texts is None or not cleaned or any(not t or len(t) > MAX_TEXT_CHARS for t in cleaned):
        return None, [
            _problem(
                "missing_criteria",
                "acceptance",
                f"至少一条验收标准，每条 1–{MAX_TEXT_CHARS} 个字符 "
                f"(At least one criterion, each of 1–{MAX_TEXT_CHARS} characters.)",
                "写至少一条可检查的验收标准 (Write at least one checkable criterion.)",
            )
        ]
    if task.revision > 0:
        return None, [
            _problem(
                "acceptance_locked",
                "acceptance",
                f"任务已提交过 {task.revision} 次，验收标准不能再改 "
                f"(The task was submitted {task.revision} time(s); its criteria are fixed.)",
                "用 /change 提出需求变更 (Mark a requirement change with /change.)",
            )
        ]
    return cleaned, []


def _owner(
    value: Any, task: TaskFacts, owners: Mapping[str, OwnerInfo]
) -> tuple[str | None, list[EditProblem]]:
    handle = normalize_handle(value) if isinstance(value, str) else ""
    if not handle:
        return None, [
            _problem(
                "unknown_owner",
                "owner",
                "负责人不能为空 (The owner is missing.)",
                "选择一个在职成员 (Pick an active member.)",
            )
        ]
    info = owners.get(handle)
    if info is None:
        return None, [
            _problem(
                "unknown_owner",
                "owner",
                f"@{handle} 不是本项目成员 (@{handle} is not a member of this project.)",
                "选择一个在职成员，或先邀请该成员 (Pick an active member, or invite them first.)",
            )
        ]
    if info.status is not MemberStatus.ACTIVE:
        return None, [
            _problem(
                "inactive_owner",
                "owner",
                f"@{handle} 状态为 {info.status} (@{handle} is {info.status}.)",
                "选择一个在职成员 (Pick an active member.)",
            )
        ]
    if handle == task.owner:
        return None, []
    if task.state not in OWNER_STATES:
        return None, [
            _problem(
                "owner_locked",
                "owner",
                f"任务处于 {task.state}，不能直接换负责人 "
                f"(A task in {task.state} keeps its owner.)",
                "负责人离开后任务会进入 handoff，届时可重新指派；或取消后新建 "
                "(A task is handed off when its owner leaves; or cancel it and create another.)",
            )
        ]
    return handle, []


def _depends_on(
    value: Any, task: TaskFacts, graph: Mapping[str, Sequence[str]]
) -> tuple[tuple[str, ...] | None, list[EditProblem]]:
    keys = _strings(value, MAX_DEPENDENCIES)
    if keys is None:
        return None, [
            _problem(
                "bad_field",
                "depends_on",
                "depends_on 应是任务 key 的列表 (depends_on is a list of task keys.)",
                "从列表中选择任务 (Pick tasks from the list.)",
            )
        ]
    deps = tuple(dict.fromkeys(k.strip() for k in keys if k.strip()))
    if task.state not in OPEN_STATES and set(deps) != set(task.depends_on):
        return None, [
            _problem(
                "dependencies_locked",
                "depends_on",
                f"任务处于 {task.state}，依赖不能再改 (A task in {task.state} keeps its "
                "dependencies.)",
                "先重新打开任务 (Reopen the task first.)",
            )
        ]
    problems: list[EditProblem] = []
    for dep in deps:
        if dep == task.key:
            problems.append(
                _problem(
                    "self_dependency",
                    "depends_on",
                    f"任务 {dep} 不能依赖它自己 (Task {dep} cannot depend on itself.)",
                    f"删除 {dep} (Remove {dep}.)",
                )
            )
        elif dep not in graph:
            problems.append(
                _problem(
                    "unknown_dependency",
                    "depends_on",
                    f"没有任务 {dep} (There is no task {dep}.)",
                    f"删除 {dep}，或先创建它 (Remove {dep}, or create it first.)",
                )
            )
    if problems:
        return None, problems
    edges = {key: [d for d in graph[key] if d in graph and d != key] for key in graph}
    edges[task.key] = list(deps)
    for cycle in find_cycles(list(graph), edges):
        if task.key not in cycle:
            continue  # an older cycle (stored before this rule) is not this edit's fault
        at = cycle.index(task.key)
        keys_from_here = cycle[at:] + cycle[:at]
        shown = " → ".join([*keys_from_here, task.key])
        problem = _problem(
            "cycle",
            "depends_on",
            f"依赖形成环：{shown} (Dependencies form a cycle: {shown}.)",
            f"删除 {keys_from_here[1]} 这条依赖 (Remove the dependency on {keys_from_here[1]}.)",
        )
        problem["keys"] = keys_from_here
        problems.append(problem)
    if problems:
        return None, problems
    return (deps if set(deps) != set(task.depends_on) else None), []


def validate_edit(
    task: TaskFacts,
    patch: Mapping[str, Any],
    owners: Mapping[str, OwnerInfo],
    graph: Mapping[str, Sequence[str]],
) -> TaskEdit:
    """Check a person's edit of ``task`` (``patch`` holds some of :data:`EDIT_FIELDS`).

    ``owners`` maps each member's normalised handle to :class:`OwnerInfo`; ``graph`` maps every
    task key of the project to the keys it depends on now. Returns the fields that change, or
    raises :class:`TaskEditInvalidError` listing every problem.
    """
    problems: list[EditProblem] = []
    unknown = [name for name in patch if name not in EDIT_FIELDS]
    for name in unknown:
        problems.append(
            _problem(
                "bad_field",
                None,
                f"未知字段 {name} (Unknown field {name}.)",
                f"可修改：{', '.join(EDIT_FIELDS)} (Editable: {', '.join(EDIT_FIELDS)}.)",
            )
        )
    if not patch:
        problems.append(
            _problem(
                "empty_edit",
                None,
                "没有要修改的字段 (Nothing to change.)",
                f"给出 {', '.join(EDIT_FIELDS)} 之一 (Give one of {', '.join(EDIT_FIELDS)}.)",
            )
        )
    title = acceptance = owner = deps = None
    if "title" in patch:
        title, found = _title(patch["title"])
        problems += found
    if "acceptance" in patch:
        acceptance, found = _acceptance(patch["acceptance"], task)
        problems += found
    if "owner" in patch:
        owner, found = _owner(patch["owner"], task, owners)
        problems += found
    if "depends_on" in patch:
        deps, found = _depends_on(patch["depends_on"], task, graph)
        problems += found
    if problems:
        raise TaskEditInvalidError(problems)
    return TaskEdit(title=title, acceptance=acceptance, owner=owner, depends_on=deps)


def order_problem(keys: Any, existing: Sequence[str]) -> dict[str, Any] | None:
    """``None`` when ``keys`` is exactly the project's task keys in a new order; otherwise what
    is wrong with it (``missing``, ``unknown``, ``repeated``)."""
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return {"missing": list(existing), "unknown": [], "repeated": []}
    have = set(existing)
    counts: dict[str, int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    repeated = sorted(k for k, n in counts.items() if n > 1)
    if not repeated and set(counts) == have:
        return None
    return {
        "missing": [k for k in existing if k not in counts],
        "unknown": sorted(set(counts) - have),
        "repeated": repeated,
    }
