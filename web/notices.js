// Server notices worded in the reader's language. A notice the server stores with a code and
// its facts (`meta.notice = {code, params}`, room/actions/*) is written here from
// web/strings-*.js (`noticeText.<code>`); one this page has no words for shows the server's own
// text, as before. The risk scan's findings ({rule, params}) are worded the same way on /overview.

import { hasString, label, t } from "./i18n.js";

/** A risk finding's title, detail and suggestion from its rule and facts (null: unknown rule). */
export function riskWords(rule, params = {}) {
  if (!hasString(`risk.${rule}.title`)) return null;
  return {
    title: t(`risk.${rule}.title`, params),
    detail: t(`risk.${rule}.detail`, params),
    suggestion: t(`risk.${rule}.suggestion`, params),
  };
}

/** A plan as submitted: the headline, one line per task, and whether it waits to be started. */
function planLines(params) {
  const lines = [t("noticeText.plan_submitted", params)];
  (Array.isArray(params.items) ? params.items : []).forEach((item, i) => {
    const after = Array.isArray(item.after) && item.after.length ? t("noticeText.planAfter", { deps: item.after.join(", ") }) : "";
    lines.push(t("noticeText.planItem", { n: i + 1, key: item.key, title: item.title, owner: item.owner, after }));
  });
  if (params.started === false) lines.push(t("noticeText.planWaiting"));
  return lines.join("\n");
}

/** A task made ready: what it is, its criteria, assumptions and accepted dependencies, and the
 * owner's next step. */
function readyLines(params) {
  const list = (value) => (Array.isArray(value) ? value : []);
  const lines = [t("noticeText.task_ready", params), String(params.title ?? "")];
  lines.push(t("noticeText.criteria"), ...list(params.criteria).map((text, i) => `${i + 1}. ${text}`));
  if (list(params.assumptions).length) lines.push(t("noticeText.assumptions"), ...list(params.assumptions).map((a) => `- ${a}`));
  if (list(params.deps).length) lines.push(t("noticeText.deps", { deps: list(params.deps).join(", ") }));
  if (hasString(`noticeText.next.${params.next}`)) lines.push(t(`noticeText.next.${params.next}`));
  return lines.join("\n");
}

/** A model route changed: who, what for (the project, the pool, a role, a member), to what, why. */
function routeLine(params) {
  const scope = params.scope === "pool_pick" ? "member" : params.scope;
  if (!hasString(`noticeText.routeSubject.${scope}`)) return null;
  const subject = t(`noticeText.routeSubject.${scope}`, { role: label("role", params.subject), handle: params.subject });
  return t("noticeText.route_change", {
    actor: params.actor,
    subject,
    source: label("routeSource", params.source),
    value: params.value ?? t("noticeText.routeCleared"),
    reason: params.reason,
  });
}

/** What a system message says in the reader's language (lines apart by "\n"), or null to show
 * the server's text. */
export function noticeText(message) {
  const notice = message.meta?.notice;
  if (!notice || typeof notice.code !== "string" || !hasString(`noticeText.${notice.code}`)) return null;
  const params = notice.params || {};
  if (notice.code === "risk_found") {
    const words = riskWords(params.rule, params);
    return words ? t("noticeText.risk_found", words) : null;
  }
  if (notice.code === "plan_submitted") return planLines(params);
  if (notice.code === "task_ready") return readyLines(params);
  if (notice.code === "route_change") return routeLine(params);
  if (notice.code === "research_state") {
    if (!hasString(`researchNotice.${params.state}`)) return null;
    return t("noticeText.research_state", { ...params, state: t(`researchNotice.${params.state}`) });
  }
  return t(`noticeText.${notice.code}`, params);
}
