// The research card in the timeline (docs/research.md): a system message whose `meta.research`
// the server rewrites on every change (state, revision, approval, spend, counts). Everyone sees
// the state; the buttons (approve, reject, adjust, cancel, 开始研究, pause, resume, stop) appear
// only for a person who owns the project, and only those the run's state allows (`events`).
// The server still decides: a refusal is shown, translated. "详情" opens the research view: the
// revisions, the hypotheses, experiments and findings with their sources, and the flowback a
// person accepts or rejects. The scope shows its workspace paths and its project references as
// they resolved when proposed (a folder or file outside the workspace by its real path; a link or
// tool only as metadata, never fetched). A person proposes from the project's ⋯ menu (发起研究…);
// the proposal dialog and the adjust dialog share one form (question, paths, references picked
// from project memory, participating agents, budget), which shows a refusal under its field.

import { get, post } from "./api.js";
import { h } from "./dom.js";
import { errorText, formatDateTime, formatNumber, t } from "./i18n.js";
import { activeAgents, isOwner, mayPost, me } from "./store.js";
import { openDialog, toast, toastError } from "./ui.js";

const BUTTONS = ["approve", "start", "resume", "pause", "adjust", "reject", "stop", "cancel"];
const PRIMARY = new Set(["approve", "start", "resume"]);
const BUDGET_KEYS = ["tokens", "requests", "seconds", "steps"];

/** The state a card shows: "expired" for an approved run past its approval's expiry. */
export function shownState(run, now = Date.now()) {
  if (run.state === "approved" && run.approval?.expires_at && Date.parse(run.approval.expires_at) <= now) return "expired";
  return run.state;
}

/** The buttons this viewer is offered on `run`, in order. */
export function offeredActions(room, run, now = Date.now()) {
  if (!room.you || !isOwner(room) || !mayPost(room.project)) return [];
  const events = new Set(run.events || []);
  return BUTTONS.filter((op) => events.has(op) && !(op === "start" && shownState(run, now) === "expired"));
}

function spendLine(run) {
  return BUDGET_KEYS.map((k) => h("span", { class: "research-spend", dataset: { key: k } },
    h("span", { class: "muted", text: `${t(`research.budget.${k}`)} ` }),
    h("strong", { text: `${run.spend?.[k] ?? 0}` }),
    h("span", { class: "muted", text: ` / ${run.budget?.[k] ?? "?"}` })));
}

/** The scope as the card shows it: workspace paths, then each reference. */
export function scopeView(scope) {
  const paths = scope?.paths || [];
  const refs = scope?.references || [];
  return [
    paths.length ? h("span", { class: "research-paths", text: paths.join("、") }) : null,
    refs.length ? h("ul", { class: "research-refs", attrs: { "aria-label": t("research.references") } }, refs.map((r) => {
      const readable = r.kind === "dir" || r.kind === "file";
      return h("li", { class: "research-ref", dataset: { ref: String(r.id), kind: r.kind } },
        h("span", { class: "badge", text: t(`refKind.${r.kind}`) }), " ",
        h("code", { class: "research-ref-target", text: r.target }),
        r.real && r.real !== r.target ? h("span", { class: "muted", text: ` → ${r.real}` }) : null,
        r.note ? h("span", { class: "research-ref-note", text: ` — ${r.note}` }) : null,
        readable ? null : h("span", { class: "muted research-ref-meta", text: ` (${t("research.refNotFetched")})` }));
    })) : null,
    !paths.length && !refs.length ? h("span", { class: "muted", text: t("research.refsNone") }) : null,
  ];
}

export function researchCard(room, message) {
  const run = message.meta.research;
  const state = shownState(run);
  const waits = run.state === "running" && Boolean(run.waiting);
  const error = h("p", { class: "error-text", attrs: { role: "alert" }, hidden: true });
  const act = async (op) => {
    error.hidden = true;
    try {
      if (op === "adjust") return adjustDialog(room, run, error);
      const body = op === "approve" ? { rev: run.rev, scope_digest: run.scope_digest } : {};
      await post(`/api/research/${run.id}/${op}`, body);
    } catch (err) {
      error.textContent = errorText(err);
      error.hidden = false;
    }
    return null;
  };
  const buttons = offeredActions(room, run).map((op) => h("button", {
    type: "button",
    class: ["btn", "btn-small", PRIMARY.has(op) && "btn-primary", op === "stop" && "btn-danger"],
    dataset: { action: `research-${op}` },
    text: t(`research.op.${op}`),
    on: { click: () => act(op) },
  }));
  const members = (run.members || []).map((m) => `@${m?.handle ?? "?"}`).join(" ");
  const approval = run.approval
    ? t("research.approvedBy", { name: run.approval.by?.display_name ?? "?", rev: run.approval.rev, at: formatDateTime(run.approval.at), until: formatDateTime(run.approval.expires_at) })
    : null;
  const counts = run.counts || {};
  return h("section", {
    class: ["research-card", `research-${state}`],
    dataset: { id: String(message.id), seq: String(message.seq), research: String(run.id), state },
    attrs: { "aria-label": t("research.title", { id: run.id }) },
    tabIndex: -1,
  },
  h("header", { class: "research-head" },
    h("strong", { text: t("research.title", { id: run.id }) }),
    // A running run waiting for its home node says so on its badge too (its state stays running).
    h("span", { class: ["badge", "research-state"], dataset: waits ? { state, waiting: run.waiting } : { state }, text: waits ? t("research.waiting") : t(`research.state.${state}`) }),
    h("span", { class: "muted", text: t("research.rev", { rev: run.rev }) }),
    h("code", { class: "research-digest", title: run.scope_digest, text: run.scope_digest.slice(0, 12) })),
  h("p", { class: "research-question", text: run.question }),
  h("dl", { class: "research-facts" },
    h("dt", { text: t("research.scope") }), h("dd", { class: "research-scope" }, scopeView(run.scope)),
    h("dt", { text: t("research.members") }), h("dd", { text: members }),
    h("dt", { text: t("research.spend") }), h("dd", { class: "research-spends" }, spendLine(run)),
    h("dt", { text: t("research.progress") }), h("dd", { text: t("research.counts", { h: counts.hypothesis || 0, e: counts.experiment || 0, f: counts.finding || 0 }) }),
    approval ? [h("dt", { text: t("research.approval") }), h("dd", { class: "research-approval", text: approval })] : null,
    run.stop_reason ? [h("dt", { text: t("research.stopReason") }), h("dd", { class: "research-stop", text: t(`research.stop.${run.stop_reason}`) })] : null,
    // A running run that cannot step for now (docs/cluster.md: its home node offline); its time is not counted meanwhile.
    waits ? [h("dt", { text: t("research.waiting") }), h("dd", { class: "research-wait", dataset: { reason: run.waiting }, text: t(`research.wait.${run.waiting}`) })] : null),
  h("div", { class: "research-actions" }, buttons,
    h("button", { type: "button", class: "btn btn-small", dataset: { action: "research-view" }, text: t("research.view"), on: { click: () => researchView(room, run.id) } })),
  error);
}

// -- the proposal form (propose and adjust share it) ---------------------------------------------

/** Whether this viewer may propose research here: what the server enforces (docs/research.md,
 * "Proposal") — a person who is a member of an active project. Agents propose with their tool. */
export function mayPropose(room) {
  const you = me(room);
  return Boolean(you && you.kind === "human" && you.status !== "left" && room.project?.state === "active" && mayPost(room.project));
}

// Which field a server error's `details.field` concerns ("budget.tokens" is its own).
const FIELD_OF = { question: "question", scope: "paths", "scope.paths": "paths", "scope.web": "paths", "scope.references": "references", members: "members", budget: "budget.tokens" };

function fieldOf(err) {
  const field = err?.details?.field;
  if (typeof field !== "string") return null;
  if (field.startsWith("budget.") && BUDGET_KEYS.includes(field.slice(7))) return field;
  return FIELD_OF[field] || null;
}

function splitPaths(text) {
  return text.split(/[,，、\n]/).map((p) => p.trim()).filter(Boolean);
}

/** The server's check_path (room/rules/research.py), asked before sending: a scope path that is
 * absolute, a drive path, or climbs out with `..` is outside the workspace. */
export function outsideWorkspace(path) {
  const raw = path.trim().replaceAll("\\", "/");
  if (raw.startsWith("/") || (raw.length > 1 && raw[1] === ":")) return true;
  const parts = [];
  for (const part of raw.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === ".." && parts.length && parts.at(-1) !== "..") parts.pop();
    else parts.push(part);
  }
  return parts[0] === "..";
}

let formSeq = 0;

/**
 * The research form: question, workspace paths, references picked from project memory, the
 * participating agents and the budget. `values` fills it ({question, paths, references (ids),
 * members (ids), budget}); `scopeRefs` are the references already in scope (kept listed when
 * archived since, so they can be taken out); `caps` the budget's caps. Returns the nodes, `body()`
 * (what to send) and `showError(err)`, which puts a refusal under the field it concerns
 * (anything else in the form's own line); what was typed stays.
 */
export function researchForm(room, /** @type {{ projectId: number, values?: Record<string, any>, scopeRefs?: any[], caps?: Record<string, any> }} */ { projectId, values = {}, scopeRefs = [], caps = {} }) {
  const id = `research-form-${++formSeq}`;
  const errors = new Map();
  const controls = new Map();
  const field = (name, control, labelText, hint = null) => {
    const errorEl = h("p", { class: "error-text field-error", id: `${id}-${name.replace(".", "-")}-error`, dataset: { errorFor: name }, attrs: { role: "alert" }, hidden: true });
    errors.set(name, errorEl);
    controls.set(name, control);
    const hintEl = hint ? h("span", { class: "field-hint", text: hint }) : null;
    return h("div", { class: "field", dataset: { field: name } }, h("label", { class: "field-label", attrs: { for: control.id }, text: labelText }), control, hintEl, errorEl);
  };
  const question = h("textarea", { id: `${id}-question`, class: "input", rows: 3, attrs: { maxlength: "4000", required: "" } });
  question.value = values.question || "";
  const paths = h("input", { id: `${id}-paths`, class: "input", value: (values.paths || []).join(", "), attrs: { placeholder: t("research.pathsPlaceholder") } });
  paths.value = (values.paths || []).join(", ");

  const picked = new Set(values.references || []);
  const refs = h("fieldset", { id: `${id}-references`, class: "research-ref-pick", tabIndex: -1 }, h("legend", { text: t("research.refsPick") }));
  const refOption = (refId, kind, target, note, checked) => {
    const box = h("input", { type: "checkbox", value: String(refId), checked, dataset: { ref: String(refId) } });
    box.addEventListener("change", () => (box.checked ? picked.add(refId) : picked.delete(refId)));
    return h("label", { class: "research-ref-option" }, box, " ",
      h("span", { class: "badge", text: t(`refKind.${kind}`) }), " ", h("code", { text: target }),
      note ? h("span", { class: "muted", text: ` — ${note}` }) : null);
  };
  get(`/api/projects/${projectId}/memory/reference?limit=200`).then((page) => {
    const entries = page.entries || [];
    const live = new Set(entries.map((e) => e.id));
    const kept = scopeRefs.filter((r) => !live.has(r.id));
    if (!entries.length && !kept.length) refs.append(h("p", { class: "muted", text: t("research.refsEmpty") }));
    for (const entry of entries) refs.append(refOption(entry.id, entry.body.ref_kind, entry.body.target, entry.body.note, picked.has(entry.id)));
    // A reference in scope that is no longer live (archived since) stays listed, so it can be
    // taken out; kept in, the server refuses it with its reason.
    for (const ref of kept) refs.append(refOption(ref.id, ref.kind, ref.target, ref.note, picked.has(ref.id)));
  }).catch((err) => refs.append(h("p", { class: "error-text", text: errorText(err) })));
  const refsError = h("p", { class: "error-text field-error", id: `${id}-references-error`, dataset: { errorFor: "references" }, attrs: { role: "alert" }, hidden: true });
  errors.set("references", refsError);
  controls.set("references", refs);

  // The participating agents: the project's current ones, and any in `values` who left since.
  const chosen = new Set(values.members || []);
  const agents = activeAgents(room);
  const shown = new Set(agents.map((m) => m.id));
  const others = [...chosen].filter((m) => !shown.has(m)).map((m) => room.members.get(m) || { id: m, handle: "?", display_name: `#${m}` });
  const members = h("fieldset", { id: `${id}-members`, class: "research-member-pick", tabIndex: -1 }, h("legend", { text: t("research.membersPick") }),
    [...agents, ...others].map((m) => {
      const box = h("input", { type: "checkbox", value: String(m.id), checked: chosen.has(m.id), dataset: { member: String(m.id) } });
      box.addEventListener("change", () => (box.checked ? chosen.add(m.id) : chosen.delete(m.id)));
      return h("label", { class: "research-member-option" }, box, " ", h("span", { text: m.display_name }), " ",
        h("span", { class: "muted", text: `@${m.handle}` }),
        m.id === room.project?.lead_member_id ? h("span", { class: "badge", text: t("research.leadBadge") }) : null);
    }),
    agents.length || others.length ? null : h("p", { class: "muted", text: t("research.noAgents") }));
  const membersError = h("p", { class: "error-text field-error", id: `${id}-members-error`, dataset: { errorFor: "members" }, attrs: { role: "alert" }, hidden: true });
  errors.set("members", membersError);
  controls.set("members", members);

  const budgetInputs = Object.fromEntries(BUDGET_KEYS.map((k) => {
    const input = h("input", { id: `${id}-budget-${k}`, class: "input", type: "number", value: String(values.budget?.[k] ?? ""), attrs: { min: "1", max: caps[k] ? String(caps[k]) : null, step: "1", inputmode: "numeric" } });
    input.value = String(values.budget?.[k] ?? "");
    return [k, input];
  }));
  const problem = h("p", { class: "error-text research-form-error", attrs: { role: "alert" }, hidden: true });

  const clearErrors = () => {
    problem.hidden = true;
    for (const [name, el] of errors) {
      el.hidden = true;
      el.textContent = "";
      controls.get(name)?.removeAttribute("aria-invalid");
    }
  };
  const showAt = (name, text) => {
    const el = errors.get(name);
    const control = controls.get(name);
    if (!el) {
      problem.textContent = text;
      problem.hidden = false;
      return;
    }
    el.textContent = text;
    el.hidden = false;
    if (control) {
      control.setAttribute("aria-invalid", "true");
      control.setAttribute("aria-describedby", el.id || "");
      control.focus();
    }
  };
  const body = () => ({
    question: question.value,
    scope: { paths: splitPaths(paths.value), references: [...picked] },
    members: [...chosen],
    budget: Object.fromEntries(BUDGET_KEYS.map((k) => [k, budgetInputs[k].value.trim() === "" ? null : Number(budgetInputs[k].value)])),
  });
  /** What the page can tell before asking the server; true when there is nothing to say. */
  const check = () => {
    clearErrors();
    const sent = body();
    if (!sent.question.trim()) return showAt("question", t("research.questionRequired")), false;
    if (!sent.scope.paths.length && !sent.scope.references.length) return showAt("paths", t("research.scopeRequired")), false;
    const outside = sent.scope.paths.find(outsideWorkspace);
    if (outside !== undefined) return showAt("paths", errorText({ code: "research_scope_outside", details: { path: outside } })), false;
    if (!sent.members.length) return showAt("members", t("research.membersRequired")), false;
    for (const k of BUDGET_KEYS) {
      const value = sent.budget[k];
      if (value !== null && (!Number.isInteger(value) || value < 1 || (caps[k] && value > caps[k]))) {
        return showAt(`budget.${k}`, errorText({ code: "research_bad_budget", details: {} })), false;
      }
    }
    return true;
  };
  // The scope is checked as it is typed (when the field is left), not only on submit.
  paths.addEventListener("change", () => {
    const outside = splitPaths(paths.value).find(outsideWorkspace);
    const el = errors.get("paths");
    if (outside !== undefined) {
      el.textContent = errorText({ code: "research_scope_outside", details: { path: outside } });
      el.hidden = false;
      paths.setAttribute("aria-invalid", "true");
      paths.setAttribute("aria-describedby", el.id);
    } else if (paths.getAttribute("aria-invalid")) {
      el.hidden = true;
      el.textContent = "";
      paths.removeAttribute("aria-invalid");
    }
  });
  const showError = (err) => {
    clearErrors();
    // The form sends members by id: name the one refused by its handle.
    const refused = room.members.get(Number(err?.details?.member));
    const shownErr = refused ? { code: err.code, message: err.message, details: { ...err.details, member: `@${refused.handle}` } } : err;
    showAt(fieldOf(err), errorText(shownErr));
  };
  const nodes = [
    field("question", question, t("research.question")),
    field("paths", paths, t("research.paths"), t("research.pathsHint")),
    h("div", { class: "field", dataset: { field: "references" } }, refs, refsError),
    h("div", { class: "field", dataset: { field: "members" } }, members, membersError),
    h("fieldset", { class: "research-budget" }, h("legend", { text: t("research.budgetTitle") }),
      BUDGET_KEYS.map((k) => field(`budget.${k}`, budgetInputs[k], t(`research.budgetField.${k}`), caps[k] ? t("research.budgetCap", { max: formatNumber(caps[k]) }) : null))),
    problem,
  ];
  return { nodes, body, check, showError, question, paths };
}

/** The dialog around the form: `send(body)` posts it; a refusal stays in the dialog, by its
 * field, with everything typed kept. Ctrl/⌘+Enter submits. Resolves what `send` answered. */
function formDialog({ title, form, submitLabel, send }) {
  return openDialog({
    title,
    className: "research-form-dialog",
    build: (close, dialog) => {
      let sending = false;
      const submitButton = h("button", { type: "submit", class: "btn btn-primary", dataset: { action: "research-submit" }, text: submitLabel });
      const submit = async (event) => {
        event?.preventDefault();
        if (sending || !form.check()) return;
        sending = true;
        submitButton.disabled = true;
        try {
          close({ sent: await send(form.body()) });
        } catch (err) {
          form.showError(err);
        } finally {
          sending = false;
          submitButton.disabled = false;
        }
      };
      dialog.addEventListener("keydown", (event) => {
        if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) submit(event);
      });
      return h("form", { class: "research-form", attrs: { novalidate: "" }, on: { submit } },
        form.nodes,
        h("div", { class: "dialog-actions" },
          h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close(undefined) } }),
          submitButton));
    },
  });
}

// An unsent proposal, per project: dismissing the dialog keeps what was typed for next time.
const drafts = new Map();

/** "发起研究": a person proposes a run (POST /api/projects/{id}/research). The suggested budget
 * and the caps come from the server (the list's `budget`); the lead is preselected. */
export async function proposeDialog(room) {
  const projectId = room.id;
  let limits;
  try {
    limits = (await get(`/api/projects/${projectId}/research`)).budget || {};
  } catch (err) {
    toastError(err);
    return null;
  }
  const lead = room.project?.lead_member_id;
  const agents = activeAgents(room);
  const start = drafts.get(projectId) || {
    question: "",
    paths: [],
    references: [],
    members: agents.some((m) => m.id === lead) ? [lead] : agents.slice(0, 1).map((m) => m.id),
    budget: limits.default || {},
  };
  const form = researchForm(room, { projectId, values: start, caps: limits.max || {} });
  const answer = await formDialog({
    title: t("research.proposeTitle"),
    form,
    submitLabel: t("research.proposeSubmit"),
    send: (body) => post(`/api/projects/${projectId}/research`, body),
  });
  if (!answer?.sent) {
    const body = form.body();
    drafts.set(projectId, { ...body, paths: body.scope.paths, references: body.scope.references });
    return null;
  }
  drafts.delete(projectId);
  const { research: run } = answer.sent;
  toast(t("research.proposed", { id: run.id }));
  return run;
}

function adjustDialog(room, run, error) {
  const form = researchForm(room, {
    projectId: run.project_id,
    values: {
      question: run.question,
      paths: run.scope?.paths || [],
      references: (run.scope?.references || []).map((r) => r.id),
      members: (run.members || []).map((m) => m.id),
      budget: run.budget,
    },
    scopeRefs: run.scope?.references || [],
  });
  return formDialog({
    title: t("research.adjustTitle", { id: run.id }),
    form,
    submitLabel: t("research.adjustSave"),
    send: (body) => post(`/api/research/${run.id}/adjust`, { rev: run.rev, ...body }),
  }).catch((err) => {
    error.textContent = errorText(err);
    error.hidden = false;
  });
}

/** The research view: revisions and everything the sessions recorded, with flowback buttons for
 * an owner (accepting a finding writes project memory: the same rule as approval). */
export async function researchView(room, researchId) {
  const { research: detail } = await get(`/api/research/${researchId}`);
  return openDialog({
    title: t("research.title", { id: researchId }),
    wide: true,
    className: "research-view",
    build: () => {
      const items = (detail.items || []).map((item) => {
        const flow = item.flow ? h("span", { class: "badge", dataset: { flow: item.flow }, text: t(`research.flow.${item.flow}`) }) : null;
        const buttons = item.flow === "proposed" && room.you && isOwner(room) && mayPost(room.project)
          ? ["accept", "reject"].map((decision) => h("button", {
            type: "button", class: ["btn", "btn-small", decision === "accept" && "btn-primary"],
            dataset: { action: `flowback-${decision}` }, text: t(`research.flowback.${decision}`),
            on: { click: async (event) => { event.target.disabled = true; await post(`/api/research/items/${item.id}/flowback`, { decision }); } },
          }))
          : [];
        return h("li", { class: "research-item", dataset: { kind: item.kind } },
          h("span", { class: "badge", text: t(`research.kind.${item.kind}`) }), " ",
          h("span", { text: item.body }), flow,
          (item.sources || []).length ? h("ul", { class: "research-sources" }, item.sources.map((s) => h("li", {}, h("code", { text: s })))) : null,
          buttons);
      });
      const revisions = (detail.revisions || []).map((r) => h("li", {}, t("research.revLine", { rev: r.rev, digest: r.digest.slice(0, 12), at: formatDateTime(new Date(r.at * 1000).toISOString()) })));
      return [
        h("p", { class: "research-question", text: detail.question }),
        h("h3", { text: t("research.items") }),
        items.length ? h("ul", { class: "research-items" }, items) : h("p", { class: "muted", text: t("research.noItems") }),
        h("h3", { text: t("research.revisions") }),
        h("ul", {}, revisions),
      ];
    },
  });
}
