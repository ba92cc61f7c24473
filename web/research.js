// The research card in the timeline (docs/research.md): a system message whose `meta.research`
// the server rewrites on every change (state, revision, approval, spend, counts). Everyone sees
// the state; the buttons (approve, reject, adjust, cancel, 开始研究, pause, resume, stop) appear
// only for a person who owns the project, and only those the run's state allows (`events`).
// The server still decides: a refusal is shown, translated. "详情" opens the research view: the
// revisions, the hypotheses, experiments and findings with their sources, and the flowback a
// person accepts or rejects. The scope shows its workspace paths and its project references as
// they resolved when proposed (a folder or file outside the workspace by its real path; a link or
// tool only as metadata, never fetched); the adjust dialog picks references from project memory.

import { get, post } from "./api.js";
import { h } from "./dom.js";
import { errorText, formatDateTime, t } from "./i18n.js";
import { isOwner, mayPost } from "./store.js";
import { openDialog } from "./ui.js";

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
  const error = h("p", { class: "error-text", attrs: { role: "alert" }, hidden: true });
  const act = async (op) => {
    error.hidden = true;
    try {
      if (op === "adjust") return adjustDialog(run, error);
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
    h("span", { class: ["badge", "research-state"], dataset: { state }, text: t(`research.state.${state}`) }),
    h("span", { class: "muted", text: t("research.rev", { rev: run.rev }) }),
    h("code", { class: "research-digest", title: run.scope_digest, text: run.scope_digest.slice(0, 12) })),
  h("p", { class: "research-question", text: run.question }),
  h("dl", { class: "research-facts" },
    h("dt", { text: t("research.scope") }), h("dd", { class: "research-scope" }, scopeView(run.scope)),
    h("dt", { text: t("research.members") }), h("dd", { text: members }),
    h("dt", { text: t("research.spend") }), h("dd", { class: "research-spends" }, spendLine(run)),
    h("dt", { text: t("research.progress") }), h("dd", { text: t("research.counts", { h: counts.hypothesis || 0, e: counts.experiment || 0, f: counts.finding || 0 }) }),
    approval ? [h("dt", { text: t("research.approval") }), h("dd", { class: "research-approval", text: approval })] : null,
    run.stop_reason ? [h("dt", { text: t("research.stopReason") }), h("dd", { class: "research-stop", text: t(`research.stop.${run.stop_reason}`) })] : null),
  h("div", { class: "research-actions" }, buttons,
    h("button", { type: "button", class: "btn btn-small", dataset: { action: "research-view" }, text: t("research.view"), on: { click: () => researchView(room, run.id) } })),
  error);
}

function adjustDialog(run, error) {
  return openDialog({
    title: t("research.adjustTitle", { id: run.id }),
    build: (close) => {
      const question = h("textarea", { class: "input", rows: 3, value: run.question });
      question.value = run.question;
      const paths = h("input", { class: "input", value: (run.scope?.paths || []).join(", "), attrs: { placeholder: t("research.pathsHint") } });
      const picked = new Set((run.scope?.references || []).map((r) => r.id));
      const refs = h("fieldset", { class: "research-ref-pick" }, h("legend", { text: t("research.refsPick") }));
      get(`/api/projects/${run.project_id}/memory/reference?limit=200`).then((page) => {
        const entries = page.entries || [];
        if (!entries.length) refs.append(h("p", { class: "muted", text: t("research.refsEmpty") }));
        for (const entry of entries) {
          const box = h("input", { type: "checkbox", value: String(entry.id), checked: picked.has(entry.id), dataset: { ref: String(entry.id) } });
          box.addEventListener("change", () => (box.checked ? picked.add(entry.id) : picked.delete(entry.id)));
          refs.append(h("label", { class: "research-ref-option" }, box, " ",
            h("span", { class: "badge", text: t(`refKind.${entry.body.ref_kind}`) }), " ",
            h("code", { text: entry.body.target }),
            entry.body.note ? h("span", { class: "muted", text: ` — ${entry.body.note}` }) : null));
        }
        // A reference in scope that is no longer live (archived since) stays listed, so it can be
        // taken out; kept in, the server refuses it with its reason.
        const live = new Set(entries.map((e) => e.id));
        for (const ref of run.scope?.references || []) {
          if (live.has(ref.id)) continue;
          const box = h("input", { type: "checkbox", value: String(ref.id), checked: true, dataset: { ref: String(ref.id) } });
          box.addEventListener("change", () => (box.checked ? picked.add(ref.id) : picked.delete(ref.id)));
          refs.append(h("label", { class: "research-ref-option" }, box, " ",
            h("span", { class: "badge", text: t(`refKind.${ref.kind}`) }), " ", h("code", { text: ref.target })));
        }
      }).catch((err) => refs.append(h("p", { class: "error-text", text: errorText(err) })));
      const budget = Object.fromEntries(BUDGET_KEYS.map((k) => [k, h("input", { class: "input", type: "number", value: String(run.budget?.[k] ?? "") })]));
      const problem = h("p", { class: "error-text", attrs: { role: "alert" }, hidden: true });
      const save = async () => {
        const body = {
          rev: run.rev,
          question: question.value,
          scope: { paths: paths.value.split(/[,，、]/).map((p) => p.trim()).filter(Boolean), references: [...picked] },
          members: (run.members || []).map((m) => m.id),
          budget: Object.fromEntries(BUDGET_KEYS.map((k) => [k, Number(budget[k].value)])),
        };
        try {
          await post(`/api/research/${run.id}/adjust`, body);
          close(true);
        } catch (err) {
          problem.textContent = errorText(err);
          problem.hidden = false;
        }
      };
      return [
        h("label", { class: "field" }, h("span", { text: t("research.question") }), question),
        h("label", { class: "field" }, h("span", { text: t("research.paths") }), paths),
        refs,
        ...BUDGET_KEYS.map((k) => h("label", { class: "field" }, h("span", { text: t(`research.budget.${k}`) }), budget[k])),
        problem,
        h("div", { class: "dialog-actions" },
          h("button", { type: "button", class: "btn", text: t("common.cancel"), on: { click: () => close(false) } }),
          h("button", { type: "button", class: "btn btn-primary", dataset: { action: "research-adjust-save" }, text: t("research.adjustSave"), on: { click: save } })),
      ];
    },
  }).catch((err) => {
    error.textContent = errorText(err);
    error.hidden = false;
  });
}

/** The research view: revisions and everything the sessions recorded, with flowback buttons. */
export async function researchView(room, researchId) {
  const detail = await get(`/api/research/${researchId}`);
  return openDialog({
    title: t("research.title", { id: researchId }),
    wide: true,
    className: "research-view",
    build: () => {
      const items = (detail.items || []).map((item) => {
        const flow = item.flow ? h("span", { class: "badge", dataset: { flow: item.flow }, text: t(`research.flow.${item.flow}`) }) : null;
        const buttons = item.flow === "proposed" && room.you && mayPost(room.project)
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
