// What asks for your attention outside the open project: other projects' unread counts and
// mentions of you, pushed by the server (`unread` frames, docs/protocol.md "Unread counts"), in
// the projects column and the document title; and desktop notifications for mentions, off
// until you turn them on (the browser's permission is asked only when you click).

import { $, local } from "./dom.js";
import { t } from "./i18n.js";
import { alertsOn, shownCounts } from "./notify.js";
import { app } from "./store.js";

const NOTIFY_KEY = "room.notify";
let baseTitle = "Project Room";

/** An `unread` frame: the project's counts now. Returns true when it changed anything shown. */
export function applyUnread(frame) {
  const project = app.projects.get(frame.project_id);
  if (!project) return false;
  const before = project.mentions || 0;
  project.unread = frame.unread;
  project.mentions = frame.mentions;
  if (frame.mentions > before && !looking(project.id) && alertsOn(project)) notifyMention(project, frame.mentions);
  renderTitle();
  return true;
}

/** The open project is being read while the page is visible: its counts are not news. */
function looking(projectId) {
  return app.room?.id === projectId && document.visibilityState === "visible";
}

/** The counts the title and the badges show: every project but the one being read. */
export function totals() {
  let unread = 0;
  let mentions = 0;
  for (const p of app.projects.values()) {
    if (looking(p.id)) continue;
    const shown = shownCounts(p); // under the project's notification level
    unread += shown.unread;
    mentions += shown.mentions;
  }
  return { unread, mentions };
}

// The page's title: "(3 · @1) 项目 · Project Room" while something waits for you.
export function setTitle(text) {
  baseTitle = text;
  renderTitle();
}

export function renderTitle() {
  const { unread, mentions } = totals();
  const count = unread > 99 ? "99+" : String(unread);
  const prefix = mentions ? `(${count} · @${mentions}) ` : unread ? `(${count}) ` : "";
  document.title = prefix + baseTitle;
}

// -- desktop notifications ------------------------------------------------------------------------

function supported() {
  return typeof window.Notification === "function";
}

/** "unsupported", "blocked" (the browser refuses), "on" or "off". */
export function notifyState() {
  if (!supported()) return "unsupported";
  if (Notification.permission === "denied") return "blocked";
  return Notification.permission === "granted" && local.get(NOTIFY_KEY) === "on" ? "on" : "off";
}

export function renderNotifyToggle() {
  const button = $("#notify-toggle");
  if (!button) return;
  const state = notifyState();
  button.hidden = state === "unsupported";
  button.dataset.state = state;
  button.textContent = t(`notify.${state}`);
  button.title = t(`notify.${state}Hint`);
  button.setAttribute("aria-pressed", String(state === "on"));
}

/** The toggle was clicked: ask the browser the first time, then turn ours on or off. */
export async function toggleNotifications() {
  if (!supported()) return;
  if (notifyState() === "on") local.set(NOTIFY_KEY, "off");
  else {
    const permission = Notification.permission === "default" ? await Notification.requestPermission() : Notification.permission;
    local.set(NOTIFY_KEY, permission === "granted" ? "on" : "off");
  }
  renderNotifyToggle();
}

export function bindNotifyToggle() {
  $("#notify-toggle")?.addEventListener("click", () => toggleNotifications());
  document.addEventListener("visibilitychange", renderTitle);
  renderNotifyToggle();
}

function notifyMention(project, mentions) {
  if (notifyState() !== "on") return;
  const note = new Notification(t("notify.title", { name: project.name }), {
    body: t("notify.body", { n: mentions }),
    tag: `room-mention-${project.id}`, // one per project, replaced by the next
  });
  note.addEventListener("click", () => {
    window.focus();
    location.hash = `#/p/${project.id}`;
    note.close();
  });
}
