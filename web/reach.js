// Before sending: who the draft reaches (recipient chips, "将触达 N 位 AI 成员") and the
// diagnostics with one-click fixes, both from the server's `preview` answer (docs/protocol.md):
// the server's resolver and default routing decide, the page copies neither.

import { h } from "./dom.js";
import { getLang, t } from "./i18n.js";
import { colourClass, initials } from "./message.js";
import { member } from "./store.js";

// Whitespace as shared/mentions/SPEC.md §1 spells it (not JS `\s`): a space added by the
// needs_boundary fix is left out only next to one of these (tests/test_web_facts.py).
const WHITESPACE = /[\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/;

/** True if the server's preview answer blocks sending (an unresolved mention). */
export function isBlocked(preview) {
  return Boolean(preview?.diagnostics?.some((d) => d.blocking));
}

/** The answer with its diagnostics' spans turned from the server's code-point indices into this
 * page's UTF-16 ones (shared/mentions/SPEC.md §1), for the fixes that edit `text`. */
export function withLocalSpans(preview, text) {
  const units = (cp) => {
    if (cp < 0) return cp;
    let i = 0;
    for (let n = 0; n < cp && i < text.length; n += 1) i += text.codePointAt(i) > 0xffff ? 2 : 1;
    return i;
  };
  const diagnostics = (preview.diagnostics || []).map((d) => ({ ...d, start: units(d.start), end: units(d.end) }));
  return { ...preview, diagnostics };
}

/** {recipients: [member], agents: n, defaultRouted, everyone, humansOnly} from a preview answer. */
function reachOf(room, preview) {
  const ids = preview.default_routed ? preview.recipients : preview.mentioned;
  return {
    recipients: ids.map((id) => member(room, id)).filter(Boolean),
    agents: preview.agents_reached,
    defaultRouted: preview.default_routed,
    everyone: Boolean(preview.everyone),
    humansOnly: Boolean(preview.humans_only),
  };
}

export function renderRecipients(box, room, preview) {
  box.replaceChildren();
  box.hidden = !preview;
  if (!preview) return;
  const reach = reachOf(room, preview);
  box.append(h("span", { class: "recipients-label", text: t("reach.to") }));
  if (reach.everyone) {
    box.append(chip(null, t("reach.everyone", { n: reach.recipients.length }), "chip-all"));
  } else {
    for (const m of reach.recipients) {
      box.append(chip(m, reach.defaultRouted ? t("reach.defaultLead", { name: m.display_name }) : m.display_name, m.status === "paused" ? "chip-paused" : ""));
    }
  }
  if (!reach.recipients.length) box.append(h("span", { class: "recipients-none", text: reach.humansOnly ? t("reach.humansOnly") : t("reach.nobody") }));
  box.append(
    h("span", { class: ["reach-count", reach.agents === 0 && "is-zero"], dataset: { agents: String(reach.agents) }, text: reach.agents ? t("reach.agents", { n: reach.agents }) : t("reach.noAgents") }),
  );
}

function chip(m, text, extra) {
  return h(
    "span",
    { class: ["chip", extra], dataset: m ? { memberId: String(m.id) } : {} },
    m ? h("span", { class: ["avatar", "avatar-xs", colourClass(m.id)], attrs: { "aria-hidden": "true" } }, h("span", { class: "avatar-initial", text: initials(m.display_name) })) : null,
    h("span", { class: "chip-text", text }),
  );
}

function refOf(m) {
  return m.handle ? `@${m.handle}` : `@「${m.display_name}」`;
}

function hintFor(d, room) {
  if (getLang() === "zh-CN" && d.hint) return d.hint; // the resolver's words, same as the server's
  const refs = d.candidates.map((id) => member(room, Number(id))).filter(Boolean).map(refOf).join(", ");
  return t(`diag.${d.code}`, { name: d.name, refs, n: d.candidates.length });
}

/** Who a message that names nobody goes to (the lead, by default), or null. */
function defaultLead(room, preview) {
  if (!preview?.default_routed) return null;
  return member(room, preview.recipients[0]) || null;
}

/** Diagnostics with fixes: add the missing space, pick one of the candidates, or send as plain
 * text (saying where it then goes). `unmatched`: the word after an at-sign for which the picker
 * found nobody and Enter was pressed (that Enter did not send). */
export function renderDiagnostics(list, preview, { text, room, fix, sendPlain, unmatched = null }) {
  list.replaceChildren();
  const diagnostics = preview?.diagnostics || [];
  const lead = defaultLead(room, preview);
  const note = unmatched !== null && !diagnostics.some((d) => d.blocking);
  list.hidden = !diagnostics.length && !note;
  if (note) {
    const where = lead ? t("diag.unmatchedLead", { name: lead.display_name }) : t("diag.unmatchedNobody");
    list.append(h("li", { class: "diag diag-unmatched", dataset: { code: "unmatched" } }, h("span", { class: "diag-hint", text: t("diag.unmatched", { name: unmatched, where }) })));
  }
  if (!diagnostics.length) return;
  let blocking = false;
  for (const d of diagnostics) {
    const isBlocking = Boolean(d.blocking);
    blocking ||= isBlocking;
    const item = h("li", { class: ["diag", `diag-${d.code}`, isBlocking && "blocking"], dataset: { code: d.code } }, h("span", { class: "diag-hint", text: hintFor(d, room) }));
    const fixes = h("span", { class: "diag-fixes" });
    if (d.code === "needs_boundary" && d.start >= 0) {
      fixes.append(button(t("diag.addSpace"), () => {
        const after = d.end < text.length && !WHITESPACE.test(text[d.end]);
        const before = d.start > 0 && !WHITESPACE.test(text[d.start - 1]);
        let inserted = text.slice(d.start, d.end);
        if (after) inserted += " ";
        if (before) inserted = ` ${inserted}`;
        fix(d.start, d.end, inserted);
      }));
    }
    if ((d.code === "ambiguous" || d.code === "unknown") && d.start >= 0) {
      for (const id of d.candidates) {
        const m = member(room, Number(id));
        if (m) fixes.append(button(t("diag.use", { ref: refOf(m) }), () => fix(d.start, d.end, refOf(m)), { memberId: String(m.id) }));
      }
    }
    if ((d.code === "unknown" || d.code === "departed") && d.start >= 0) {
      fixes.append(button(t("diag.removeAt"), () => fix(d.start, d.start + 1, "")));
    }
    if (fixes.childElementCount) item.append(fixes);
    list.append(item);
  }
  if (blocking) {
    list.append(
      h("li", { class: "diag-plain" },
        h("span", { text: lead ? t("diag.plainExplainLead", { name: lead.display_name }) : t("diag.plainExplain") }),
        button(lead ? t("diag.sendPlainTo", { name: lead.display_name }) : t("diag.sendPlain"), sendPlain, { action: "send-plain" })),
    );
  }
}

function button(text, run, dataset = {}) {
  return h("button", { type: "button", class: "btn btn-small", text, dataset, on: { click: run } });
}
