// The side panel: tabs 成员 / 任务 / 决策 / 记忆 / 模型 (the 记忆 tab is memory.js). Tasks and decisions are read from the board
// (`GET /api/projects/{id}/tasks`, `…/decisions`; the shapes are in docs/tasks.md "Shapes").

import { get } from "./api.js";
import { attemptSection } from "./attempts.js";
import { $, $$, h, icon } from "./dom.js";
import { errorText, label, t } from "./i18n.js";
import { avatar } from "./message.js";
import { member, upsertProject } from "./store.js";
import { acceptanceProgress, planStartBar, taskActions } from "./taskactions.js";
import { taskDates, taskEditControls, taskToolbar } from "./taskboard.js";
import { openWorkspace, workspaceBar } from "./workspace.js";

export class Panel {
  constructor(root, { members, models, memory }) {
    this.root = root;
    this.members = members;
    this.models = models;
    this.memory = memory;
    this.room = null;
    this.ownerFilter = null;
    this.tabs = $$("[role=tab]", root);
    for (const tab of this.tabs) {
      tab.addEventListener("click", () => this.select(tab.dataset.tab));
      tab.addEventListener("keydown", (event) => this.onTabKey(event));
    }
    this.current = "members";
  }

  open(room) {
    this.room = room;
    this.ownerFilter = null;
    this.select(this.current, false);
  }

  select(name, focus = true) {
    this.current = name;
    for (const tab of this.tabs) {
      const on = tab.dataset.tab === name;
      tab.setAttribute("aria-selected", String(on));
      tab.tabIndex = on ? 0 : -1;
      $(`#${tab.getAttribute("aria-controls")}`).hidden = !on;
      if (on && focus && document.activeElement?.getAttribute("role") === "tab") tab.focus();
    }
    if (!this.room) return;
    if (name === "members") this.members.open(this.room);
    if (name === "tasks") this.loadTasks();
    if (name === "decisions") this.loadDecisions();
    if (name === "memory") this.memory.open(this.room);
    if (name === "models") this.models.load(this.room);
  }

  onTabKey(event) {
    const index = this.tabs.indexOf(event.currentTarget);
    const next = { ArrowRight: index + 1, ArrowLeft: index - 1, Home: 0, End: this.tabs.length - 1 }[event.key];
    if (next === undefined) return;
    event.preventDefault();
    const tab = this.tabs[(next + this.tabs.length) % this.tabs.length];
    tab.focus();
    this.select(tab.dataset.tab);
  }

  refresh() {
    if (this.room) this.select(this.current, false);
  }

  showTasksOf(memberId) {
    this.ownerFilter = memberId;
    this.select("tasks");
  }

  // -- tasks ------------------------------------------------------------------------------------

  async loadTasks() {
    const box = $("#tab-tasks", this.root);
    const room = this.room;
    box.replaceChildren(h("p", { class: "muted", text: t("common.loading") }));
    let data;
    try {
      // The work settings (for the workspace bar) come with the project object over HTTP only:
      // fetched once per visit, then kept up to date by the workspace dialog.
      const [tasks, detail] = await Promise.all([
        get(`/api/projects/${room.id}/tasks`),
        room.project.settings ? null : get(`/api/projects/${room.id}`).catch(() => null),
      ]);
      data = tasks;
      if (detail?.project?.settings) upsertProject({ id: room.id, settings: detail.project.settings });
    } catch (err) {
      box.replaceChildren(h("p", { class: "error-text", text: errorText(err) }));
      return;
    }
    if (room !== this.room) return;
    let tasks = data.tasks || [];
    const nodes = [workspaceBar(room.project.workspace, () => openWorkspace(room).then(() => this.room === room && this.loadTasks()), room.project.settings)];
    if (this.ownerFilter !== null) {
      const m = member(room, this.ownerFilter);
      tasks = tasks.filter((task) => task.owner_id === this.ownerFilter);
      nodes.push(h("div", { class: "filter-bar" },
        h("span", { text: t("tasks.filteredBy", { name: m ? m.display_name : `#${this.ownerFilter}` }) }),
        h("button", { type: "button", class: "btn btn-small", text: t("tasks.clearFilter"), on: { click: () => {
          this.ownerFilter = null;
          this.loadTasks();
        } } })));
    }
    const reload = () => this.loadTasks();
    const all = data.tasks || [];
    const toolbar = taskToolbar(room, all, reload);
    if (toolbar) nodes.push(toolbar);
    const planBar = planStartBar(room, tasks, () => this.loadTasks());
    if (planBar) nodes.push(planBar);
    if (!tasks.length) nodes.push(empty("tasks.emptyTitle", this.ownerFilter !== null ? "tasks.emptyOwner" : "tasks.empty"));
    for (const task of tasks) nodes.push(taskCard(room, task, reload, this.ownerFilter === null ? all : [task]));
    box.replaceChildren(...nodes);
  }

  // -- decisions --------------------------------------------------------------------------------

  async loadDecisions() {
    const box = $("#tab-decisions", this.root);
    const room = this.room;
    box.replaceChildren(h("p", { class: "muted", text: t("common.loading") }));
    let data;
    try {
      data = await get(`/api/projects/${room.id}/decisions`);
    } catch (err) {
      box.replaceChildren(h("p", { class: "error-text", text: errorText(err) }));
      return;
    }
    if (room !== this.room) return;
    const decisions = data.decisions || [];
    if (!decisions.length) {
      box.replaceChildren(empty("decisions.emptyTitle", "decisions.empty"));
      return;
    }
    box.replaceChildren(...decisions.map((d) => decisionCard(room, d)));
  }
}

function empty(titleKey, textKey) {
  return h("div", { class: "empty-state" }, h("p", { class: "empty-title", text: t(titleKey) }), h("p", { class: "muted", text: t(textKey) }));
}

/** Criteria are reviewed (and shown) while a verdict on them can count. */
const JUDGED = new Set(["in_review", "changes_requested", "accepted"]);

function taskCard(room, task, reload, order) {
  const owner = member(room, task.owner_id);
  const criteria = task.criteria || [];
  const passed = criteria.filter((c) => c.passed === true).length;
  const evidence = task.evidence || [];
  return h(
    "article",
    { class: ["task-card", `task-state-${task.state}`], dataset: { key: task.key, state: task.state } },
    h("header", { class: "task-head" },
      h("span", { class: "task-key", text: task.key }),
      h("span", { class: ["state-badge", `state-${task.state}`], text: label("taskState", task.state) }),
      task.held ? h("span", { class: "badge task-held", text: t("tasks.held") }) : null,
      h("span", { class: "task-rev", title: t("tasks.revision"), text: `r${task.revision}` })),
    h("h4", { class: "task-title", text: task.title }),
    h("div", { class: "task-owner" },
      owner ? avatar(room, owner.id, "xs") : null,
      h("span", { text: owner ? owner.display_name : task.owner?.display_name || t("tasks.noOwner") })),
    taskDates(task),
    acceptanceProgress(task),
    taskActions(room, task, reload),
    taskEditControls(room, task, order, reload),
    attemptSection(room, task, reload),
    task.waiting_on?.length ? h("p", { class: "task-waiting" }, icon("pause"), h("span", { text: t("tasks.waitingOn", { keys: task.waiting_on.join("、") }) })) : null,
    task.note ? h("p", { class: "task-note", text: t("tasks.note", { note: task.note }) }) : null,
    criteria.length
      ? h("details", { class: "task-criteria", open: JUDGED.has(task.state) && task.state !== "accepted" },
        h("summary", { text: t("tasks.criteria", { passed, total: criteria.length }) }),
        h("ol", {}, criteria.map((c) => criterionItem(c))))
      : null,
    evidence.length
      ? h("details", { class: "task-evidence" },
        h("summary", { text: t("tasks.evidence", { n: evidence.length }) }),
        h("ul", {}, evidence.map((e) => evidenceItem(e))))
      : null,
  );
}

/** One criterion, numbered as reviews name it (`n`): passed or not on this revision, or not
 * checked on it; the reviewer's note when the verdict counts. */
function criterionItem(c) {
  const state = c.passed === true ? "passed" : c.passed === false ? "failed" : "open";
  const counted = c.verdict?.counts ? c.verdict : null;
  return h("li", { class: ["criterion", state], dataset: { n: String(c.n) } },
    icon(state === "passed" ? "check" : state === "failed" ? "close" : "dot"),
    h("span", { class: "criterion-n", text: `${c.n}.` }),
    h("span", { class: "visually-hidden", text: t(state === "passed" ? "tasks.passed" : state === "failed" ? "tasks.notPassed" : "tasks.unchecked") }),
    h("span", { text: c.text }),
    counted ? h("span", { class: "muted", text: ` r${counted.revision}` }) : null,
    counted?.note ? h("p", { class: "criterion-note", text: counted.note }) : null);
}

/** One piece of evidence: a file (with its hash, checked against the workspace on every read of
 * the board), a command and its exit code, a message, or the submission's summary. Only a file
 * can be verified, so only a file says whether it was. */
function evidenceItem(e) {
  const checked = e.verified === true || e.verified === false;
  return h("li", { class: ["evidence", `evidence-${e.kind}`, e.verified ? "verified" : checked ? "unverified" : null], dataset: { kind: e.kind } },
    h("span", { class: "badge", text: label("evidenceKind", e.kind) }),
    h("span", { class: "muted", title: t("tasks.revision"), text: `r${e.revision}` }),
    e.review_id !== null && e.review_id !== undefined ? h("span", { class: "muted", text: t("tasks.fromReview") }) : null,
    e.path ? h("code", { text: e.path }) : null,
    e.sha256 ? h("code", { class: "muted", title: e.sha256, text: e.sha256.slice(0, 12) }) : null,
    e.size !== undefined && e.size !== null ? h("span", { class: "muted", text: formatBytes(e.size) }) : null,
    e.command ? h("code", { text: `$ ${e.command.command} → ${e.command.exit_code}` }) : null,
    e.kind === "message" && e.message_id ? h("button", { type: "button", class: "btn btn-small btn-ghost", dataset: { jump: String(e.message_id) }, text: t("tasks.evidenceMessage", { seq: e.seq }) }) : null,
    checked ? h("span", { class: ["verify", e.verified ? "ok" : "warn"], text: e.verified ? t("tasks.verified") : e.verification ? t("tasks.unverifiedWhy", { why: label("verification", e.verification) }) : t("tasks.unverified") }) : null,
    e.note ? h("p", { class: "evidence-summary", text: e.note }) : null);
}

function decisionCard(room, d) {
  const receipts = d.receipts || [];
  const synced = receipts.filter((r) => r.synced).length;
  return h(
    "article",
    { class: "decision-card", dataset: { number: d.label } },
    h("header", { class: "task-head" },
      h("span", { class: "task-key", text: d.label }),
      h("span", { class: ["state-badge", `decision-${d.status}`], text: label("decisionStatus", d.status) }),
      h("span", { class: "task-rev", text: `r${d.revision}` })),
    h("h4", { class: "task-title", text: d.title }),
    h("details", { class: "receipts" },
      h("summary", { text: t("decisions.receipts", { synced, total: receipts.length }) }),
      h("ul", {}, receipts.map((r) => {
        const m = member(room, r.member_id);
        return h("li", { class: ["receipt", r.synced ? "synced" : "unsynced"], dataset: { memberId: String(r.member_id) } },
          icon(r.synced ? "check" : "dot"),
          h("span", { text: m ? m.display_name : `#${r.member_id}` }),
          h("span", { class: "muted", text: r.synced ? t("decisions.synced") : t("decisions.unsynced") }));
      }))),
  );
}

function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}
