// The 记忆 tab: the project's memory records (docs/memory.md) — the project summary, facts,
// conventions, decisions (from the decision log, with the alternatives rejected), progress, the
// session log (newest first, append-only) and references — read from
// `GET /api/projects/{id}/memory`, edited by people with revision history, refreshed on the
// `memory` frame. A search result opens a record here (reveal()).
//
// An edit names the revision it started from; when someone saved in between the server answers
// 409 `stale_revision`, and the dialog keeps the person's text, shows the newest version and
// lets them save again on top of it.

import { get, patch, post, put } from "./api.js";
import { $, h, icon } from "./dom.js";
import { errorText, formatDateTime, label, t } from "./i18n.js";
import { clearHighlights, highlightIn } from "./highlight.js";
import { isOwner, member } from "./store.js";
import { confirmDialog, openDialog, toast, toastError } from "./ui.js";

/** The summary's sections, in order (the server's keys). */
export const SUMMARY_SECTIONS = ["what", "run", "where", "status", "pitfalls"];

/** Kinds of entries, in the tab's order: the payload key, the API kind, and each kind's fields
 * (`lines`: a textarea; `required`: refused empty by the server). */
const KINDS = [
  { key: "facts", kind: "fact", fields: [{ name: "text", lines: 3, required: true }] },
  { key: "conventions", kind: "convention", fields: [{ name: "text", lines: 3, required: true }] },
  {
    key: "progress",
    kind: "progress",
    fields: [
      { name: "text", lines: 3, required: true },
      { name: "stage", required: true },
      { name: "next", lines: 2, required: true },
      { name: "tags", list: true },
      { name: "blocked", lines: 2 },
    ],
  },
  {
    key: "sessions",
    kind: "session",
    appendOnly: true,
    fields: [
      { name: "summary", lines: 2, required: true },
      { name: "did", lines: 3 },
      { name: "verified", lines: 2 },
      { name: "next", lines: 2 },
      { name: "blocked", lines: 2 },
    ],
  },
  {
    key: "references",
    kind: "reference",
    fields: [
      { name: "ref_kind", choices: ["dir", "file", "url", "tool"], required: true },
      { name: "target", required: true },
      { name: "note", lines: 2 },
    ],
  },
];
const KIND_OF = new Map(KINDS.map((k) => [k.kind, k]));
const OVERVIEW_SESSIONS = 50; // the newest session-log entries the overview carries
const ARCHIVE_PAGE = 100;
const REFRESH_MS = 250; // memory frames come in bursts (an agent's checkpoint writes several)
const DONE_MS = 8000; // "更新完毕" after a change, then back to "已同步"

export class MemoryTab {
  constructor(root) {
    this.root = root;
    this.room = null;
    this.data = null;
    this.decisions = [];
    this.archived = new Map(); // kind -> {entries, hasMore}: the archive's pages being shown
    this.older = null; // {entries, hasMore}: session-log entries older than the overview's
    this.timer = null;
    this.loading = null; // the read under way, if any
    this.writes = 0; // this page's memory writes in flight ("正在记录")
    this.doneUntil = 0; // "更新完毕" until then (a change was just seen)
    this.statusTimer = null;
    this.status = h("p", { class: "memory-status muted", attrs: { role: "status" } });
  }

  /** Run one of this page's writes, saying 正在记录 while it is under way. */
  async saving(write) {
    this.writes += 1;
    this.renderStatus();
    try {
      return await write;
    } finally {
      this.writes -= 1;
      if (this.writes === 0) this.justChanged();
    }
  }

  justChanged() {
    this.doneUntil = Date.now() + DONE_MS;
    this.renderStatus();
    clearTimeout(this.statusTimer);
    this.statusTimer = setTimeout(() => this.renderStatus(), DONE_MS + 50);
  }

  /** The memory status: 正在记录 / 更新完毕 / 已同步, and when memory last changed. */
  renderStatus() {
    const changed = this.data?.changed_at || null;
    const state = this.writes > 0 ? "recording" : Date.now() < this.doneUntil ? "done" : "idle";
    const when = state === "idle" ? (changed ? ago(changed) : t("memory.status.never")) : t("memory.status.justNow");
    this.status.dataset.state = state;
    this.status.textContent = `${t(`memory.status.${state}`)} · ${when}`;
    this.status.title = changed ? t("memory.status.title", { at: formatDateTime(changed), version: this.data?.version ?? 0 }) : "";
  }

  open(room) {
    if (this.room !== room) {
      this.data = null;
      this.archived.clear();
      this.older = null;
    }
    this.room = room;
    this.load();
  }

  /** A `memory` frame: reload (coalesced) when the tab is showing, else on the next open. */
  onFrame(frame, showing) {
    if (!this.room || frame.project_id !== this.room.id) return;
    if (this.data && typeof frame.version === "number" && frame.version <= this.data.version) return;
    if (!showing) {
      this.data = null;
      return;
    }
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.load({ background: true }), REFRESH_MS);
    this.justChanged();
  }

  /** Read the overview (and the decision log) and render; `reveal()` waits for a read under way. */
  load(options = {}) {
    const run = this.read(options);
    this.loading = run;
    run.finally(() => {
      if (this.loading === run) this.loading = null;
    });
    return run;
  }

  async read({ background = false } = {}) {
    const room = this.room;
    if (!room) return;
    if (!background && !this.data) this.root.replaceChildren(h("p", { class: "muted", text: t("common.loading") }));
    let data;
    let decisions;
    try {
      [data, decisions] = await Promise.all([
        get(`/api/projects/${room.id}/memory`),
        get(`/api/projects/${room.id}/decisions`).catch(() => ({ decisions: [] })),
      ]);
    } catch (err) {
      if (room === this.room) this.root.replaceChildren(h("p", { class: "error-text", text: errorText(err) }));
      return;
    }
    if (room !== this.room) return;
    this.data = data;
    this.decisions = decisions.decisions || [];
    // Archive lists that are open stay open (and current) across a refresh.
    await Promise.all([...this.archived.keys()].filter((k) => k !== "decision").map((kind) => this.loadArchived(kind, false)));
    this.older = null;
    this.render();
  }

  render() {
    const data = this.data;
    if (!data) return;
    const scroll = this.root.scrollTop;
    const nodes = [];
    if (data.stale) nodes.push(staleNotice(data.stale));
    nodes.push(this.summarySection(data.summary));
    for (const spec of KINDS.slice(0, 2)) nodes.push(this.kindSection(spec));
    nodes.push(this.decisionSection());
    for (const spec of KINDS.slice(2)) nodes.push(this.kindSection(spec));
    if (isOwner(this.room)) nodes.push(this.clearSection());
    this.renderStatus();
    this.root.replaceChildren(h("div", { class: "memory" }, this.status, nodes));
    this.root.scrollTop = scroll;
  }

  /** Clearing all memory, apart from the rest and in two clicks: the second one says what goes. */
  clearSection() {
    const note = h("p", { class: "muted memory-clear-note", text: t("memory.clearNote"), hidden: true });
    const button = h("button", { type: "button", class: "btn btn-small btn-danger memory-clear", text: t("memory.clear") });
    let armed = false;
    button.addEventListener("click", async () => {
      if (!armed) {
        armed = true;
        button.textContent = t("memory.clearConfirm");
        note.hidden = false;
        return;
      }
      button.disabled = true;
      try {
        await this.saving(post(`/api/projects/${this.room.id}/memory/clear`, { confirm: true }));
        toast(t("memory.cleared"));
        this.archived.clear();
        this.older = null;
        this.load({ background: true });
      } catch (err) {
        toastError(err);
        button.disabled = false;
      }
    });
    return h("section", { class: "memory-section memory-danger", dataset: { kind: "clear" } }, button, note);
  }

  // -- the project summary ------------------------------------------------------------------------

  summarySection(summary) {
    const sections = sectionsOf(summary?.body);
    return h("section", { class: "memory-section", dataset: { kind: "summary", recordId: summary ? String(summary.id) : "" } },
      sectionHead("memory.summary", null, [
        summary ? h("button", { type: "button", class: "btn btn-small btn-ghost", text: t("memory.history"), on: { click: () => this.showHistory(summary, "summary") } }) : null,
        h("button", { type: "button", class: "btn btn-small", text: t("memory.edit"), on: { click: () => this.editSummary() } }),
      ]),
      summary ? byline(this.room, summary) : null,
      h("dl", { class: "memory-summary" }, SUMMARY_SECTIONS.map((key) => {
        const text = (sections[key] || "").trim();
        return [
          h("dt", { text: t(`memory.section.${key}`) }),
          h("dd", { class: text ? "memory-text" : "memory-text muted", dataset: { section: key }, text: text || t("memory.none") }),
        ];
      })),
    );
  }

  editSummary() {
    const room = this.room;
    const summary = this.data?.summary;
    let rev = summary?.rev ?? 0;
    return openDialog({
      title: t("memory.editSummary"),
      wide: true,
      build: (close) => {
        const current = sectionsOf(summary?.body);
        const inputs = new Map(SUMMARY_SECTIONS.map((key) => [key, h("textarea", { rows: 3, name: key, value: current[key] || "" })]));
        const problem = h("div", { class: "memory-conflict", attrs: { role: "alert" }, hidden: true });
        const form = h("form", { class: "form memory-form", on: { submit: async (event) => {
          event.preventDefault();
          const sections = Object.fromEntries([...inputs].map(([key, input]) => [key, input.value]));
          try {
            await this.saving(put(`/api/projects/${room.id}/memory/summary`, { rev, sections }));
            close(true);
            toast(t("memory.saved"));
            this.load({ background: true });
          } catch (err) {
            if (err.code !== "stale_revision") return showProblem(problem, err);
            // Someone saved first: keep what this person wrote, show the newest version.
            const latest = await get(`/api/projects/${room.id}/memory`).catch(() => null);
            const now = latest?.summary;
            rev = now?.rev ?? rev;
            conflict(problem, room, now, now ? SUMMARY_SECTIONS.map((key) => [t(`memory.section.${key}`), sectionsOf(now.body)[key] || t("memory.none")]) : []);
          }
        } } },
        [...inputs].map(([key, input]) => h("label", { class: "field" }, h("span", { class: "field-label", text: t(`memory.section.${key}`) }), input)),
        problem,
        formActions(close));
        return form;
      },
    });
  }

  // -- entries ------------------------------------------------------------------------------------

  kindSection(spec) {
    const entries = this.data[spec.key] || [];
    const archivedCount = this.data.archived?.[spec.kind] || 0;
    const shown = this.archived.get(spec.kind);
    // The overview carries the newest session-log entries; older ones page in on request.
    const older = spec.kind === "session" ? this.older : null;
    const mayHaveOlder = spec.kind === "session" && (older ? older.hasMore : entries.length >= OVERVIEW_SESSIONS);
    return h("section", { class: "memory-section", dataset: { kind: spec.kind } },
      sectionHead(`memory.kind.${spec.kind}`, entries.length, [
        h("button", { type: "button", class: "btn btn-small", dataset: { add: spec.kind }, on: { click: () => this.editEntry(spec, null) } }, icon("plus"), h("span", { text: t("memory.add") })),
      ]),
      entries.length || older?.entries.length
        ? h("ol", { class: "memory-list" }, [...entries, ...(older?.entries || [])].map((e) => this.entryItem(spec, e)))
        : h("p", { class: "muted memory-empty", text: t(`memory.empty.${spec.kind}`) }),
      mayHaveOlder ? moreButton(() => this.loadOlder()) : null,
      archivedCount
        ? h("button", {
          type: "button",
          class: "btn btn-small btn-ghost memory-archived-toggle",
          attrs: { "aria-expanded": String(Boolean(shown)) },
          text: shown ? t("memory.hideArchived", { n: archivedCount }) : t("memory.archivedCount", { n: archivedCount }),
          on: { click: () => this.toggleArchived(spec.kind) },
        })
        : null,
      shown ? h("ol", { class: "memory-list is-archived", attrs: { "aria-label": t("memory.archivedList") } }, shown.entries.map((e) => this.entryItem(spec, e, true))) : null,
      shown?.hasMore ? moreButton(() => this.loadArchived(spec.kind, true, true).then(() => this.render())) : null,
    );
  }

  entryItem(spec, entry, archived = false) {
    const body = entry.body || {};
    const actions = [
      h("button", { type: "button", class: "btn btn-small btn-ghost", text: t("memory.history"), on: { click: () => this.showHistory(entry, spec.kind) } }),
    ];
    if (!spec.appendOnly && !archived) {
      actions.push(h("button", { type: "button", class: "btn btn-small btn-ghost", text: t("memory.edit"), on: { click: () => this.editEntry(spec, entry) } }));
      actions.push(h("button", { type: "button", class: "btn btn-small btn-ghost", text: t("memory.archive"), on: { click: () => this.archive(entry) } }));
    }
    if (archived) {
      actions.push(h("button", { type: "button", class: "btn btn-small btn-ghost memory-restore", text: t("memory.restore"), on: { click: () => this.restore(entry) } }));
    }
    return h("li", { class: ["memory-entry", `memory-${spec.kind}`, archived && "archived"], dataset: { recordId: String(entry.id), rev: String(entry.rev) } },
      entryContent(spec, body),
      h("div", { class: "memory-meta" }, byline(this.room, entry, archived), h("span", { class: "memory-actions" }, actions)));
  }

  editEntry(spec, entry) {
    const room = this.room;
    let rev = entry?.rev ?? null;
    const body = entry?.body || {};
    return openDialog({
      title: t(entry ? "memory.editTitle" : "memory.addTitle", { kind: t(`memory.kind.${spec.kind}`) }),
      build: (close) => {
        const inputs = new Map(spec.fields.map((f) => [f.name, fieldInput(f, body[f.name])]));
        const problem = h("div", { class: "memory-conflict", attrs: { role: "alert" }, hidden: true });
        const form = h("form", { class: "form memory-form", on: { submit: async (event) => {
          event.preventDefault();
          const fields = Object.fromEntries(spec.fields.map((f) => [f.name, readField(f, inputs.get(f.name))]));
          try {
            if (entry) await this.saving(patch(`/api/memory/${entry.id}`, { rev, ...fields }));
            else await this.saving(post(`/api/projects/${room.id}/memory/${spec.kind}`, fields));
            close(true);
            toast(t("memory.saved"));
            this.load({ background: true });
          } catch (err) {
            if (err.code !== "stale_revision") return showProblem(problem, err, inputs);
            const latest = await latestRevision(entry.id);
            if (latest) rev = latest.rev;
            conflict(problem, room, latest, latest ? spec.fields.map((f) => [t(`memory.field.${f.name}`), show(latest.body?.[f.name])]) : []);
          }
        } } },
        spec.fields.map((f) => h("label", { class: "field" },
          h("span", { class: "field-label", text: t(`memory.field.${f.name}`) + (f.required ? " *" : "") }),
          inputs.get(f.name),
          f.list ? h("span", { class: "field-hint", text: t("memory.tagsHint") }) : null)),
        problem,
        formActions(close));
        return form;
      },
    });
  }

  async archive(entry) {
    const ok = await confirmDialog({ title: t("memory.archiveTitle"), text: t("memory.archiveText"), confirmLabel: t("memory.archive") });
    if (!ok) return;
    try {
      await this.saving(post(`/api/memory/${entry.id}/archive`, {}));
      this.load({ background: true });
    } catch (err) {
      toastError(err);
    }
  }

  /** Back to the live entries, as the newest of its kind (past the cap, the oldest other goes). */
  async restore(entry) {
    try {
      await this.saving(post(`/api/memory/${entry.id}/restore`, {}));
      this.load({ background: true });
    } catch (err) {
      toastError(err);
    }
  }

  async toggleArchived(kind) {
    if (this.archived.has(kind)) this.archived.delete(kind);
    else if (kind === "decision") this.archived.set(kind, { entries: [], hasMore: false }); // the decision log has them all
    else await this.loadArchived(kind);
    this.render();
  }

  /** A page of `kind`'s archive (the next page with `more`). */
  async loadArchived(kind, report = true, more = false) {
    const shown = this.archived.get(kind);
    const before = more && shown?.entries.length ? `&before=${shown.entries.at(-1).id}` : "";
    try {
      const data = await get(`/api/projects/${this.room.id}/memory/${kind}?archived=1&limit=${ARCHIVE_PAGE}${before}`);
      const entries = data.entries || [];
      this.archived.set(kind, { entries: more && shown ? [...shown.entries, ...entries] : entries, hasMore: Boolean(data.has_more) });
    } catch (err) {
      if (report) toastError(err);
    }
  }

  async loadOlder() {
    const seen = [...(this.data?.sessions || []), ...(this.older?.entries || [])];
    if (!seen.length) return;
    try {
      const data = await get(`/api/projects/${this.room.id}/memory/session?limit=${OVERVIEW_SESSIONS}&before=${seen.at(-1).id}`);
      this.older = { entries: [...(this.older?.entries || []), ...(data.entries || [])], hasMore: Boolean(data.has_more) };
      this.render();
    } catch (err) {
      toastError(err);
    }
  }

  async showHistory(entry, kind) {
    let revisions;
    try {
      revisions = (await get(`/api/memory/${entry.id}/history`)).revisions || [];
    } catch (err) {
      toastError(err);
      return;
    }
    const room = this.room;
    const spec = KIND_OF.get(kind);
    openDialog({
      title: t("memory.historyTitle", { kind: t(kind === "summary" ? "memory.summary" : `memory.kind.${kind}`) }),
      wide: true,
      build: () => h("ol", { class: "memory-history" }, [...revisions].sort((a, b) => b.rev - a.rev).map((r) => h("li", { dataset: { rev: String(r.rev) } },
        h("div", { class: "memory-meta" },
          h("span", { class: "badge", text: `r${r.rev}` }),
          h("span", { text: authorOf(room, r.author) }),
          h("time", { text: formatDateTime(r.at) })),
        kind === "summary"
          ? h("dl", { class: "memory-summary" }, SUMMARY_SECTIONS.map((key) => [h("dt", { text: t(`memory.section.${key}`) }), h("dd", { class: "memory-text", text: sectionsOf(r.body)[key] || t("memory.none") })]))
          : entryContent(spec, r.body || {})))),
    });
  }

  // -- decisions ----------------------------------------------------------------------------------

  decisionSection() {
    const live = this.decisions.filter((d) => !d.archived);
    const archived = this.decisions.filter((d) => d.archived);
    const shown = this.archived.has("decision");
    const item = (d, archived = false) => decisionItem(this.room, d, archived, () => this.showDecisionHistory(d));
    return h("section", { class: "memory-section", dataset: { kind: "decision" } },
      sectionHead("memory.kind.decision", live.length, [
        h("button", { type: "button", class: "btn btn-small", dataset: { add: "decision" }, on: { click: () => this.addDecision() } }, icon("plus"), h("span", { text: t("memory.add") })),
      ]),
      live.length ? h("ol", { class: "memory-list" }, live.map((d) => item(d))) : h("p", { class: "muted memory-empty", text: t("decisions.empty") }),
      archived.length
        ? h("button", {
          type: "button",
          class: "btn btn-small btn-ghost memory-archived-toggle",
          attrs: { "aria-expanded": String(shown) },
          text: shown ? t("memory.hideArchived", { n: archived.length }) : t("memory.archivedCount", { n: archived.length }),
          on: { click: () => this.toggleArchived("decision") },
        })
        : null,
      shown ? h("ol", { class: "memory-list is-archived", attrs: { "aria-label": t("memory.archivedList") } }, archived.map((d) => item(d, true))) : null);
  }

  /** A person's decision (accepted at once), with the alternatives rejected and why. */
  addDecision() {
    const room = this.room;
    return openDialog({
      title: t("memory.addDecision"),
      wide: true,
      build: (close) => {
        const field = (name, input) => h("label", { class: "field" }, h("span", { class: "field-label", text: t(`memory.field.${name}`) + (["title", "context", "decision"].includes(name) ? " *" : "") }), input);
        const inputs = {
          title: h("input", { type: "text", name: "title" }),
          context: h("textarea", { name: "context", rows: 3 }),
          decision: h("textarea", { name: "decision", rows: 3 }),
          constraints: h("textarea", { name: "constraints", rows: 2 }),
        };
        const rows = h("div", { class: "memory-alt-rows" });
        const addRow = () => {
          const row = h("div", { class: "memory-alt-row" },
            h("input", { type: "text", name: "option", attrs: { "aria-label": t("memory.field.option") }, placeholder: t("memory.field.option") }),
            h("input", { type: "text", name: "why_rejected", attrs: { "aria-label": t("memory.field.why_rejected") }, placeholder: t("memory.field.why_rejected") }));
          rows.append(row);
          return row;
        };
        addRow();
        const problem = h("div", { class: "memory-conflict", attrs: { role: "alert" }, hidden: true });
        return h("form", { class: "form memory-form", on: { submit: async (event) => {
          event.preventDefault();
          const alternatives = [...rows.children]
            .map((row) => ({ option: row.querySelector("[name=option]").value.trim(), why_rejected: row.querySelector("[name=why_rejected]").value.trim() }))
            .filter((a) => a.option || a.why_rejected);
          const body = Object.fromEntries(Object.entries(inputs).map(([k, input]) => [k, input.value]));
          try {
            await this.saving(post(`/api/projects/${room.id}/decisions`, { ...body, alternatives }));
            close(true);
            toast(t("memory.saved"));
            this.load({ background: true });
          } catch (err) {
            showProblem(problem, err);
          }
        } } },
        field("title", inputs.title),
        field("context", inputs.context),
        field("decision", inputs.decision),
        h("fieldset", { class: "memory-alts" },
          h("legend", { text: t("memory.field.alternatives") + " *" }),
          rows,
          h("button", { type: "button", class: "btn btn-small btn-ghost", on: { click: () => addRow().querySelector("input").focus() } }, icon("plus"), h("span", { text: t("memory.addAlternative") }))),
        field("constraints", inputs.constraints),
        problem,
        formActions(close));
      },
    });
  }

  showDecisionHistory(d) {
    const room = this.room;
    openDialog({
      title: t("memory.historyTitle", { kind: d.label }),
      wide: true,
      build: () => h("ol", { class: "memory-history" }, [...(d.revisions || [])].sort((a, b) => b.revision - a.revision).map((r) => h("li", { dataset: { rev: String(r.revision) } },
        h("div", { class: "memory-meta" },
          h("span", { class: "badge", text: `r${r.revision}` }),
          h("span", { text: authorOf(room, r.author_id) }),
          h("time", { text: formatDateTime(r.created_at) })),
        decisionFields(r)))),
    });
  }

  // -- search results -----------------------------------------------------------------------------

  /** Scroll to a record (opening its kind's archive when it is archived) and mark `terms` in it. */
  async reveal(kind, id, terms = []) {
    if (this.loading) await this.loading;
    if (!this.data) return;
    const selector = kind === "decision" ? `[data-decision-id="${id}"]` : kind === "summary" ? '[data-kind="summary"]' : `[data-record-id="${id}"]`;
    let el = $(selector, this.root);
    if (!el) {
      await this.load({ background: true }); // written since the tab was read
      el = $(selector, this.root);
    }
    if (!el && (KIND_OF.has(kind) || kind === "decision") && !this.archived.has(kind)) {
      if (kind === "decision") this.archived.set(kind, { entries: [], hasMore: false });
      else await this.loadArchived(kind);
      this.render();
      el = $(selector, this.root);
    }
    if (!el && KIND_OF.has(kind)) {
      // An entry beyond the pages shown (an old session-log entry): its history shows it.
      this.showHistory({ id }, kind);
      return;
    }
    if (!el) {
      toast(t("memory.gone"));
      return;
    }
    clearHighlights(this.root);
    highlightIn(el, terms);
    el.scrollIntoView({ block: "center" });
    el.classList.add("flash");
    setTimeout(() => el.classList.remove("flash"), 1600);
  }
}

// -- pieces ---------------------------------------------------------------------------------------

function sectionHead(titleKey, count, actions) {
  return h("header", { class: "memory-head" },
    h("h3", {}, t(titleKey), count !== null && count !== undefined ? h("span", { class: "memory-count", text: ` ${count}` }) : null),
    h("span", { class: "memory-head-actions" }, actions));
}

function moreButton(run) {
  return h("button", { type: "button", class: "btn btn-small btn-ghost memory-more", text: t("memory.more"), on: { click: run } });
}

function staleNotice(stale) {
  return h("p", { class: "memory-stale", attrs: { role: "status" } }, icon("alert"),
    h("span", { text: t("memory.stale", { days: stale.days, n: stale.entries_since }) }));
}

function byline(room, record, archived = false) {
  return h("span", { class: "memory-byline muted" },
    h("span", { text: authorOf(room, record.author) }),
    record.updated_by ? h("span", { text: t("memory.editedBy", { name: authorOf(room, record.updated_by) }) }) : null,
    h("time", { dateTime: record.updated_at || record.created_at, text: formatDateTime(record.updated_at || record.created_at) }),
    record.rev > 1 ? h("span", { title: t("tasks.revision"), text: `r${record.rev}` }) : null,
    archived ? h("span", { class: "badge", text: t("memory.archivedBadge") }) : null);
}

function authorOf(room, author) {
  if (!author) return t("msg.system");
  if (typeof author === "number") return member(room, author)?.display_name || `#${author}`;
  return author.display_name || member(room, author.id)?.display_name || `#${author.id}`;
}

function show(value) {
  if (Array.isArray(value)) return value.join("、") || t("memory.none");
  return value === null || value === undefined || value === "" ? t("memory.none") : String(value);
}

/** How long ago an ISO time was: 刚刚 / N 秒前 / N 分钟前 / N 小时前 / N 天前. */
function ago(isoTime) {
  const secs = Math.max(0, Math.floor((Date.now() - Date.parse(isoTime)) / 1000));
  if (secs < 10) return t("memory.status.justNow");
  if (secs < 60) return t("memory.status.secs", { n: secs });
  if (secs < 3600) return t("memory.status.mins", { n: Math.floor(secs / 60) });
  if (secs < 86400) return t("memory.status.hours", { n: Math.floor(secs / 3600) });
  return t("memory.status.days", { n: Math.floor(secs / 86400) });
}

function sectionsOf(body) {
  return body?.sections || {};
}

/** The body of one entry of `spec`'s kind (also a revision's body in the history). */
function entryContent(spec, body) {
  switch (spec?.kind) {
    case "progress":
      return h("div", { class: "memory-body" },
        h("p", { class: "memory-text", text: body.text || "" }),
        h("p", { class: "memory-line" }, h("span", { class: "badge memory-stage", text: body.stage || "" }), h("span", { class: "muted", text: t("memory.nextLabel") }), h("span", { text: body.next || "" })),
        (body.tags || []).length ? h("p", { class: "memory-tags" }, body.tags.map((tag) => h("span", { class: "tool-chip", text: tag }))) : null,
        body.blocked ? h("p", { class: "memory-line" }, h("span", { class: "muted", text: t("memory.field.blocked") }), h("span", { class: "memory-text memory-blocked", text: body.blocked })) : null);
    case "session":
      return h("div", { class: "memory-body" },
        h("p", { class: "memory-text memory-strong", text: body.summary || "" }),
        h("dl", { class: "memory-fields" }, ["did", "verified", "next", "blocked"].filter((k) => body[k]).map((k) => [
          h("dt", { text: t(`memory.field.${k}`) }), h("dd", { class: ["memory-text", k === "blocked" && "memory-blocked"], text: body[k] })])));
    case "reference":
      return h("div", { class: "memory-body" },
        h("p", { class: "memory-line" }, h("span", { class: "badge", text: label("refKind", body.ref_kind) }), h("code", { class: "memory-target", text: body.target || "" })),
        body.note ? h("p", { class: "memory-text muted", text: body.note }) : null);
    default:
      return h("div", { class: "memory-body" }, h("p", { class: "memory-text", text: body.text || "" }));
  }
}

function decisionItem(room, d, archived, showHistory) {
  const latest = (d.revisions || []).reduce((a, b) => (!a || b.revision > a.revision ? b : a), null) || {};
  return h("li", { class: ["memory-entry", "memory-decision", archived && "archived"], dataset: { decisionId: String(d.id), number: d.label } },
    h("div", { class: "memory-line" },
      h("span", { class: "task-key", text: d.label }),
      h("span", { class: ["state-badge", `decision-${d.status}`], text: label("decisionStatus", d.status) }),
      archived ? h("span", { class: "badge", text: t("memory.archivedBadge") }) : null,
      h("strong", { class: "memory-title", text: d.title })),
    decisionFields({ ...latest, alternatives: d.alternatives ?? latest.alternatives, constraints: d.constraints ?? latest.constraints }),
    h("div", { class: "memory-meta" },
      h("span", { class: "memory-byline muted" },
        h("span", { text: authorOf(room, d.created_by) }),
        h("time", { text: formatDateTime(d.updated_at) }),
        d.revision > 1 ? h("span", { text: `r${d.revision}` }) : null),
      h("span", { class: "memory-actions" }, h("button", { type: "button", class: "btn btn-small btn-ghost", text: t("memory.history"), on: { click: showHistory } }))));
}

/** A decision revision's context, decision, the alternatives rejected (struck through, with
 * why) and constraints. */
function decisionFields(r) {
  const alternatives = r.alternatives || [];
  const constraints = Array.isArray(r.constraints) ? r.constraints.join("\n") : r.constraints;
  const row = (key, value) => (value ? [h("dt", { text: t(`memory.field.${key}`) }), h("dd", { class: "memory-text", text: value })] : null);
  return h("dl", { class: "memory-fields" },
    row("context", r.context),
    row("decision", r.decision),
    row("consequences", r.consequences),
    alternatives.length
      ? [h("dt", { text: t("memory.field.alternatives") }), h("dd", {}, h("ul", { class: "memory-alternatives" }, alternatives.map((a) => h("li", {},
        h("span", { class: "memory-rejected", text: a.option }), a.why_rejected ? h("span", { class: "muted", text: ` — ${a.why_rejected}` }) : null))))]
      : null,
    row("constraints", constraints));
}

function fieldInput(f, value) {
  if (f.choices) {
    return h("select", { name: f.name }, f.choices.map((c) => h("option", { value: c, text: label("refKind", c), selected: c === value })));
  }
  const text = f.list ? (value || []).join(", ") : value || "";
  if (f.lines) return h("textarea", { name: f.name, rows: f.lines, value: text });
  return h("input", { type: "text", name: f.name, value: text });
}

function readField(f, input) {
  if (f.list) return input.value.split(/[,，、\n]/).map((s) => s.trim()).filter(Boolean);
  return input.value;
}

function formActions(close) {
  return h("div", { class: "dialog-actions" },
    h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close(false) } }),
    h("button", { type: "submit", class: "btn btn-primary", text: t("common.save") }));
}

function showProblem(box, err, inputs = null) {
  box.hidden = false;
  const field = err.details?.field;
  box.replaceChildren(h("p", { class: "error-text", text: err.code === "empty_field" && field ? t("error.empty_field", { field: t(`memory.field.${field}`) }) : errorText(err) }));
  inputs?.get(field)?.focus();
}

/** The 409 answer: the person's text stays in the form; the newest version is shown under it. */
function conflict(box, room, latest, rows) {
  box.hidden = false;
  box.replaceChildren(
    h("p", { class: "memory-conflict-text" }, icon("alert"), h("span", { text: t("memory.conflict", { rev: latest?.rev ?? "?", name: authorOf(room, latest?.author) }) })),
    rows.length ? h("dl", { class: "memory-fields memory-latest" }, rows.map(([k, v]) => [h("dt", { text: k }), h("dd", { class: "memory-text", text: v })])) : null,
  );
}

async function latestRevision(entryId) {
  try {
    const revisions = (await get(`/api/memory/${entryId}/history`)).revisions || [];
    return revisions.reduce((a, b) => (!a || b.rev > a.rev ? b : a), null);
  } catch {
    return null;
  }
}
