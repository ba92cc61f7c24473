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
    // Named by what it shows, after a word for readers (axe: the visible text is in the name).
    { type: "button", class: "thread-summary", dataset: { threadOpen: String(message.id) } },
    icon("reply"),
    h("span", { class: "visually-hidden", text: t("thread.openPrefix") }),
    h("span", { class: "thread-count", text: t("thread.replies", { n: thread.replies }) }),
    h("span", { class: "thread-last", text: last }),
  );
}
