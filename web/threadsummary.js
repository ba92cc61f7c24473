// The line under a thread's root in the timeline (docs/protocol.md, "Threads"): its reply count
// and the time of its newest reply, a button that opens the thread pane (web/thread.js).

import { h, icon } from "./dom.js";
import { formatTime, t } from "./i18n.js";

/** The line under a thread's root in the timeline: "3 条跟帖 · 最新 10:42" (a button). */
export function threadSummary(message) {
  const thread = message.thread;
  if (!thread || !thread.replies) return null;
  const last = thread.last_reply_at ? ` · ${t("thread.lastReply", { time: formatTime(thread.last_reply_at) })}` : "";
  return h(
    "button",
    { type: "button", class: "thread-summary", dataset: { threadOpen: String(message.id) }, attrs: { "aria-label": t("thread.openCount", { n: thread.replies }) } },
    icon("reply"),
    h("span", { class: "thread-count", text: t("thread.replies", { n: thread.replies }) }),
    h("span", { class: "thread-last", text: last }),
  );
}
