// Server notices worded in the reader's language. A notice the server stores with a code and
// its facts (`meta.notice = {code, params}`, room/actions/*, room/rules/notices.py) is written
// here from web/strings-*.js (`noticeText.<code>` and its parts), composed as the server composes
// its Chinese body; one this page has no words for shows the server's own text. The risk scan's findings ({rule, params}) are worded the same way on /overview.

import { errorText, hasString, label, t } from "./i18n.js";

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

const list = (value) => (Array.isArray(value) ? value : []);
const by = (params) => params.by ?? t("noticeText.bySystem");
const handles = (names) => list(names).map((h) => `@${h}`).join(", ");

/** The project reached a state (room.rules.notices.lifecycle): the state's words, the reason,
 * who. */
function lifecycleLine(code, params) {
  let head;
  if (code === "project_restored") {
    if (!hasString(`noticeText.restoredFrom.${params.from}`)) return null;
    head = t("noticeText.project_restored", { where: t(`noticeText.restoredFrom.${params.from}`) });
  } else if (code === "project_stop_cancelled") head = t(`noticeText.${code}`, { state: label("projectState", params.state) });
  else head = t(`noticeText.${code}`, params);
  if (params.reason) head += t("noticeText.reason", { reason: params.reason });
  return head + t("noticeText.byline", { by: params.by });
}

/** The loop brake tripped, interrupted a turn or was cleared (room.rules.notices.brake_*). */
function brakeLine(code, params) {
  if (code === "brake_cleared") {
    const resumed = list(params.resumed);
    return t("noticeText.brake_cleared") + (resumed.length ? t("noticeText.brakeResumed", { who: handles(resumed) }) : "");
  }
  if (code === "brake_interrupted") {
    const tasks = list(params.tasks).map((task) => t("noticeText.brakeTask", task));
    return t("noticeText.brake_interrupted", { ...params, tasks: tasks.length ? t("noticeText.brakeTasks", { tasks: tasks.join(", ") }) : "" });
  }
  if (!hasString(`noticeText.brake.${params.reason}`)) return null;
  const facts = params.same_reply ? { ...params, what: t("noticeText.brakeSameReply") } : params;
  let tail;
  if (params.held === null || params.held === undefined) tail = t(params.reason === "token_budget" ? "noticeText.brakeHeldAllBudget" : "noticeText.brakeHeldAll");
  else tail = t("noticeText.brakeHeldSome", { who: handles(params.held) });
  return t(`noticeText.brake.${params.reason}`, facts) + tail;
}

/** A turn failed: who, the cause and the next step in words, the code. */
function failedLine(params) {
  const known = hasString(`noticeText.failure.${params.code}.cause`) ? params.code : "unknown";
  return t("noticeText.turn_failed", {
    handle: params.handle,
    code: params.code,
    where: params.model ? t("noticeText.failedModel", { model: params.model }) : "",
    cause: t(`noticeText.failure.${known}.cause`),
    next: t(`noticeText.failure.${known}.next`),
  });
}

/** The task notices beyond task_ready, plans started, reviews and decisions
 * (room.rules.notices.task_* and friends). */
function taskLines(code, params) {
  const who = by(params);
  const next = hasString(`noticeText.next.${params.next}`) ? t(`noticeText.next.${params.next}`) : "";
  switch (code) {
    case "task_changes_requested":
      return [t(`noticeText.${code}`, { ...params, by: who }), t("noticeText.taskNote", params), next].join("\n");
    case "task_accepted":
      return t(`noticeText.${code}`, { ...params, by: who });
    case "task_blocked":
    case "task_cancelled":
    case "task_reopened": {
      const lines = [t(`noticeText.${code}`, { ...params, by: who })];
      if (params.owner && next) lines.push(t("noticeText.taskNextFor", { owner: params.owner, next }));
      return lines.join("\n");
    }
    case "task_reassigned":
      return t(`noticeText.${code}`, { ...params, by: who }) + (params.was ? t("noticeText.reassignedFrom", params) : "");
    case "tasks_handed_off":
      return t(`noticeText.${code}`, { handle: params.handle, keys: list(params.keys).join(", ") });
    case "review_requested": {
      const head = params.reviewer ? "review_requested" : "review_requested_people";
      const lines = [t(`noticeText.${head}`, { ...params, by: who })];
      if (params.summary) lines.push(t("noticeText.reviewSummary", params));
      const evidence = list(params.evidence).filter((e) => hasString(`noticeText.evidence.${e.kind}`));
      if (evidence.length) lines.push(t("noticeText.reviewEvidence"), ...evidence.map((e) => t(`noticeText.evidence.${e.kind}`, e)));
      lines.push(t("noticeText.criteria"), ...list(params.criteria).map((text, i) => `${i + 1}. ${text}`));
      if (params.agent_reviewer) lines.push(t("noticeText.reviewNext"));
      return lines.join("\n");
    }
    case "sync_receipt": {
      const answered = list(params.answered).map((a) => t("noticeText.syncedRevision", a));
      const what = answered.length ? answered.join(", ") : t("noticeText.syncedAny");
      return t(`noticeText.${code}`, { by: who, what, key: params.key }) + (params.note ? t("noticeText.syncNote", params) : "");
    }
    case "plan_started":
      return t(`noticeText.${code}`, { by: who, versions: list(params.versions).map((v) => `v${v}`).join(", ") });
    case "task_reviewed": {
      const lines = [t(`noticeText.${code}`, { ...params, by: who })];
      lines.push(...list(params.verdicts).map((v) => t("noticeText.verdict", { ...v, mark: v.passed ? "✅" : "❌" })));
      if (params.outcome === "changes" && params.owner && next) lines.push(t("noticeText.reviewChangesFor", params), next);
      else if (params.outcome === "changes") lines.push(t("noticeText.reviewChanges"));
      else if (params.outcome === "accepted") lines.push(t("noticeText.reviewAccepted"));
      else lines.push(t("noticeText.reviewLeft", params));
      return lines.join("\n");
    }
    case "decision_recorded":
    case "decision_proposed":
    case "decision_accepted":
      return t(`noticeText.${code}`, { ...params, by: who });
    case "requirement_changed": {
      const which = t("noticeText.syncedRevision", { label: params.label, revision: params.revision });
      const lines = [t(`noticeText.${code}`, { label: which, by: who }), ...String(params.excerpt ?? "").split("\n").map((l) => `> ${l}`)];
      const affected = list(params.affected).map((a) => t("noticeText.changeTask", a));
      if (affected.length) lines.push(t("noticeText.changeTasks", { tasks: affected.join(", ") }), t("noticeText.changeNext"));
      else lines.push(t("noticeText.changeNone"));
      const skipped = list(params.skipped).map((s) => t("noticeText.changeSkippedTask", { task: s.task, state: label("taskState", s.state) }));
      if (skipped.length) lines.push(t("noticeText.changeSkipped", { tasks: skipped.join(", ") }));
      return lines.join("\n");
    }
    case "requirement_change_failed":
      return t(`noticeText.${code}`, { message: errorText({ code: params.code, message: params.message }) });
    default:
      return null;
  }
}

/** What a system message says in the reader's language (lines apart by "\n"), or null to show
 * the server's text. */
export function noticeText(message) {
  const notice = message.meta?.notice;
  if (!notice || typeof notice.code !== "string") return null;
  const code = notice.code;
  const params = notice.params || {};
  if (code.startsWith("brake_")) return brakeLine(code, params);
  if (code === "turn_failed") return failedLine(params);
  if (code === "restart_interrupted") {
    return t("noticeText.restart_interrupted", { ...params, who: params.handle ? `@${params.handle}` : t("noticeText.someMember") });
  }
  if (!hasString(`noticeText.${code}`)) return null;
  if (code.startsWith("project_")) return lifecycleLine(code, params);
  if (code.startsWith("member_")) return t(`noticeText.${code}`, params);
  if (/^(task_|tasks_|review_|sync_|plan_started|decision_|requirement_)/.test(code)) {
    const worded = taskLines(code, params);
    if (worded !== null) return worded;
  }
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
