// Server notices worded in the reader's language. A notice the server stores with a code and
// its facts (`meta.notice = {code, params}`, room/actions/*) is written here from
// web/strings-*.js (`noticeText.<code>`); one this page has no words for shows the server's own
// text, as before. The risk scan's findings ({rule, params}) are worded the same way on /overview.

import { hasString, t } from "./i18n.js";

/** A risk finding's title, detail and suggestion from its rule and facts (null: unknown rule). */
export function riskWords(rule, params = {}) {
  if (!hasString(`risk.${rule}.title`)) return null;
  return {
    title: t(`risk.${rule}.title`, params),
    detail: t(`risk.${rule}.detail`, params),
    suggestion: t(`risk.${rule}.suggestion`, params),
  };
}

/** What a system message says in the reader's language, or null to show the server's text. */
export function noticeText(message) {
  const notice = message.meta?.notice;
  if (!notice || typeof notice.code !== "string" || !hasString(`noticeText.${notice.code}`)) return null;
  const params = notice.params || {};
  if (notice.code === "risk_found") {
    const words = riskWords(params.rule, params);
    return words ? t("noticeText.risk_found", words) : null;
  }
  if (notice.code === "research_state") {
    if (!hasString(`researchNotice.${params.state}`)) return null;
    return t("noticeText.research_state", { ...params, state: t(`researchNotice.${params.state}`) });
  }
  return t(`noticeText.${notice.code}`, params);
}
