"""The page shows the work: a task's attempt worktree on its card (branch, diff stat, the diff as
escaped text, the changed files with generated junk flagged), an owner's merge of an accepted
task (only the ticked files, the cited ones ticked; fast-forward; a conflict listed by path),
the project's workspace (where, git or not, worktrees or serial, changed by an owner with the
server's refusals translated), what agents may do there (the project's work settings, changed by
an owner) and the worktrees the project keeps. A real server, a real git repository in tmp_path, tasks driven over
HTTP as tests/test_browser_panel.py does."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    join,
    owner,
    room_server,
    screenshot,
)

pytestmark = pytest.mark.browser

TEAM = [{"role": "lead", "handle": "lead", "display_name": "负责人"}]
SCRIPT = "<script>document.title = 'pwned'</script>"


def git(cwd: Path, *args: str) -> str:
    run = subprocess.run(
        ["git", "-c", "user.name=Owner", "-c", "user.email=owner@example.com", *args],
        cwd=cwd, check=True, capture_output=True, text=True, timeout=20,
    )  # fmt: skip
    return run.stdout.strip()


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("# app\n")
    (path / "app.py").write_text("v = 0\n")
    git(path, "add", "--all")
    git(path, "commit", "-q", "-m", "start")
    return path


def open_tasks(page: Page) -> Any:
    page.get_by_role("tab", name="任务").click()
    return page.get_by_role("tabpanel", name="任务")


class Board:
    """A project on a git workspace whose tasks the owner works on over HTTP."""

    def __init__(self, room_server: RoomServer, repo: Path, name: str, *keys: str) -> None:
        self.server = room_server
        self.id = room_server.create_project(name, TEAM, workspace=repo)
        self.base = f"/api/projects/{self.id}"
        items = [
            {"key": key, "title": f"做 {key}", "owner": "owner", "acceptance": [f"{key} 能用"]}
            for key in keys
        ]
        room_server.post(f"{self.base}/plan", {"goal": "做完", "items": items}, 201)

    def start(self, key: str) -> Path:
        """Start the task (as its owner): its attempt gets a worktree; returns the folder."""
        self.server.post(f"{self.base}/tasks/{key}/start", {})
        attempt = self.server.get(f"{self.base}/tasks/{key}")["task"]["attempt"]
        assert attempt is not None and attempt["state"] == "open", attempt
        return Path(attempt["path"])

    def accept(self, key: str, *files: str) -> None:
        self.server.post(
            f"{self.base}/tasks/{key}/submit", {"summary": "完成", "artifacts": list(files)}
        )
        verdict = {"results": [{"criterion": 1, "passed": True, "evidence": "看过了"}]}
        assert (
            self.server.post(f"{self.base}/tasks/{key}/review", verdict)["task"]["state"]
            == "accepted"
        )


def test_a_task_card_shows_its_worktree_diff_and_merges_fast_forward(
    owner: Person, room_server: RoomServer, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    board = Board(room_server, repo, "工作树卡片", "notes")
    worktree = board.start("notes")
    (worktree / "notes.md").write_text(f"# 笔记\n{SCRIPT}\n", encoding="utf-8")
    branch = f"room/{board.id}/notes-1"

    page = owner.page
    owner.open_project(board.id)
    tasks = open_tasks(page)
    bar = tasks.locator(".workspace-bar")
    expect(bar.locator(".workspace-path")).to_have_text(str(repo.resolve()))
    expect(bar.locator(".badge[data-mode]")).to_have_text("工作树")
    card = tasks.locator('.task-card[data-key="notes"]')
    attempt = card.locator(".task-attempt")
    expect(attempt.locator(".branch-name")).to_have_text(branch)
    expect(attempt.locator(".badge")).to_have_text("进行中")
    stat = attempt.locator(".diff-stat summary")
    expect(stat).to_have_text("1 个文件有改动+2−0")
    expect(attempt.get_by_role("button", name="合并到 main")).to_have_count(0)  # not accepted yet

    # The diff: the file's lines as text, added lines coloured by class.
    attempt.get_by_role("button", name="查看改动").click()
    dialog = page.get_by_role("dialog", name=f"notes 的改动 · {branch}")
    added = dialog.locator(".diff-add")
    expect(added).to_have_text(["+# 笔记\n", f"+{SCRIPT}\n"])
    expect(dialog.locator(".diff-file").first).to_contain_text("notes.md")
    expect(dialog.locator("script")).to_have_count(0)
    assert page.title() != "pwned"
    colours = added.first.evaluate("el => getComputedStyle(el).backgroundColor")
    assert colours not in ("", "rgba(0, 0, 0, 0)"), colours
    screenshot(page, "work-diff")
    dialog.get_by_role("button", name="完成").click()
    attempt.locator(".diff-stat summary").click()
    expect(attempt.locator(".diff-files li")).to_have_text(["notes.md+2−0"])
    card.scroll_into_view_if_needed()
    screenshot(page, "work-task-card")

    # Accepted, then the worktree gathers junk and a draft nobody cited. The owner merges
    # (fast-forward) only what they tick: the cited file, ticked for them, and the draft.
    board.accept("notes", "notes.md")
    (worktree / "__pycache__").mkdir()
    (worktree / "__pycache__" / "notes.cpython-311.pyc").write_bytes(b"\x00\xff")
    (worktree / "build.tmp").write_text("scratch\n")
    (worktree / "draft.md").write_text("草稿\n", encoding="utf-8")
    tasks = open_tasks(page)
    attempt = tasks.locator('.task-card[data-key="notes"] .task-attempt')
    attempt.get_by_role("button", name="查看改动").click()
    review = page.get_by_role("dialog", name=f"notes 的改动 · {branch}")
    expect(review.locator(".review-summary")).to_have_text(
        "4 个文件有改动：1 个是任务证据引用的，2 个看起来是生成的文件。"
    )
    expect(review.locator(".review-file.is-junk .file-junk")).to_have_text(
        ["生成文件 · __pycache__/", "生成文件 · *.tmp"]
    )
    review.get_by_role("button", name="完成").click()
    before = git(repo, "rev-parse", "main")
    attempt.get_by_role("button", name="合并到 main").click()
    merge = page.get_by_role("dialog", name=f"把 {branch} 合并到 main")
    expect(merge.get_by_label("快进（main 没有新提交时才可以）")).to_be_checked()
    files = merge.locator(".merge-files")
    expect(files.locator("legend")).to_have_text("要合并的文件 （已选 1/4）")
    boxes = {path: files.locator(f'.review-file[data-path="{path}"] input') for path in (
        "notes.md", "draft.md", "build.tmp", "__pycache__/notes.cpython-311.pyc")}  # fmt: skip
    expect(boxes["notes.md"]).to_be_checked()
    for path in ("draft.md", "build.tmp", "__pycache__/notes.cpython-311.pyc"):
        expect(boxes[path]).not_to_be_checked()
    expect(files.locator('.review-file[data-path="notes.md"] .file-cited')).to_have_text("证据")
    boxes["draft.md"].check()
    expect(files.locator("legend")).to_have_text("要合并的文件 （已选 2/4）")
    screenshot(page, "work-merge-review")
    merge.get_by_role("button", name="合并", exact=True).click()
    outcome = merge.locator(".merge-outcome")
    expect(outcome).to_have_text("已快进合并到 main")
    expect(merge.locator(".merge-taken")).to_have_text(
        "合并了 2 个文件；2 个未选的改动留在任务分支上，没有进入基础分支。"
    )
    expect(merge.locator(".merge-head code")).to_contain_text("notes: 做 notes")
    expect(merge.locator(".merge-result")).not_to_contain_text("null")
    expect(merge.locator(".merge-conflicts")).to_have_count(0)
    screenshot(page, "work-merged")
    after = git(repo, "rev-parse", "main")
    assert after != before and git(repo, "rev-parse", "main^") == before
    assert git(repo, "ls-tree", "-r", "--name-only", "main").split() == [
        "README.md", "app.py", "draft.md", "notes.md",
    ]  # fmt: skip
    assert (repo / "notes.md").read_text(encoding="utf-8") == f"# 笔记\n{SCRIPT}\n"
    assert not (repo / "build.tmp").exists() and not (repo / "__pycache__").exists()
    assert "Room-Task: notes" in git(repo, "log", "-1", "--format=%(trailers)")
    merge.get_by_role("button", name="关闭").first.click()
    expect(tasks.locator('.task-card[data-key="notes"] .task-attempt .badge')).to_have_text(
        "已合并"
    )


def test_a_conflicting_merge_lists_the_paths_and_changes_nothing(
    owner: Person, room_server: RoomServer, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    board = Board(room_server, repo, "合并冲突", "clash")
    worktree = board.start("clash")
    (worktree / "app.py").write_text("v = 1\n")
    board.accept("clash", "app.py")
    (repo / "app.py").write_text("v = 2\n")
    git(repo, "commit", "-qam", "owner edits app.py")
    before = git(repo, "rev-parse", "HEAD")

    page = owner.page
    owner.open_project(board.id)
    attempt = open_tasks(page).locator('.task-card[data-key="clash"] .task-attempt')
    attempt.get_by_role("button", name="合并到 main").click()
    merge = page.get_by_role("dialog", name=f"把 room/{board.id}/clash-1 合并到 main")
    merge.get_by_label("合并提交").check()
    merge.get_by_role("button", name="合并", exact=True).click()
    expect(merge.locator(".merge-outcome")).to_have_text(
        "有冲突，合并已取消，main 保持原样。冲突的文件："
    )
    expect(merge.locator(".merge-conflicts li")).to_have_text(["app.py"])
    assert git(repo, "rev-parse", "HEAD") == before and git(repo, "status", "--porcelain") == ""
    assert (repo / "app.py").read_text() == "v = 2\n"


def test_an_owner_changes_the_workspace_and_sees_refusals_translated(
    owner: Person, room_server: RoomServer, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    plain = tmp_path / "plain"
    plain.mkdir()
    project = room_server.create_project("工作区设置", TEAM, workspace=repo)
    page = owner.page
    owner.allow(r"Failed to load resource: .* 400")
    owner.open_project(project)
    open_tasks(page).get_by_role("button", name="工作区…").click()
    dialog = page.get_by_role("dialog", name="工作区设置 的工作区")
    facts = dialog.locator(".workspace-facts")
    expect(facts.locator(".workspace-path")).to_have_text(str(repo.resolve()))
    expect(facts.locator(".workspace-git")).to_have_text("是")
    expect(facts.locator("[data-mode]")).to_have_text("工作树")

    field = dialog.get_by_label("新的工作区路径")
    field.fill("relative/app")
    dialog.get_by_role("button", name="保存", exact=True).click()
    expect(dialog.get_by_role("alert")).to_have_text("工作区须是绝对路径，例如 /srv/work/app")
    field.fill(str(repo / "README.md"))
    dialog.get_by_role("button", name="保存", exact=True).click()
    expect(dialog.get_by_role("alert")).to_have_text(
        f"工作区必须是目录，不能是文件：{repo / 'README.md'}"
    )
    # A folder inside another project's workspace: this owner is a member of that project too,
    # so the refusal names it.
    taken = make_repo(tmp_path / "taken")
    room_server.create_project("隔壁项目", TEAM, workspace=taken)
    owner.allow(r"Failed to load resource: .* 409")
    field.fill(str(taken / "src"))
    (taken / "src").mkdir()
    dialog.get_by_role("button", name="保存", exact=True).click()
    expect(dialog.get_by_role("alert")).to_have_text(
        f"这个目录已属于另一个项目：与它的工作区相同、在其中或包含它：{(taken / 'src').resolve()}"
        "「隔壁项目」"
    )

    field.fill(str(plain))
    dialog.get_by_role("button", name="保存", exact=True).click()
    expect(dialog.get_by_role("alert")).to_be_hidden()
    expect(facts.locator(".workspace-path")).to_have_text(str(plain.resolve()))
    expect(facts.locator(".workspace-git")).to_have_text("否")
    expect(facts.locator("[data-mode]")).to_have_text("串行")
    expect(facts.locator(".workspace-reason")).to_have_text("工作区不是 git 仓库，成员一次一人写入")
    screenshot(page, "work-workspace-dialog")
    wire = room_server.get(f"/api/projects/{project}")["project"]["workspace"]
    assert (wire["path"], wire["mode"]) == (str(plain.resolve()), "serial")


def open_workspace(page: Page, name: str) -> Any:
    open_tasks(page).get_by_role("button", name="工作区…").click()
    dialog = page.get_by_role("dialog", name=f"{name} 的工作区")
    expect(dialog.locator(".work-settings-facts")).to_be_visible()
    return dialog


def test_an_owner_changes_what_agents_may_do_and_the_server_keeps_it(
    owner: Person, room_server: RoomServer, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    project = room_server.create_project("权限设置", TEAM, workspace=repo)
    base = f"/api/projects/{project}"
    page = owner.page
    owner.allow(r"Failed to load resource: .* 400")
    owner.open_project(project)
    dialog = open_workspace(page, "权限设置")
    facts = dialog.locator(".work-settings-facts")
    expect(facts.locator(".settings-network")).to_have_text("不允许（默认）")
    expect(facts.locator(".settings-unsandboxed")).to_have_text("不允许（默认）")
    expect(facts.locator(".settings-roles")).to_have_text("无（按各角色的默认权限）")
    timeout = facts.locator('[data-limit="command_timeout_secs"]')
    expect(timeout).to_have_text("120 秒 默认")
    expect(facts.locator('[data-limit="tool_calls_per_turn"]')).to_have_text("40 次 默认")

    # Network on, backend read-only, a timeout of its own.
    dialog.get_by_label("允许命令联网").check()
    dialog.get_by_role("group", name="只读角色").get_by_label("后端", exact=True).check()
    field = dialog.get_by_label("单条命令超时", exact=True)
    expect(field).to_have_attribute("placeholder", "默认 120")
    field.fill("30")
    dialog.get_by_role("button", name="保存设置").click()
    expect(facts.locator(".settings-network")).to_have_text("允许：命令可以访问网络")
    expect(facts.locator(".settings-roles .badge")).to_have_text(["后端"])
    expect(timeout).to_have_text("30 秒 （本项目设定；默认 120 秒）")
    expect(timeout).to_have_attribute("data-set", "true")
    server = room_server.get(base)["project"]["settings"]
    assert server["network"] is True and server["read_only_roles"] == ["backend"]
    assert server["limits"]["command_timeout_secs"] == 30
    assert server["limits_set"] == ["command_timeout_secs"]

    # A negative timeout: the server refuses it, the page says which field in Chinese.
    field.fill("-5")
    dialog.get_by_role("button", name="保存设置").click()
    alert = dialog.get_by_role("alert")
    expect(alert).to_have_text("「单条命令超时」的值不被接受：超出允许的范围，或不是有效的数")
    expect(alert).to_have_attribute("data-code", "bad_body")
    expect(timeout).to_have_text("30 秒 （本项目设定；默认 120 秒）")
    screenshot(page, "work-settings-owner")
    assert room_server.get(base)["project"]["settings"]["limits"]["command_timeout_secs"] == 30

    # After a reload: the bar says network is on, the dialog shows what the server kept.
    page.reload()
    expect(page.locator("#app")).to_be_visible()
    owner.open_project(project)
    bar = open_tasks(page).locator(".workspace-bar")
    expect(bar.locator(".bar-network")).to_have_text("可联网")
    expect(bar.locator(".bar-unsandboxed")).to_have_count(0)
    dialog = open_workspace(page, "权限设置")
    facts = dialog.locator(".work-settings-facts")
    expect(facts.locator(".settings-network")).to_have_text("允许：命令可以访问网络")
    expect(facts.locator(".settings-roles .badge")).to_have_text(["后端"])
    expect(dialog.get_by_label("允许命令联网")).to_be_checked()
    expect(
        dialog.get_by_role("group", name="只读角色").get_by_label("后端", exact=True)
    ).to_be_checked()
    field = dialog.get_by_label("单条命令超时", exact=True)
    expect(field).to_have_value("30")

    # Back to the default; unsandboxed commands allowed, with the warning.
    dialog.get_by_role("button", name="单条命令超时恢复默认").click()
    expect(field).to_have_value("")
    dialog.get_by_label("允许未隔离运行命令").check()
    dialog.get_by_role("button", name="保存设置").click()
    timeout = facts.locator('[data-limit="command_timeout_secs"]')
    expect(timeout).to_have_text("120 秒 默认")
    expect(facts.locator(".settings-unsandboxed .badge-warn")).to_have_text("未隔离")
    expect(dialog.get_by_role("alert")).to_be_hidden()
    server = room_server.get(base)["project"]["settings"]
    assert server["limits"]["command_timeout_secs"] == 120 and server["limits_set"] == []
    assert server["unsandboxed"] is True and server["network"] is True
    dialog.locator(".work-settings").scroll_into_view_if_needed()
    screenshot(page, "work-settings-unsandboxed")


def test_an_owner_edits_the_patterns_a_merge_flags_as_generated(
    owner: Person, room_server: RoomServer, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    project = room_server.create_project("生成文件规则", TEAM, workspace=repo)
    base = f"/api/projects/{project}"
    page = owner.page
    owner.allow(r"Failed to load resource: .* 400")
    owner.open_project(project)
    dialog = open_workspace(page, "生成文件规则")
    shown = dialog.locator(".work-settings-facts .settings-merge-ignore")
    defaults = room_server.get(base)["project"]["settings"]["merge_ignore_default"]
    expect(shown).to_contain_text(f"{len(defaults)} 条规则 （默认列表）")
    field = dialog.get_by_label("合并时标为生成文件的规则（每行一条）")
    expect(field).to_have_value("\n".join(defaults))

    # A comment line is refused, in Chinese, naming the line; nothing is kept.
    field.fill("*.md\n# 注释")
    dialog.get_by_role("button", name="保存设置").click()
    alert = dialog.get_by_role("alert")
    expect(alert).to_have_text("第 2 条规则（# 注释）不能用：不支持以 # 开头的注释")
    expect(alert).to_have_attribute("data-code", "bad_merge_ignore")
    assert room_server.get(base)["project"]["settings"]["merge_ignore_set"] is False

    field.fill("*.md\n  out/  \n\n")
    dialog.get_by_role("button", name="保存设置").click()
    expect(shown).to_contain_text("2 条规则 （本项目自定义）")
    expect(shown.locator("code")).to_have_text(["*.md", "out/"])
    expect(dialog.get_by_role("alert")).to_be_hidden()
    dialog.locator(".settings-merge-ignore-field").scroll_into_view_if_needed()
    screenshot(page, "work-settings-merge-ignore")
    assert room_server.get(base)["project"]["settings"]["merge_ignore"] == ["*.md", "out/"]

    dialog.get_by_role("button", name="恢复默认列表").click()
    dialog.get_by_role("button", name="保存设置").click()
    expect(shown).to_contain_text("（默认列表）")
    assert room_server.get(base)["project"]["settings"]["merge_ignore_set"] is False


def test_a_member_sees_the_settings_and_the_kept_worktrees_but_no_controls(
    chromium: Browser, owner: Person, room_server: RoomServer, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    board = Board(room_server, repo, "保留工作树", "notes")
    worktree = board.start("notes")
    (worktree / "draft.md").write_text("还没提交\n", encoding="utf-8")
    status, _ = room_server.server.request(
        "PATCH",
        f"{board.base}/settings",
        {"read_only_roles": ["tester"], "limits": {"tool_calls_per_turn": 7}},
        headers=room_server.owner.headers,
    )
    assert status == 200
    branch = f"room/{board.id}/notes-1"

    # The owner sees the attempt started for the task, with its uncommitted file.
    page = owner.page
    owner.open_project(board.id)
    dialog = open_workspace(page, "保留工作树")
    row = dialog.locator(f'.worktree-row[data-branch="{branch}"]')
    expect(row.locator(".branch-name")).to_have_text(branch)
    expect(row.locator(".worktree-task")).to_contain_text("notes")
    expect(row.locator(".badge").first).to_have_text("进行中")
    expect(row.locator(".worktree-ahead")).to_have_text("领先 0 · 落后 0")
    expect(row.locator(".worktree-dirty")).to_have_text("有未提交的改动")
    dialog.locator(".worktrees").scroll_into_view_if_needed()
    screenshot(page, "work-worktrees")

    # Another member: the same facts and worktrees, no form.
    mia = join(chromium, room_server, board.id, "mia", "米娅")
    try:
        mia.open_project(board.id)
        other = open_workspace(mia.page, "保留工作树")
        facts = other.locator(".work-settings-facts")
        expect(facts.locator(".settings-roles .badge")).to_have_text(["测试"])
        expect(facts.locator('[data-limit="tool_calls_per_turn"]')).to_have_text(
            "7 次 （本项目设定；默认 40 次）"
        )
        expect(other.locator(".settings-owner-only")).to_have_text(
            "只有项目所有者可以更改这些设置。"
        )
        expect(other.locator(".work-settings-form")).to_have_count(0)
        expect(other.get_by_role("checkbox")).to_have_count(0)
        expect(other.get_by_role("spinbutton")).to_have_count(0)
        expect(other.get_by_role("button", name="保存设置")).to_have_count(0)
        expect(other.locator(f'.worktree-row[data-branch="{branch}"]')).to_be_visible()
        screenshot(mia.page, "work-settings-member")
        mia.assert_clean()
    finally:
        mia.close()
