// A person's notification level per project (all / mentions / none) and their inbox across
// projects (docs/protocol.md, "Notifications"). The level decides what the projects column's
// badges, the title and the desktop alerts count: everything, mentions and followed-thread
// replies only, or nothing. The server's counts are the same whatever the level.

import { get, put } from "./api.js";
import { h } from "./dom.js";
import { formatDateTime, t } from "./i18n.js";
import { plainText } from "./message.js";
import { openDialog, toastError } from "./ui.js";

export const LEVELS = ["all", "mentions", "none"];

/** What a project's badges show under its level: {unread, mentions}. */
export function shownCounts(project) {
  const level = project.notify || "all";
  if (level === "none") return { unread: 0, mentions: 0 };
  const mentions = project.mentions || 0;
  return { unread: level === "mentions" ? mentions : project.unread || 0, mentions };
}

/** Whether a new mention (or followed-thread reply) in `project` may raise a desktop alert. */
export function alertsOn(project) {
  return (project.notify || "all") !== "none";
}

/** The level chooser for one project; `onChanged(level)` after the server took it. */
export function levelDialog(project, onChanged) {
  return openDialog({
    title: t("notifyLevel.title"),
    build: (close) => {
      const name = `notify-level-${project.id}`;
      const options = LEVELS.map((level) => {
        const input = h("input", { type: "radio", name, value: level, checked: (project.notify || "all") === level });
        input.addEventListener("change", async () => {
          try {
            const answer = await put(`/api/projects/${project.id}/notifications`, { level });
            project.notify = answer.level;
            onChanged(answer.level);
            close(answer.level);
          } catch (err) {
            toastError(err);
          }
        });
        return h("label", { class: "notify-level", dataset: { level } }, input,
          h("span", { class: "notify-level-text" }, h("strong", { text: t(`notifyLevel.${level}`) }), h("span", { class: "muted", text: t(`notifyLevel.${level}Hint`) })));
      }); // prettier-ignore
      return h("fieldset", { class: "notify-levels" }, h("legend", { class: "visually-hidden", text: t("notifyLevel.title") }), ...options);
    },
  });
}

/** The inbox: unread mentions and followed-thread replies across the person's projects. */
export async function openInbox() {
  let answer;
  try {
    answer = await get("/api/inbox?limit=50");
  } catch (err) {
    toastError(err);
    return;
  }
  await openDialog({
    title: t("inbox.title"),
    wide: true,
    className: "inbox-dialog",
    build: (close) => {
      if (!answer.items.length) return h("p", { class: "muted inbox-empty", text: t("inbox.empty") });
      return h("ul", { class: "inbox-list" }, ...answer.items.map((item) => {
        const m = item.message;
        const link = h("a", { class: "inbox-item", href: `#/p/${item.project_id}/m/${m.id}`, on: { click: () => close(undefined) } },
          h("span", { class: "inbox-meta" },
            h("strong", { class: "inbox-project", text: item.project_name }),
            h("span", { class: ["inbox-reason", `is-${item.reason}`], text: t(`inbox.${item.reason}`) }),
            h("time", { dateTime: m.created_at, text: formatDateTime(m.created_at) })),
          h("span", { class: "inbox-text", text: plainText(m.html) }));
        return h("li", {}, link);
      })); // prettier-ignore
    },
  });
}
