// Project Room — the browser room. Plain ES modules, no build step, no remote assets.
// Who we are and our projects come from /api/me; the open project lives on /ws (socket.js).
// This module wires the parts together and follows the address (`#/p/<id>`, and a permalink
// `#/p/<id>/m/<message id>?q=<words>` opening that message with the words marked): navigate().

import { get, post, setCsrf } from "./api.js";
import { applyUnread, bindNotifyToggle, renderNotifyToggle, renderTitle, setTitle } from "./attention.js";
import { Composer } from "./composer.js";
import { Drafts } from "./drafts.js";
import { $, debounce } from "./dom.js";
import { applyStatic, errorText, label, onLang, t } from "./i18n.js";
import { closeDrawer, initLayout, openDrawerOf } from "./layout.js";
import { Lifecycle } from "./lifecycle.js";
import { MemoryTab } from "./memory.js";
import { termsOf } from "./highlight.js";
import { Members } from "./members.js";
import { levelDialog, openInbox } from "./notify.js";
import { openDigest, syncLanguage } from "./digest.js";
import { avatar, noticeKind, paintPresence } from "./message.js";
import { loadProviders, ModelRoutesTab } from "./modelroutes.js";
import { Panel } from "./panel.js";
import { mayPropose, proposeDialog } from "./research.js";
import { bindProjectsColumn, renderProjects } from "./projects.js";
import { SearchBox } from "./search.js";
import { initShortcuts, openHelp } from "./shortcuts.js";
import { Connection } from "./socket.js";
import { app, createRoom, member, mergePresence, setMembers, setPresence, upsertProject, upsertProjectFrame } from "./store.js";
import { ThreadPane } from "./thread.js";
import { Timeline } from "./timeline.js";
import { confirmDialog, onContextGesture, toast, toastError } from "./ui.js";

const TYPING_SHOWN_MS = 6000;

const conn = new Connection({ onFrame, onStatus });
const timeline = new Timeline($("#timeline"), conn, {
  reply: (message) => composer.setReply(message),
  mention: (memberId) => composer.insertMention(memberId),
  remove: removeMessage,
  markRequirement,
  clearBrake,
  retryDeliveries,
});
const composer = new Composer($("#composer"), conn, {
  onSent: () => {
    timeline.render();
    timeline.scrollToBottom(false);
  },
  onEditLast: () => timeline.editLast(),
});
$("#inbox-open").addEventListener("click", () => openInbox());
// The person's email digest: its address, in the page's language (issue 30 item 8).
$("#digest-open").addEventListener("click", () => openDigest());
// The open project's notification level (issue 30 item 6): a button in the sidebar's foot.
$("#notify-level").addEventListener("click", () => {
  if (!app.room) return;
  levelDialog(app.room.project, () => {
    renderProjects($("#project-groups"), app.room?.id);
    renderTitle();
    renderBell();
  });
});
function renderBell() {
  const level = app.room?.project.notify || "all";
  const button = $("#notify-level");
  button.hidden = !app.room;
  button.dataset.level = level;
  button.title = `${t("notifyLevel.title")}: ${t(`notifyLevel.${level}`)}`;
}
// The thread pane (issue 30 item 2): opened from a root's reply count in the timeline.
const threads = new ThreadPane(conn, { onSent: () => timeline.render() });
$("#timeline").addEventListener("click", (event) => {
  const opener = event.target.closest("[data-thread-open]");
  if (opener && app.room) threads.open(app.room, Number(opener.dataset.threadOpen));
});
const members = new Members($("#tab-members"), {
  composer,
  showTasksOf: (memberId) => {
    panel.showTasksOf(memberId);
    openDrawerOf($("#panel-col"), $("#open-panel"));
  },
});
const models = new ModelRoutesTab($("#tab-models"));
const drafts = new Drafts($("#drafts"));
const memory = new MemoryTab($("#tab-memory"));
const panel = new Panel($("#panel-col"), { members, models, memory });
const search = new SearchBox($("#search"), { room: () => app.room, open: openResult });
let pendingJump = null; // a permalink's message, opened once the timeline has loaded
const lifecycle = new Lifecycle({
  onChanged: (project) => projectChanged(project),
  extras: (room) => (mayPropose(room) ? [{ id: "research-propose", label: t("research.proposeMenu"), run: () => proposeDialog(room) }] : []),
  onPurged: (projectId) => {
    app.projects.delete(projectId);
    if (app.room?.id === projectId) app.room = null;
    location.hash = "";
    navigate();
  },
});
const refreshMembers = debounce(async () => {
  const room = app.room;
  if (!room) return;
  try {
    const detail = await get(`/api/projects/${room.id}`);
    if (room === app.room) membersChanged(detail.members);
  } catch {
    /* the next members frame or resubscribe fixes it */
  }
}, 300);

async function boot() {
  applyStatic(document);
  let me;
  try {
    me = await get("/api/me");
  } catch (err) {
    if (err.status === 401) return signedOut(err.code === "account_disabled");
    $("#boot-error").hidden = false;
    $("#boot-error").textContent = errorText(err);
    return;
  }
  app.identity = me.identity;
  setCsrf(me.csrf_token);
  for (const project of me.projects) upsertProject(project);
  app.trashRetentionDays = me.trash_retention_days ?? null;
  // Only the people the operator lists may create projects (setting project_creators).
  $("#new-project").hidden = me.may_create_projects === false;
  $("#app").hidden = false;
  $("#me-name").textContent = me.identity.display_name;
  $("#me-handle").textContent = `@${me.identity.handle}`;
  $("#logout-csrf").value = me.csrf_token;
  if (me.identity.kind === "human") syncLanguage(); // the digest is written in the page's language
  initLayout();
  bindProjectsColumn((project) => {
    location.hash = `#/p/${project.id}`;
  });
  onContextGesture(document.body, "[data-member-menu]", (target, at) => members.menu(Number(target.dataset.memberId), at));
  document.body.addEventListener("click", (event) => {
    const target = /** @type {HTMLElement | null} */ (/** @type {Element} */ (event.target).closest("[data-member-menu]"));
    if (target) members.menu(Number(target.dataset.memberId), target);
  });
  // The skip link focuses the composer without touching the #/p/<id> address in the hash.
  $(".skip-link").addEventListener("click", (event) => {
    event.preventDefault();
    $("#draft").focus();
  });
  $("#room-goal").addEventListener("click", (event) => {
    const goal = event.currentTarget;
    goal.setAttribute("aria-expanded", String(goal.getAttribute("aria-expanded") !== "true"));
  });
  $("#panel-col").addEventListener("click", (event) => {
    const jump = event.target.closest("[data-jump]");
    if (jump) timeline.jumpTo(Number(jump.dataset.jump));
  });
  // Back to the latest: the address stops pointing at the message opened from search.
  $("#jump-latest").addEventListener("click", () => {
    if (app.room && /^#\/p\/\d+\/m\//.test(location.hash)) history.replaceState(null, "", `#/p/${app.room.id}`);
  });
  $("#members-button").addEventListener("click", () => {
    panel.select("members");
    openDrawerOf($("#panel-col"), $("#open-panel"));
  });
  onLang(() => {
    renderProjects($("#project-groups"), app.room?.id);
    if (!app.room) return;
    renderHeader();
    timeline.cache.clear();
    timeline.render();
    composer.refresh();
    panel.refresh();
    lifecycle.render();
    onStatus(conn.status, conn.attempt);
    renderNotifyToggle();
  });
  window.addEventListener("hashchange", navigate);
  // Projects made elsewhere (another tab, an invite) appear when you come back; unread counts
  // are pushed over the socket (`unread` frames).
  initShortcuts({ go: (id) => (location.hash = `#/p/${id}`) });
  $("#shortcuts-button")?.addEventListener("click", () => openHelp());
  window.addEventListener("focus", refreshProjects);
  bindNotifyToggle();
  loadProviders().catch(() => {});
  navigate();
}

/** The sign-in card; for a person an operator disabled (`room users disable`) it says so. */
function signedOut(disabled = false) {
  $("#app").hidden = true;
  $("#signed-out").hidden = false;
  if (disabled) {
    $("#signed-out h1").textContent = t("auth.disabledTitle");
    $("#signed-out p").textContent = t("auth.disabledText");
  }
}

/** Projects created elsewhere (another tab, an invite, the CLI) appear on the next look. */
async function refreshProjects() {
  try {
    const me = await get("/api/me");
    for (const project of me.projects) upsertProject(project);
    for (const id of [...app.projects.keys()]) if (!me.projects.some((p) => p.id === id)) app.projects.delete(id);
    renderProjects($("#project-groups"), app.room?.id);
    renderTitle();
  } catch (err) {
    if (err.status === 401) signedOut(err.code === "account_disabled");
  }
}

async function navigate() {
  const match = location.hash.match(/^#\/p\/(\d+)(?:\/m\/(\d+))?(?:\?(.*))?$/) || location.hash.match(/^#\/p\/(\d+)/);
  let id = match ? Number(match[1]) : null;
  if (match?.[2]) {
    const q = new URLSearchParams(match[3] || "").get("q") || "";
    pendingJump = { projectId: id, messageId: Number(match[2]), terms: termsOf("", q) };
  }
  if (id !== null && !app.projects.has(id)) await refreshProjects();
  if (id !== null && !app.projects.has(id)) {
    // A link to a project that is gone or not yours: said, not silently another project.
    toast(t("room.notYours"), { timeout: 8000 });
    pendingJump = null;
    id = null;
  }
  if (id === null) {
    const first = [...app.projects.values()].find((p) => p.state === "active") || [...app.projects.values()][0];
    id = first ? first.id : null;
  }
  renderProjects($("#project-groups"), id);
  if (id === null) return showNoProject();
  if (app.room?.id !== id) openProject(id);
  else runPendingJump();
  closeDrawer(false);
}

/** Open a permalink's message once the project's timeline is there. */
function runPendingJump() {
  const room = app.room;
  const jump = pendingJump;
  if (!jump || !room || jump.projectId !== room.id || !room.historyLoaded) return;
  pendingJump = null;
  timeline.jumpTo(jump.messageId, { terms: jump.terms, gone: "timeline.messageGone" });
}

/** A search result: the message in the timeline (and its permalink in the address), or the
 * record in the 记忆 tab. */
function openResult(result, terms, query) {
  const room = app.room;
  if (!room) return;
  if (result.project && result.project.id !== room.id) {
    // Another of the person's projects: its permalink opens it and the message (or its 记忆).
    const q = query ? `?${new URLSearchParams({ q: query })}` : "";
    location.hash = result.kind === "message" ? `#/p/${result.project.id}/m/${result.message_id ?? result.id}${q}` : `#/p/${result.project.id}`;
    return;
  }
  if (result.kind === "message") {
    const messageId = result.message_id ?? result.id;
    const q = query ? `?${new URLSearchParams({ q: query })}` : "";
    history.replaceState(null, "", `#/p/${room.id}/m/${messageId}${q}`);
    timeline.jumpTo(messageId, { seq: result.seq ?? null, terms, gone: "timeline.messageGone" });
    return;
  }
  panel.select("memory");
  openDrawerOf($("#panel-col"), $("#open-panel"));
  memory.reveal(result.kind, result.record_id ?? result.id, terms);
}

function showNoProject() {
  app.room = null;
  $("#room-main").hidden = true;
  $("#no-project").hidden = false;
  lifecycle.open(null);
}

function openProject(id) {
  const project = app.projects.get(id);
  project.unread = 0; // read from here on; the badge stays off while it is open
  project.mentions = 0;
  const previous = app.room && app.projects.get(app.room.id);
  // Seen while open (a count read meanwhile is stale) — unless marked unread: ask the server.
  if (previous && app.room.heldUnread) setTimeout(refreshProjects, 0);
  else if (previous) Object.assign(previous, { unread: 0, mentions: 0 });
  renderProjects($("#project-groups"), id);
  const room = createRoom(project);
  app.room = room;
  $("#no-project").hidden = true;
  $("#room-main").hidden = false;
  renderHeader();
  threads.close();
  renderBell();
  timeline.open(room);
  drafts.open(room);
  composer.open(room);
  lifecycle.open(room);
  panel.open(room);
  search.reset();
  $("#typing").textContent = "";
  conn.watch(id);
}

function renderHeader() {
  const room = app.room;
  if (!room) return;
  const project = room.project;
  $("#room-title").textContent = project.name;
  $("#room-title").title = project.name;
  const goal = $("#room-goal");
  goal.textContent = project.goal || "";
  goal.hidden = !project.goal;
  const badge = $("#room-state");
  badge.hidden = project.state === "active";
  badge.className = `state-badge state-${project.state}`;
  badge.textContent = label("projectState", project.state);
  const stack = $("#member-stack");
  const present = [...room.members.values()].filter((m) => m.status !== "left");
  stack.replaceChildren(...present.slice(0, 4).map((m) => avatar(room, m.id, "sm")));
  $("#members-count").textContent = String(present.length);
  setTitle(`${project.name} · Project Room`);
}

// -- frames -------------------------------------------------------------------------------------

function onFrame(frame) {
  if (frame.type === "unread") {
    // Any project of yours, whichever the socket watches.
    if (applyUnread(frame)) renderProjects($("#project-groups"), app.room?.id);
    return;
  }
  const room = app.room;
  if (!room) return;
  switch (frame.type) {
    case "subscribed":
      room.you = frame.you;
      drafts.reset();
      setPresence(room, frame.presence);
      setMembers(room, frame.members);
      room.readCursors = new Map(Object.entries(frame.read_cursors || {}).map(([k, v]) => [Number(k), v]));
      projectChanged(upsertProject(frame.project), false);
      if (frame.since === null || frame.since === undefined) timeline.loadLatest().then(runPendingJump);
      else {
        timeline.refreshOpenReceipts();
        timeline.markRead(); // a cursor lost with the old socket goes out again
      }
      composer.refresh();
      members.render();
      paintPresence(room);
      break;
    case "message":
    case "message_updated":
      if (frame.message.author_id !== null && !member(room, frame.message.author_id)) refreshMembers();
      timeline.apply(frame);
      drafts.onMessage(frame.message);
      threads.apply(frame);
      if (composer.replyTo?.id === frame.message.id) composer.renderQuote(); // edited or deleted
      upsertProject({ id: room.id, head_seq: frame.seq });
      if (frame.message.meta?.route_change && panel.current === "models") models.load(room, { background: true });
      if (noticeKind(frame.message) === "task" && ["tasks", "decisions"].includes(panel.current)) panel.refresh();
      if (frame.message.author_id !== null) typingStopped(frame.message.author_id);
      break;
    case "members":
      membersChanged(frame.members, frame.allowed_ops);
      break;
    case "presence":
      if (frame.project_id !== room.id) break;
      mergePresence(room, frame.presence);
      paintPresence(room);
      members.render();
      break;
    case "project":
      if (frame.project.id === room.id) {
        const before = room.project.state;
        projectChanged(upsertProjectFrame(frame));
        // What may be done to members depends on the state too; the frame says nothing of it.
        if (frame.project.state !== before) refreshMembers();
        // The model forms are offered only while the project takes changes.
        if (frame.project.state !== before && panel.current === "models") models.load(room, { background: true });
      } else upsertProjectFrame(frame);
      renderProjects($("#project-groups"), room.id);
      break;
    case "resync_required":
      timeline.open(room);
      break;
    case "unsubscribed":
      // We left the project (here or elsewhere): it is no longer ours to watch or write in.
      if (frame.reason === "left" && frame.project_id === room.id) {
        conn.unwatch();
        app.projects.delete(room.id);
        toast(t("room.youLeft", { name: room.project.name }), { timeout: 8000 });
        if (location.hash) location.hash = "";
        else navigate();
      }
      break;
    case "memory":
      memory.onFrame(frame, panel.current === "memory");
      break;
    case "delivery":
      if (frame.project_id === room.id) timeline.onDelivery(frame);
      break;
    case "draft":
      drafts.onFrame(frame);
      break;
    case "typing":
      if (frame.project_id !== room.id || frame.member_id === room.you) break;
      if (!member(room, frame.member_id)) refreshMembers();
      typingChanged(frame.member_id, frame.active);
      break;
    case "read":
      if (frame.project_id === room.id) room.readCursors.set(frame.member_id, frame.seq);
      break;
    case "error":
      onError(frame);
      break;
    default:
      break;
  }
}

function membersChanged(list, opsById = null) {
  const room = app.room;
  setMembers(room, list, opsById);
  renderHeader();
  timeline.render();
  composer.refresh();
  members.render();
  renderTyping();
}

function projectChanged(project, rerender = true) {
  const room = app.room;
  if (!room || project.id !== room.id) return;
  const epochChanged = conn.epoch !== null && project.epoch !== undefined && project.epoch !== conn.epoch;
  renderHeader();
  lifecycle.render();
  composer.refresh();
  renderProjects($("#project-groups"), room.id);
  if (epochChanged) {
    // Restored from the trash (or imported): the old cursor means nothing any more.
    timeline.open(room);
    conn.watch(room.id);
  } else if (rerender) timeline.render();
}

function onError(frame) {
  const txn = frame.details?.client_txn_id;
  if (frame.code === "rate_limited") {
    // Only sends are refused for speed (they are retransmitted); nothing else needs a word.
    if (txn) toast(t("composer.rateLimited", { s: Math.ceil((frame.details.retry_after_ms || 1000) / 1000) }));
    return;
  }
  if (txn) {
    (threads.wrote(txn) && threads.composer ? threads.composer : composer).restore(txn);
    timeline.render();
    toast(frame.code === "mentions_unresolved" ? t("composer.unresolved") : errorText(frame), { kind: "error", timeout: 8000 });
    return;
  }
  toast(errorText(frame), { kind: "error" });
}

function onStatus(status, attempt) {
  if (status === "signed_out") return signedOut(conn.closeReason === "account disabled");
  const el = $("#conn-state");
  el.dataset.status = status;
  el.textContent = t(`conn.${status}`);
  if (status === "reconnecting" && attempt === 3) {
    get("/api/me").catch((err) => err.status === 401 && signedOut(err.code === "account_disabled"));
  }
}

// -- typing -------------------------------------------------------------------------------------

function typingChanged(memberId, active) {
  const room = app.room;
  clearTimeout(room.typing.get(memberId));
  if (active) room.typing.set(memberId, setTimeout(() => typingStopped(memberId), TYPING_SHOWN_MS));
  else room.typing.delete(memberId);
  renderTyping();
}

function typingStopped(memberId) {
  const room = app.room;
  if (!room?.typing.has(memberId)) return;
  clearTimeout(room.typing.get(memberId));
  room.typing.delete(memberId);
  renderTyping();
}

function renderTyping() {
  const room = app.room;
  const names = [...room.typing.keys()].map((id) => member(room, id)?.display_name || `#${id}`);
  $("#typing").textContent = names.length ? t("typing.some", { names: names.join("、") }) : "";
}

// -- message actions ----------------------------------------------------------------------------

async function removeMessage(message) {
  const ok = await confirmDialog({ title: t("confirm.deleteTitle"), text: t("confirm.deleteText"), confirmLabel: t("action.delete"), danger: true });
  if (!ok) return;
  try {
    await conn.request({ type: "delete", project_id: app.room.id, message_id: message.id });
  } catch (err) {
    toastError(err);
  }
}

async function markRequirement(message) {
  try {
    await post(`/api/messages/${message.id}/requirement-change`, {});
    toast(t("requirement.done"));
  } catch (err) {
    toastError(err);
  }
}

/** Ask for failed deliveries again (docs/protocol.md, "Retrying a failed delivery"). */
async function retryDeliveries(ids) {
  try {
    for (const id of ids) await post(`/api/deliveries/${id}/retry`, {});
    toast(t("delivery.retried"));
  } catch (err) {
    toastError(err);
  }
}

async function clearBrake() {
  try {
    await post(`/api/projects/${app.room.id}/brake/clear`, {});
    toast(t("brake.cleared"));
  } catch (err) {
    toastError(err);
  }
}


boot();
