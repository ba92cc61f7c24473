"""Plan validation as a whole (pure: no I/O, no clock).

A plan is a goal and a list of items; each item becomes a task. :func:`validate_plan` checks the
*whole* plan and reports every problem at once in one :class:`PlanInvalidError` — an agent (or a
human) fixing a plan should not discover faults one round-trip at a time.

Each problem is a dict ``{code, item, index, message, hint}`` (plus ``keys`` for a cycle). ``item``
is the item's key, or ``"#N"`` (1-based) when it has no usable key, or ``None`` for the whole
plan. Messages and hints are Chinese first with English in parentheses; hints say what to do next.
:data:`PROBLEM_CODES` lists every code; ``docs/tasks.md`` prints it and a test checks the two agree.

A cycle ``[a, b, c]`` means a depends on b, b depends on c, and c depends on a; it starts at the
cycle's earliest item in plan order and is a shortest cycle through that item.
"""

from __future__ import annotations

import heapq
import re
from collections import deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, NotRequired, TypedDict, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from room.errors import BadRequestError
from room.rules.lifecycle import MemberStatus
from room.rules.tasks import TaskState

Node = TypeVar("Node", bound=Hashable)

KEY_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
MAX_TITLE_CHARS = 200
MAX_TEXT_CHARS = 2000  # one criterion, one assumption, the goal
MAX_PLAN_ITEMS = 200  # bounds the work of one validation; larger plans are split by the author

PROBLEM_CODES: Mapping[str, str] = MappingProxyType(
    {
        "bad_plan": "计划不是 {items, goal} 对象 (The plan is not an object with items and goal.)",
        "empty_plan": "计划没有任何条目 (The plan has no items.)",
        "too_many_items": f"条目超过 {MAX_PLAN_ITEMS} 个 (More than {MAX_PLAN_ITEMS} items.)",
        "bad_item": "条目字段缺失、类型错误或有未知字段 (A field is missing, mistyped or unknown.)",
        "duplicate_key": "两个条目使用同一个 key (Two items share a key.)",
        "missing_criteria": "没有验收标准，或有空的标准 (No acceptance criteria, or an empty one.)",
        "unknown_owner": "负责人不是本项目成员 (The owner is not a member of this project.)",
        "inactive_owner": "负责人已暂停、已离开或账号已停用 (The owner is paused, has left, or their account was disabled by the operator.)",
        "unknown_dependency": "依赖的 key 不在计划中 (A dependency names no item of the plan.)",
        "self_dependency": "条目依赖它自己 (An item depends on itself.)",
        "cycle": "依赖形成环 (Dependencies form a cycle.)",
    }
)


class PlanProblem(TypedDict):
    code: str
    item: str | None
    index: int | None  # 0-based position in ``items``
    message: str
    hint: str
    keys: NotRequired[list[str]]  # a cycle, in dependency order
    field: NotRequired[str | None]  # the item's field a schema problem concerns


class PlanInvalidError(BadRequestError):
    """The plan has problems; ``problems`` (also in ``details``) lists all of them."""

    code = "plan_invalid"

    def __init__(self, problems: list[PlanProblem]) -> None:
        super().__init__(
            f"计划有 {len(problems)} 个问题 (The plan has {len(problems)} problem(s).)",
            problems=problems,
        )
        self.problems = problems


@dataclass(frozen=True, slots=True)
class OwnerInfo:
    """What the validator needs to know about a possible owner."""

    status: MemberStatus
    kind: Literal["human", "agent"]
    disabled: bool = False  # a person whose account an operator disabled (room users)


def _clean_text(value: str, limit: int) -> str:
    text = value.strip()
    if not text:
        raise ValueError("must not be empty")
    if len(text) > limit:
        raise ValueError(f"must be at most {limit} characters")
    return text


_ASCII_CASE = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def normalize_handle(value: str) -> str:
    """A handle as the member table keys it: no leading ``@``/``＠``, A–Z lower-cased and
    nothing else (handles are ASCII and compare ignoring ASCII case, as the mentions and both
    stores do: a Kelvin sign is not a ``k``)."""
    return value.strip().removeprefix("@").removeprefix("＠").strip().translate(_ASCII_CASE)


class PlanItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    title: str
    owner: str
    depends_on: tuple[str, ...] = ()
    acceptance: tuple[str, ...]
    assumptions: tuple[str, ...] = ()

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if not KEY_RE.fullmatch(value):
            raise ValueError("must match [a-z0-9][a-z0-9_-]{0,39}")
        return value

    @field_validator("title")
    @classmethod
    def _title(cls, value: str) -> str:
        return _clean_text(value, MAX_TITLE_CHARS)

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str) -> str:
        handle = normalize_handle(value)
        if not handle:
            raise ValueError("must not be empty")
        return handle

    @field_validator("depends_on")
    @classmethod
    def _deps(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(value))  # repeating a dependency is harmless: keep one

    @field_validator("acceptance")
    @classmethod
    def _acceptance(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("needs at least one criterion")
        return tuple(_clean_text(c, MAX_TEXT_CHARS) for c in value)

    @field_validator("assumptions")
    @classmethod
    def _assumptions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_clean_text(a, MAX_TEXT_CHARS) for a in value)


class PlanInput(BaseModel):
    """The outer shape; items are validated one by one so that all their faults are reported."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    items: tuple[PlanItem, ...]
    goal: str | None = None

    @field_validator("goal")
    @classmethod
    def _goal(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return _clean_text(value, MAX_TEXT_CHARS)


@dataclass(frozen=True, slots=True)
class ValidatedPlan:
    """A plan with no problems; ``items`` are in dependency order (ties keep plan order)."""

    items: tuple[PlanItem, ...]
    goal: str | None

    @property
    def keys(self) -> list[str]:
        return [item.key for item in self.items]

    def initial_states(self) -> dict[str, TaskState]:
        """Key → first task state: ``ready`` without dependencies, else ``waiting``."""
        return {i.key: TaskState.WAITING if i.depends_on else TaskState.READY for i in self.items}


# -- problems -----------------------------------------------------------------------------------

_FIELD_HINTS = {
    "key": "key 用小写字母、数字、- 或 _，以字母或数字开头，最长 40 个字符 "
    "(Use lowercase letters, digits, - or _, starting with a letter or digit, at most 40.)",
    "title": f"写一个 1–{MAX_TITLE_CHARS} 个字符的标题 (Give a title of 1–{MAX_TITLE_CHARS} characters.)",
    "owner": "填写一个项目成员的 handle (Give the handle of a project member.)",
    "depends_on": "depends_on 是其他条目 key 的列表 (depends_on is a list of other items' keys.)",
    "acceptance": "写至少一条可检查的验收标准，每条都不能为空 "
    "(Write at least one checkable acceptance criterion; none may be empty.)",
    "assumptions": "assumptions 是字符串列表，可以为空 (assumptions is a list of strings; may be empty.)",
}
_ITEM_HINT = (
    "每个条目是一个对象，含 key、title、owner、acceptance，可选 depends_on、assumptions "
    "(Each item is an object with key, title, owner, acceptance and optional depends_on, assumptions.)"
)


def _problem(
    code: str, item: str | None, index: int | None, message: str, hint: str
) -> PlanProblem:
    return {"code": code, "item": item, "index": index, "message": message, "hint": hint}


def _label(raw: Any, index: int) -> str:
    key = raw.get("key") if isinstance(raw, dict) else None
    return key if isinstance(key, str) and KEY_RE.fullmatch(key) else f"#{index + 1}"


def _schema_problems(raw: Any, index: int, errors: Iterable[Any]) -> list[PlanProblem]:
    label = _label(raw, index)
    seen: set[tuple[str, str]] = set()
    problems: list[PlanProblem] = []
    for error in errors:
        loc = error["loc"]
        field = str(loc[0]) if loc else ""
        if error["type"] == "extra_forbidden":
            code, hint = "bad_item", f"删除未知字段 {field} (Remove the unknown field {field}.)"
        elif field == "acceptance" and error["type"] not in ("list_type", "tuple_type"):
            code, hint = "missing_criteria", _FIELD_HINTS["acceptance"]
        else:
            code, hint = "bad_item", _FIELD_HINTS.get(field, _ITEM_HINT)
        if (code, field) in seen:  # one problem per field, however many entries are bad
            continue
        seen.add((code, field))
        where = ".".join(str(p) for p in loc)
        if error["type"] == "extra_forbidden":
            message = (
                f"条目 {label} 有未知字段 {where} (Item {label} has an unknown field {where}.)"
            )
        elif error["type"] == "missing":
            message = f"条目 {label} 缺少 {where} (Item {label} is missing {where}.)"
        else:
            detail = str(error["msg"]).removeprefix("Value error, ")
            message = f"条目 {label} 的 {where} 无效 (Item {label}: {where}: {detail}.)"
        problem = _problem(code, label, index, message, hint)
        problem["field"] = field or None
        problems.append(problem)
    return problems


@dataclass(slots=True)
class _Draft:
    """The parts of an item the cross-item checks need, salvaged even from a faulty item."""

    index: int
    key: str | None
    owner: str | None
    depends_on: tuple[str, ...]


def _salvage(raw: Any, index: int) -> _Draft:
    get = raw.get if isinstance(raw, dict) else (lambda _name: None)
    key, owner, deps = get("key"), get("owner"), get("depends_on")
    return _Draft(
        index=index,
        key=key if isinstance(key, str) and KEY_RE.fullmatch(key) else None,
        owner=(normalize_handle(owner) or None) if isinstance(owner, str) else None,
        depends_on=tuple(dict.fromkeys(d for d in deps if isinstance(d, str)))
        if isinstance(deps, list | tuple)
        else (),
    )


def _owner_problem(draft: _Draft, owners: Mapping[str, OwnerInfo]) -> PlanProblem | None:
    assert draft.owner is not None
    label, handle = draft.key or f"#{draft.index + 1}", draft.owner
    info = owners.get(handle)
    if info is None:
        return _problem(
            "unknown_owner",
            label,
            draft.index,
            f"条目 {label} 的负责人 @{handle} 不是本项目成员 (Owner @{handle} is not a member.)",
            "换成一个在职成员的 handle，或先邀请该成员 (Use an active member's handle, or invite them first.)",
        )
    if info.disabled:
        return _problem(
            "inactive_owner",
            label,
            draft.index,
            f"条目 {label} 的负责人 @{handle} 的账号已停用 (Owner @{handle}'s account is disabled.)",
            "换一个在职成员 (Pick an active member.)",
        )
    if info.status is not MemberStatus.ACTIVE:
        hint = (
            "先恢复该成员，或换一个在职成员 (Resume the member first, or pick an active member.)"
            if info.status is MemberStatus.PAUSED
            else "该成员已离开，换一个在职成员 (The member has left; pick an active member.)"
        )
        return _problem(
            "inactive_owner",
            label,
            draft.index,
            f"条目 {label} 的负责人 @{handle} 状态为 {info.status} "
            f"(Owner @{handle} is {info.status}.)",
            hint,
        )
    return None


def _dependency_problems(draft: _Draft, known: Mapping[str, int]) -> list[PlanProblem]:
    label = draft.key or f"#{draft.index + 1}"
    problems: list[PlanProblem] = []
    for dep in draft.depends_on:
        if dep == draft.key:
            problems.append(
                _problem(
                    "self_dependency",
                    label,
                    draft.index,
                    f"条目 {label} 依赖它自己 (Item {label} depends on itself.)",
                    f"从 depends_on 中删除 {dep} (Remove {dep} from depends_on.)",
                )
            )
        elif dep not in known:
            problems.append(
                _problem(
                    "unknown_dependency",
                    label,
                    draft.index,
                    f"条目 {label} 依赖的 {dep} 不在计划中 (Item {label} depends on {dep}, "
                    "which is not in the plan.)",
                    f"添加 key 为 {dep} 的条目，或从 depends_on 删除它 "
                    f"(Add an item with key {dep}, or remove it from depends_on.)",
                )
            )
    return problems


# -- graph --------------------------------------------------------------------------------------


def strong_components(
    order: Sequence[Node], edges: Mapping[Node, Sequence[Node]]
) -> list[list[Node]]:
    """Tarjan's algorithm, iterative (no recursion limit): the strongly connected components of
    the graph ``{node: nodes it depends on}``, roots visited in ``order``. Every node an edge
    names must be a key of ``edges``. Used for plans' task keys and the portfolio's projects."""
    index: dict[Node, int] = {}
    low: dict[Node, int] = {}
    on_stack: set[Node] = set()
    stack: list[Node] = []
    components: list[list[Node]] = []
    for root in order:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            successors = edges[node]
            if child < len(successors):
                work.append((node, child + 1))
                nxt = successors[child]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component: list[Node] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return components


def _cycle_through(start: str, members: set[str], edges: Mapping[str, list[str]]) -> list[str]:
    """A shortest cycle from ``start`` back to itself inside one strong component (BFS)."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in edges[node]:
            if nxt not in members:
                continue
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1]
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError("a strong component always has a cycle through each member")


def find_cycles(order: list[str], edges: Mapping[str, list[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of two or more items, in plan order.

    ``edges[k]`` are the keys ``k`` depends on (all present in ``order``; no self-edges).
    """
    position = {key: i for i, key in enumerate(order)}
    cycles = []
    for component in strong_components(order, edges):
        if len(component) > 1:
            start = min(component, key=position.__getitem__)
            cycles.append(_cycle_through(start, set(component), edges))
    return sorted(cycles, key=lambda cycle: position[cycle[0]])


def topological_order(order: list[str], edges: Mapping[str, list[str]]) -> list[str]:
    """Dependencies first; among items free at the same time, plan order wins (Kahn + heap)."""
    position = {key: i for i, key in enumerate(order)}
    remaining = {key: len(edges[key]) for key in order}
    dependents: dict[str, list[str]] = {key: [] for key in order}
    for key in order:
        for dep in edges[key]:
            dependents[dep].append(key)
    ready = [position[key] for key in order if remaining[key] == 0]
    heapq.heapify(ready)
    result: list[str] = []
    while ready:
        key = order[heapq.heappop(ready)]
        result.append(key)
        for child in dependents[key]:
            remaining[child] -= 1
            if remaining[child] == 0:
                heapq.heappush(ready, position[child])
    if len(result) != len(order):
        raise ValueError("the dependency graph has a cycle")
    return result


# -- the whole plan -----------------------------------------------------------------------------


def _first_indexes(drafts: list[_Draft]) -> dict[str, int]:
    """Key → index of its first occurrence; later occurrences are duplicates."""
    seen: dict[str, int] = {}
    for draft in drafts:
        if draft.key is not None:
            seen.setdefault(draft.key, draft.index)
    return seen


def _plan_level(raw: Any) -> tuple[list[Any], str | None, list[PlanProblem]]:
    """Check the outer shape; returns the raw items, the goal, and problems that stop everything."""
    hint = '提交 {"goal": ..., "items": [...]} (Send {"goal": ..., "items": [...]}.)'
    if not isinstance(raw, dict):
        return [], None, [_problem("bad_plan", None, None, PROBLEM_CODES["bad_plan"], hint)]
    try:
        # Validate everything but the items here; they are checked one by one below.
        outer = PlanInput.model_validate({**raw, "items": ()})
    except ValidationError as exc:
        fields = ", ".join(sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]}))
        message = f"计划的 {fields} 无效 (Invalid plan field(s): {fields}.)"
        return [], None, [_problem("bad_plan", None, None, message, hint)]
    items = raw.get("items")
    if not isinstance(items, list):
        message = "items 必须是列表 (items must be a list.)"
        return [], None, [_problem("bad_plan", None, None, message, hint)]
    if not items:
        hint = "至少写一个条目 (Add at least one item.)"
        return [], None, [_problem("empty_plan", None, None, PROBLEM_CODES["empty_plan"], hint)]
    if len(items) > MAX_PLAN_ITEMS:
        hint = "把计划拆成几份较小的计划 (Split the plan into smaller plans.)"
        message = (
            f"计划有 {len(items)} 个条目 (The plan has {len(items)} items; max {MAX_PLAN_ITEMS}.)"
        )
        return [], None, [_problem("too_many_items", None, None, message, hint)]
    return items, outer.goal, []


def validate_plan(raw: Any, owners: Mapping[str, OwnerInfo]) -> ValidatedPlan:
    """Validate a whole plan; raise one :class:`PlanInvalidError` listing every problem.

    ``owners`` maps a lowercase handle to the member's status and kind. Every owner must be an
    ``active`` member; keys are unique; every dependency names another item; there is no cycle.
    """
    raw_items, goal, problems = _plan_level(raw)
    if problems:
        raise PlanInvalidError(problems)

    parsed: list[PlanItem | None] = []
    drafts: list[_Draft] = []
    for index, raw_item in enumerate(raw_items):
        try:
            item = PlanItem.model_validate(raw_item)
        except ValidationError as exc:
            if not isinstance(raw_item, dict):
                label = f"#{index + 1}"
                message = f"条目 {label} 不是对象 (Item {label} is not an object.)"
                problems.append(_problem("bad_item", label, index, message, _ITEM_HINT))
            else:
                problems.extend(_schema_problems(raw_item, index, exc.errors()))
            parsed.append(None)
            drafts.append(_salvage(raw_item, index))
        else:
            parsed.append(item)
            drafts.append(_Draft(index, item.key, item.owner, item.depends_on))

    known = _first_indexes(drafts)
    for draft in drafts:
        if draft.key is not None and known[draft.key] != draft.index:
            first = known[draft.key]
            problems.append(
                _problem(
                    "duplicate_key",
                    draft.key,
                    draft.index,
                    f"条目 #{draft.index + 1} 与条目 #{first + 1} 的 key 都是 {draft.key} "
                    f"(Items #{first + 1} and #{draft.index + 1} share the key {draft.key}.)",
                    "给每个条目一个不同的 key (Give every item its own key.)",
                )
            )
        if draft.owner is not None and (owner_problem := _owner_problem(draft, owners)):
            problems.append(owner_problem)
        problems.extend(_dependency_problems(draft, known))

    # The graph: first occurrence of each key, edges to existing other keys only (the rest were
    # reported above), so a cycle problem names nothing but real dependency edges.
    order = list(known)
    edges = {
        key: [d for d in drafts[i].depends_on if d in known and d != key]
        for key, i in known.items()
    }
    for cycle in find_cycles(order, edges):
        shown = " → ".join([*cycle, cycle[0]])
        problem = _problem(
            "cycle",
            cycle[0],
            known[cycle[0]],
            f"依赖形成环：{shown} (Dependencies form a cycle: {shown}.)",
            "删除环中的一条依赖，让工作有先后 (Remove one dependency in the cycle.)",
        )
        problem["keys"] = cycle
        problems.append(problem)

    if problems:
        # Group by item in plan order (plan-level first); cycles, which span items, come last.
        problems.sort(
            key=lambda p: (p["code"] == "cycle", -1 if p["index"] is None else p["index"])
        )
        raise PlanInvalidError(problems)
    by_key = {item.key: item for item in parsed if item is not None}
    return ValidatedPlan(
        items=tuple(by_key[key] for key in topological_order(order, edges)), goal=goal
    )
