// The overview page (/overview, reachable from the projects column): the Gantt chart of every
// project (or of one project's tasks), the resource conflicts, the risk scan grouped 🔴 / 🟡 / 🟢,
// and the project index (| 项目 | 目录 | 最后更新 | 状态 | 备注 |) with the one-line summary and
// the timeline editable by owners. Everything comes from /api/portfolio and
// /api/projects/{id}/timeline; the server decides who may edit.

import { get, post, put, setCsrf } from "./api.js";
import { $, h } from "./dom.js";
import { ganttSvg } from "./gantt.js";
import { riskWords } from "./notices.js";
import { applyStatic, errorText, label, onLang, t } from "./i18n.js";
import { openDialog, toast, toastError } from "./ui.js";

const state = { data: null, focus: null, timeline: null, scan: null };

function labels() {
  return {
    chart: t("overview.gantt"),
    today: t("overview.today"),
    unscheduled: t("overview.unscheduled"),
    status: { done: t("overview.ms.done"), in_progress: t("overview.ms.in_progress"), pending: t("overview.ms.pending") },
  };
}

function projectRows(projects) {
  return projects.map((p) => ({
    id: `p${p.id}`,
    label: `${p.red ? "🔴 " : ""}${p.name}`,
    sub: `${p.progress}% · ${label("projectState", p.state)}`,
    start: p.start,
    end: p.end,
    progress: p.progress,
    overdue: p.overdue,
    atRisk: p.at_risk,
    milestones: p.milestones,
  }));
}

function taskRows(tl, today) {
  const rows = [{
    id: "milestones", label: t("overview.milestones"), sub: `${tl.progress}%`, start: tl.start, end: tl.end,
    progress: tl.progress, overdue: tl.overdue, atRisk: tl.at_risk, milestones: tl.milestones,
  }];
  for (const task of tl.tasks) {
    const late = task.est_end && task.est_end < today && !["accepted", "cancelled"].includes(task.state);
    rows.push({
      id: `t-${task.key}`,
      label: `${task.key} ${task.title}`,
      sub: label("taskState", task.state),
      start: task.est_start,
      end: task.est_end,
      progress: task.state === "accepted" ? 100 : 0,
      overdue: Boolean(late),
      atRisk: false,
      milestones: [],
    });
  }
  return rows;
}

function drawGantt() {
  const box = $("#ov-gantt");
  const data = state.data;
  if (!data) return;
  const width = Math.max(320, Math.floor(box.clientWidth || 600));
  const focus = state.focus && state.timeline;
  const rows = focus ? taskRows(state.timeline, data.today) : projectRows(data.projects.filter((p) => !["trashed", "purge_blocked"].includes(p.state)));
  $("#ov-gantt-back").hidden = !focus;
  const project = focus ? data.projects.find((p) => p.id === state.focus) : null;
  $("#ov-gantt-title").textContent = project ? t("overview.ganttOf", { name: project.name }) : t("overview.gantt");
  box.replaceChildren(rows.length ? ganttSvg({ rows, today: data.today, width, labels: labels() }) : h("p", { class: "muted", text: t("overview.noProjects") }));
  const names = new Map(data.projects.map((p) => [p.id, p.name]));
  $("#ov-task-dates").replaceChildren(...(focus && project?.owner ? state.timeline.tasks.map((task) =>
    h("li", { dataset: { task: task.key } },
      h("span", { text: `${task.key} ${task.title} · ${datesText(task.est_start, task.est_end)}` }), " ",
      h("button", { type: "button", class: "btn btn-small btn-ghost", text: t("overview.editDates"), on: { click: () => editTaskDates(project, task) } }))) : []));
  $("#ov-conflicts").replaceChildren(...(focus ? [] : data.conflicts.map((c) =>
    h("li", { class: "ov-conflict", text: t("overview.conflict", { date: c.date, names: c.project_ids.map((id) => names.get(id) || `#${id}`).join("、") }) }))));
}

/** A task's dates in words: "未排期" when it has none (it read "? → ?"), one end named alone. */
function datesText(start, end) {
  if (start && end) return `${start} → ${end}`;
  if (start) return t("overview.startsOn", { date: start });
  if (end) return t("overview.dueOn", { date: end });
  return t("overview.unscheduled");
}

/** A real progress bar (it was drawn with █ and ░ characters), with the percentage beside it. */
function progressBar(percent, name) {
  const value = Math.max(0, Math.min(100, Number(percent) || 0));
  return h("span", { class: "ov-progress" },
    h("progress", { max: 100, value, attrs: { "aria-label": t("overview.progressOf", { name }) } }),
    h("span", { class: "ov-progress-text", text: `${value}%` }));
}

async function focusProject(id) {
  try {
    state.timeline = await get(`/api/projects/${id}/timeline`);
    state.focus = id;
  } catch (err) {
    toastError(err);
    return;
  }
  drawGantt();
  $("#ov-gantt").scrollIntoView({ block: "nearest" });
}

function notes(p) {
  const parts = [];
  if (p.summary) parts.push(h("span", { class: "ov-summary", text: p.summary }));
  if (p.state_reason) parts.push(h("span", { class: "ov-reason", text: t("banner.reason", { reason: p.state_reason }) }));
  if (p.inactive) parts.push(h("span", { class: "badge badge-warn ov-inactive", text: t("overview.inactive") }));
  if (p.overdue) parts.push(h("span", { class: "badge ov-overdue", text: t("overview.overdue") }));
  else if (p.at_risk) parts.push(h("span", { class: "badge badge-warn", text: t("overview.atRisk") }));
  return parts;
}

function drawIndex() {
  const body = $("#ov-index tbody");
  const rows = state.data.projects.map((p) => {
    const actions = [h("button", { type: "button", class: "btn btn-small btn-ghost", text: t("overview.tasks"), on: { click: () => focusProject(p.id) } })];
    if (p.owner) {
      actions.push(
        h("button", { type: "button", class: "btn btn-small btn-ghost", dataset: { edit: "summary" }, text: t("overview.editSummary"), on: { click: () => editSummary(p) } }),
        h("button", { type: "button", class: "btn btn-small btn-ghost", dataset: { edit: "timeline" }, text: t("overview.editTimeline"), on: { click: () => editTimeline(p) } }),
      );
    }
    return h("tr", { dataset: { projectId: String(p.id), state: p.state } },
      h("td", { class: "ov-name" },
        p.red ? h("span", { class: "ov-red", text: "🔴 ", attrs: { title: t("overview.red") } }) : null,
        h("a", { href: `/#/p/${p.id}`, text: p.name }),
        progressBar(p.progress, p.name)),
      h("td", { class: "ov-folder" }, h("code", { text: p.folder })),
      h("td", { class: "ov-updated", text: (p.last_activity || "").slice(0, 10) }),
      h("td", {}, h("span", { class: ["state-badge", `state-${p.state}`], text: label("projectState", p.state) })),
      h("td", { class: "ov-notes" }, ...notes(p), h("span", { class: "ov-row-actions" }, actions)));
  });
  body.replaceChildren(...rows);
}

async function load() {
  try {
    state.data = await get("/api/portfolio");
    $("#ov-error").hidden = true;
  } catch (err) {
    if (err.status === 401) location.href = "/";
    $("#ov-error").textContent = errorText(err);
    $("#ov-error").hidden = false;
    return;
  }
  if (state.focus) {
    try {
      state.timeline = await get(`/api/projects/${state.focus}/timeline`);
    } catch {
      state.focus = null;
    }
  }
  drawGantt();
  drawIndex();
}

// -- the risk scan ----------------------------------------------------------------------------

function drawScan() {
  const scan = state.scan;
  const section = $("#ov-scan-result");
  section.hidden = !scan;
  if (!scan) return;
  const group = (level, mark, items, item) => h("div", { class: `ov-scan-group ov-scan-${level}`, dataset: { level } },
    h("h3", { text: `${mark} ${t(`overview.level.${level}`)} · ${items.length}` }),
    h("ul", {}, items.map(item)));
  const finding = (f) => {
    // Worded from the rule and its facts in the reader's language; else the server's words.
    const words = riskWords(f.rule, f.params || {}) || f;
    return h("li", { dataset: { rule: f.rule } },
      h("strong", { text: f.project }), " ", h("span", { class: "ov-finding-title", text: words.title }), h("span", { class: "muted", text: ` — ${words.detail}` }),
      h("div", { class: "ov-suggestion", text: t("overview.suggestion", { text: words.suggestion }) }));
  };
  $("#ov-scan-groups").replaceChildren(
    group("red", "🔴", scan.red, finding),
    group("yellow", "🟡", scan.yellow, finding),
    group("green", "🟢", scan.green, (g) => h("li", { text: g.project })));
}

async function runScan() {
  const button = $("#ov-scan");
  button.disabled = true;
  try {
    state.scan = await post("/api/risk-scan", {});
    drawScan();
    await load();
    toast(t("overview.scanned", { red: state.scan.red.length, yellow: state.scan.yellow.length }));
  } catch (err) {
    toastError(err);
  } finally {
    button.disabled = false;
  }
}

// -- owners' edits ----------------------------------------------------------------------------

async function editSummary(p) {
  const saved = await openDialog({
    title: t("overview.editSummaryTitle", { name: p.name }),
    build: (close) => {
      const input = h("input", { id: "ov-summary-input", value: p.summary || "", maxLength: 200, attrs: { autocomplete: "off", placeholder: t("overview.summaryHint") } });
      const error = h("p", { class: "error-text", attrs: { role: "alert" }, hidden: true });
      const form = h("form", { class: "form" },
        h("label", { class: "field" }, h("span", { class: "field-label", text: t("overview.summaryLabel") }), input),
        error,
        h("div", { class: "dialog-actions" },
          h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close() } }),
          h("button", { type: "submit", class: "btn btn-primary", text: t("overview.save") })));
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        try {
          close(await put(`/api/projects/${p.id}/summary`, { summary: input.value }));
        } catch (err) {
          error.textContent = errorText(err);
          error.hidden = false;
        }
      });
      return form;
    },
  });
  if (saved) await load();
}

async function editTaskDates(project, task) {
  const saved = await openDialog({
    title: t("overview.editDatesTitle", { key: task.key }),
    build: (close) => {
      const start = h("input", { id: "task-start", type: "date", value: task.est_start || "", attrs: { autocomplete: "off" } });
      const end = h("input", { id: "task-end", type: "date", value: task.est_end || "", attrs: { autocomplete: "off" } });
      const error = h("p", { class: "error-text", attrs: { role: "alert" }, hidden: true });
      const form = h("form", { class: "form" },
        h("div", { class: "tl-grid" },
          h("label", { class: "field" }, h("span", { class: "field-label", text: t("overview.start") }), start),
          h("label", { class: "field" }, h("span", { class: "field-label", text: t("overview.end") }), end)),
        error,
        h("div", { class: "dialog-actions" },
          h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close() } }),
          h("button", { type: "submit", class: "btn btn-primary", text: t("overview.save") })));
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        try {
          close(await put(`/api/projects/${project.id}/tasks/${encodeURIComponent(task.key)}/dates`, {
            est_start: start.value.trim() || null, est_end: end.value.trim() || null,
          }));
        } catch (err) {
          error.textContent = `${errorText(err)}${err.details?.field ? ` (${err.details.field})` : ""}`;
          error.hidden = false;
        }
      });
      return form;
    },
  });
  if (saved) await focusProject(project.id);
}

/** "12, skill:rust, external:支付网关" → the dependencies body; unknown parts are sent as they are
 * so the server names the bad one. */
function parseDependencies(text) {
  return text.split(/[,，]/).map((part) => part.trim()).filter(Boolean).map((part) => {
    if (/^#?\d+$/.test(part)) return { kind: "project", project_id: Number(part.replace("#", "")) };
    const [kind, ...rest] = part.split(/[:：]/);
    return rest.length ? { kind: kind.trim(), name: rest.join(":").trim() } : { kind: "skill", name: part };
  });
}

function formatDependencies(deps) {
  return deps.map((d) => (d.kind === "project" ? String(d.project_id) : `${d.kind}:${d.name}`)).join(", ");
}

function milestoneRow(m = { name: "", date: "", status: "pending" }) {
  const status = h("select", { class: "ms-status", attrs: { "aria-label": t("overview.msStatus") } },
    ["pending", "in_progress", "done"].map((s) => h("option", { value: s, text: t(`overview.ms.${s}`), selected: s === m.status })));
  const row = h("li", { class: "ms-row" },
    h("input", { class: "ms-name", value: m.name, maxLength: 200, attrs: { "aria-label": t("overview.msName"), placeholder: t("overview.msName") } }),
    h("input", { class: "ms-date", type: "date", value: m.date, attrs: { "aria-label": t("overview.msDate") } }),
    status,
    h("button", { type: "button", class: "btn btn-small btn-ghost", text: "✕", attrs: { "aria-label": t("overview.msRemove") }, on: { click: () => row.remove() } }));
  return row;
}

async function editTimeline(p) {
  let current;
  try {
    current = await get(`/api/projects/${p.id}/timeline`);
  } catch (err) {
    toastError(err);
    return;
  }
  const saved = await openDialog({
    title: t("overview.editTimelineTitle", { name: p.name }),
    wide: true,
    className: "timeline-dialog",
    build: (close) => {
      const field = (id, key, value, attrs = {}, type = "text") => h("label", { class: "field" },
        h("span", { class: "field-label", text: t(key) }),
        h("input", { id, type, value: value ?? "", attrs: { autocomplete: "off", ...attrs } }));
      const list = h("ol", { class: "ms-list" }, current.milestones.map((m) => milestoneRow(m)));
      const error = h("p", { id: "tl-error", class: "error-text", attrs: { role: "alert" }, hidden: true });
      const form = h("form", { class: "form" },
        h("div", { class: "tl-grid" },
          field("tl-start", "overview.start", current.start, {}, "date"),
          field("tl-end", "overview.end", current.end, {}, "date"),
          field("tl-hours", "overview.hoursEstimated", current.hours_estimated, { inputmode: "decimal" })),
        field("tl-deps", "overview.dependencies", formatDependencies(current.dependencies), { placeholder: "12, skill:rust, external:支付网关" }),
        h("h3", { text: t("overview.milestones") }),
        list,
        h("button", { type: "button", class: "btn btn-small", text: t("overview.msAdd"), on: { click: () => list.append(milestoneRow()) } }),
        error,
        h("div", { class: "dialog-actions" },
          h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close() } }),
          h("button", { type: "submit", class: "btn btn-primary", text: t("overview.save") })));
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const value = (id) => form.querySelector(`#${id}`).value.trim();
        const hours = value("tl-hours");
        const body = {
          start: value("tl-start") || null,
          end: value("tl-end") || null,
          hours_estimated: hours === "" ? null : Number(hours),
          hours_actual: current.hours_actual,
          milestones: [...list.children].map((row) => ({
            name: row.querySelector(".ms-name").value,
            date: row.querySelector(".ms-date").value.trim(),
            status: row.querySelector(".ms-status").value,
          })),
        };
        try {
          const deps = parseDependencies(value("tl-deps"));
          if (formatDependencies(deps) !== formatDependencies(current.dependencies)) {
            await put(`/api/projects/${p.id}/dependencies`, { dependencies: deps });
          }
          close(await put(`/api/projects/${p.id}/timeline`, body));
        } catch (err) {
          const where = err.details?.field ? ` (${err.details.field})` : "";
          error.textContent = `${errorText(err)}${where}`;
          error.hidden = false;
        }
      });
      return form;
    },
  });
  if (saved) {
    toast(t("overview.saved"));
    await load();
  }
}

async function boot() {
  applyStatic(document);
  let me;
  try {
    me = await get("/api/me");
  } catch (err) {
    if (err.status === 401) location.href = "/";
    return;
  }
  setCsrf(me.csrf_token);
  $("#ov-scan").addEventListener("click", runScan);
  $("#ov-gantt-back").addEventListener("click", () => {
    state.focus = null;
    state.timeline = null;
    drawGantt();
  });
  let lastWidth = 0;
  new ResizeObserver(() => {
    const w = $("#ov-gantt").clientWidth;
    if (Math.abs(w - lastWidth) > 4) {
      lastWidth = w;
      drawGantt();
    }
  }).observe($("#ov-gantt"));
  onLang(() => {
    drawGantt();
    drawIndex();
    drawScan();
  });
  await load();
  document.body.dataset.ready = "true";
}

boot();
