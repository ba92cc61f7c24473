// The timeline: day separators, grouping, the unread marker, scroll-back history, hover actions,
// inline edit, receipts as messages come into view, and the read cursor.
//
// A search result or a permalink to an old message opens a window around it (`around`), which
// pages forward (`after`) as the reader scrolls down until it meets the live timeline; the jump
// button returns to the latest at once.
//
// Entries are cached per message (rebuilt only when the message or the roster changes) and
// reconciled into the list in seq order, so live updates never disturb focus or an open editor.
//
// Where the view rests is pinned (`pin`): to the bottom, or to an entry (the unread marker, a
// message opened by link) at its offset from the top. Content that grows after the view was placed
// — delivery labels answered after an entry comes into view, images, fonts, a resized window —
// would otherwise push the newest message off screen (it stopped 40–130 px short); a
// ResizeObserver puts the view back where it was pinned until the reader scrolls it elsewhere.

import { get } from "./api.js";
import { applyDelivery, OPEN_STATES, renderDelivery, setReceipts } from "./delivery.js";
import { $, h, icon, local } from "./dom.js";
import { clearHighlights, highlightIn } from "./highlight.js";
import { dayKey, formatDay, formatTime, t } from "./i18n.js";
import { openMessageInfo } from "./info.js";
import { authorName, excerptOf, renderMessage } from "./message.js";
import { openPicker, sendReaction } from "./reactions.js";
import { bus, isOwner, mayChange, mayPost, member, sortedMessages } from "./store.js";
import { openMenu, toast, toastError } from "./ui.js";
import { startEdit } from "./editor.js";

const PAGE = 50;
const NEAR_BOTTOM_PX = 80;
const PINNED_PX = 4; // scrolled this close to the end by the reader, the view stays at the end
const LOAD_OLDER_PX = 300;
const GROUP_GAP_MS = 5 * 60_000;
const READ_EVERY_MS = 250; // read cursors go out at most this often (the last one always does)
const FILTER_KEY = "room.timelineFilter"; // "people": only what people wrote; else everyone
// What can take focus inside an entry. The timeline is one Tab stop (the active entry, a roving
// tabindex): these stay out of the Tab order until the reader enters the entry with Enter.
const INNER = "a[href], button, summary, input, select, textarea, [tabindex]";

export class Timeline {
  constructor(el, conn, actions) {
    this.el = el;
    this.conn = conn;
    this.actions = actions; // {reply(message), mention(memberId), remove(message), markRequirement(message), clearBrake(), retryDeliveries(ids)}
    this.readTimer = null;
    this.pendingRead = null;
    // Leaving the page (reload, close) sends a cursor still waiting for its turn.
    window.addEventListener("pagehide", () => this.flushRead());
    this.room = null;
    this.cache = new Map(); // key -> {el, version}
    this.days = new Map();
    this.unreadEl = h("div", { class: "unread-marker", attrs: { role: "separator" } }, h("span", { text: "" }));
    this.topEl = h("div", { class: "history-edge" });
    this.active = null;
    this.newCount = 0;
    this.pendingReceipts = new Map(); // message id -> delivery frames seen while asking
    this.jump = $("#jump-latest");
    /** @type {"bottom" | {el: Element, offset: number} | null} where the view rests */
    this.pin = null;
    this.entered = null; // the entry whose controls are in the Tab order (Enter on it)
    this.placedTop = null; // the scrollTop this code last set: any other is the reader's scroll
    this.resizes = new ResizeObserver(() => this.keepPinned());
    this.resizes.observe(el);
    this.observer = new IntersectionObserver((entries) => this.onVisible(entries), { root: el });
    el.addEventListener("scroll", () => this.onScroll(), { passive: true });
    el.addEventListener("keydown", (event) => this.onKey(event));
    el.addEventListener("focusin", (event) => {
      const entry = event.target.closest("#timeline > [data-seq]");
      if (entry) this.setActive(entry);
    });
    // Focus leaving an entered entry: its controls leave the Tab order again.
    el.addEventListener("focusout", (event) => {
      const entered = this.entered;
      if (entered && !(event.relatedTarget instanceof Node && entered.contains(event.relatedTarget))) this.leave();
    });
    el.addEventListener("click", (event) => {
      const jump = event.target.closest("[data-jump]");
      if (jump) this.jumpTo(Number(jump.dataset.jump));
    });
    this.jump.addEventListener("click", () => this.scrollToBottom(true));
    // People only / everyone: agents' messages, tool activity and notices hidden, kept per browser.
    this.filter = local.get(FILTER_KEY) === "people" ? "people" : "all";
    this.filterButton = $("#timeline-filter");
    this.filterNote = $("#timeline-filter-note");
    this.filterButton.addEventListener("click", () => this.setFilter(this.filter === "people" ? "all" : "people"));
    $("#timeline-filter-off").addEventListener("click", () => this.setFilter("all"));
    this.showFilter();
    for (const type of ["focus", "visibilitychange"]) (type === "focus" ? window : document).addEventListener(type, () => this.markRead());
  }

  open(room) {
    this.room = room;
    room.detached = false;
    room.later = new Map();
    this.cache.clear();
    this.days.clear();
    this.active = null;
    this.newCount = 0;
    this.pin = null;
    this.resizes.disconnect(); // entries of the previous project are let go
    this.resizes.observe(this.el);
    this.el.replaceChildren(h("div", { class: "timeline-loading", text: t("timeline.loading") }));
    this.updateJump();
  }

  /** Called after `subscribed`: a fresh subscription loads the latest page. */
  async loadLatest() {
    const room = this.room;
    room.detached = false;
    room.later.clear();
    room.messages.clear();
    room.oldestSeq = null;
    room.hasMore = true;
    room.historyLoaded = false;
    await this.loadPage(null);
    if (room !== this.room) return;
    room.historyLoaded = true;
    const myRead = room.readCursors.get(room.you) ?? 0;
    const firstUnread = sortedMessages(room).find((m) => m.seq > myRead && m.kind === "chat" && m.author_id !== room.you);
    room.unreadFromSeq = firstUnread ? firstUnread.seq : null;
    this.render();
    if (room.unreadFromSeq !== null) {
      this.pinTo(this.unreadEl, 0);
      this.newCount = sortedMessages(room).filter((m) => m.seq >= room.unreadFromSeq && m.kind === "chat" && m.author_id !== room.you).length;
      if (this.atBottom()) this.newCount = 0;
      this.updateJump();
    } else this.scrollToBottom(false);
    this.fillViewport();
    this.markRead();
  }

  async loadPage(before) {
    const room = this.room;
    if (room.loadingHistory) return;
    room.loadingHistory = true;
    try {
      const frame = { type: "history", project_id: room.id, limit: PAGE };
      if (before !== null) frame.before = before;
      const answer = await this.conn.request(frame);
      if (room !== this.room) return;
      for (const message of answer.messages) if (!room.messages.has(message.id)) room.messages.set(message.id, message);
      room.hasMore = answer.has_more;
      if (answer.messages.length) room.oldestSeq = Math.min(room.oldestSeq ?? Infinity, answer.messages[0].seq);
    } catch (err) {
      if (err.code !== "disconnected") toastError(err);
    } finally {
      room.loadingHistory = false;
    }
  }

  async loadOlder() {
    const room = this.room;
    if (!room || !room.historyLoaded || !room.hasMore || room.loadingHistory || room.oldestSeq === null) return;
    await this.loadPage(room.oldestSeq);
    if (room !== this.room) return;
    // Where the reader is now (they may have scrolled while the page was asked for) stays put.
    const anchor = this.firstVisible();
    const offset = anchor ? anchor.getBoundingClientRect().top : 0;
    this.render();
    if (anchor && anchor.isConnected) this.placeScroll(this.el.scrollTop + anchor.getBoundingClientRect().top - offset);
    this.keepPinned();
  }

  fillViewport() {
    if (this.room?.hasMore && this.el.scrollHeight <= this.el.clientHeight + LOAD_OLDER_PX) {
      this.loadOlder().then(() => this.room?.hasMore && this.el.scrollHeight <= this.el.clientHeight && this.fillViewport());
    }
  }

  /** A sequenced message frame (new or updated), already checked against the cursor. */
  apply(frame) {
    const room = this.room;
    const message = frame.message;
    const isNew = !room.messages.has(message.id);
    if (room.detached && isNew) {
      // Past the end of an open window: kept for when the window reaches the latest.
      if (!room.later.has(message.id) && message.kind === "chat" && message.author_id !== room.you) {
        this.newCount += 1;
        this.updateJump();
      }
      room.later.set(message.id, message);
      if (message.client_txn_id && message.author_id === room.you) room.pending.delete(message.client_txn_id);
      return;
    }
    room.messages.set(message.id, message);
    // Replies quote what a message says now: an edit or a delete changes their quotes too.
    if (!isNew) {
      for (const reply of room.messages.values()) {
        if (reply.reply_to === message.id && reply.reply_excerpt) reply.reply_excerpt = excerptOf(message);
      }
    }
    if (message.client_txn_id && message.author_id === room.you) room.pending.delete(message.client_txn_id);
    if (!room.historyLoaded) return;
    const wasAtBottom = this.atBottom();
    const fromOthers = message.author_id !== room.you;
    if (isNew && fromOthers && message.kind === "chat" && room.unreadFromSeq === null && (!wasAtBottom || document.hidden)) {
      room.unreadFromSeq = message.seq;
    }
    if (isNew && !fromOthers) {
      room.unreadFromSeq = null;
      room.heldUnread = false; // writing here reads what is above
    }
    // An edit can add recipients and a delete cancels deliveries; neither sends delivery frames.
    if (!isNew && room.receiptsAsked.has(message.id)) this.askReceipts(message.id, true);
    this.render();
    if (isNew && (wasAtBottom || !fromOthers)) this.scrollToBottom(false);
    else if (isNew) {
      this.newCount += 1;
      this.updateJump();
    }
    this.markRead();
  }

  // -- rendering ------------------------------------------------------------------------------

  render() {
    const room = this.room;
    if (!room || !room.historyLoaded) return;
    const nodes = [];
    this.topEl.textContent = room.hasMore ? t("timeline.loadingOlder") : t("timeline.start");
    this.topEl.classList.toggle("has-more", room.hasMore);
    if (room.messages.size || room.hasMore) nodes.push(this.topEl);
    let prev = null;
    let marked = false;
    const shown = sortedMessages(room).filter((m) => this.shows(m));
    for (let i = 0; i < shown.length; i += 1) {
      const message = shown[i];
      const day = dayKey(message.created_at);
      const newDay = !prev || dayKey(prev.created_at) !== day;
      if (newDay) nodes.push(this.dayEl(message.created_at, day));
      // Before the first unread message shown (the filter may hide the first unread one).
      const unread = !marked && room.unreadFromSeq !== null && message.seq >= room.unreadFromSeq;
      if (unread) {
        marked = true;
        this.unreadEl.firstChild.textContent = t("timeline.unread");
        nodes.push(this.unreadEl);
      }
      // Consecutive tool activity (the same day, not across the unread marker) is one line.
      let end = i;
      while (message.kind === "tool" && shown[end + 1]?.kind === "tool" && dayKey(shown[end + 1].created_at) === day &&
        !(room.unreadFromSeq !== null && !marked && shown[end + 1].seq >= room.unreadFromSeq)) end += 1;
      if (end > i) {
        nodes.push(this.toolRunFor(shown.slice(i, end + 1)));
        prev = shown[end];
        i = end;
        continue;
      }
      const el = this.entryFor(message);
      el.classList.toggle("cont", !newDay && !unread && continues(prev, message));
      nodes.push(el);
      prev = message;
    }
    for (const [txn, pending] of room.pending) nodes.push(this.pendingFor(txn, pending));
    if (!nodes.length) nodes.push(h("div", { class: "timeline-empty", text: t("timeline.empty") }));
    reconcile(this.el, nodes);
    for (const node of nodes) this.resizes.observe(node);
    if (!this.active || !this.active.isConnected) {
      const entries = this.entries();
      if (entries.length) this.setActive(entries[entries.length - 1]);
    }
  }

  /** Whether the filter shows `message`: people only shows what people (not agents) wrote. */
  shows(message) {
    if (this.filter !== "people") return true;
    if (message.kind !== "chat" || message.author_id === null) return false;
    return member(this.room, message.author_id)?.kind !== "agent";
  }

  setFilter(filter) {
    if (filter === this.filter) return;
    this.filter = filter;
    local.set(FILTER_KEY, filter);
    this.showFilter();
    const atEnd = this.atBottom();
    this.render();
    if (atEnd) this.scrollToBottom(false);
    else this.updateJump();
  }

  showFilter() {
    const on = this.filter === "people";
    this.filterButton.setAttribute("aria-pressed", String(on));
    this.filterNote.hidden = !on;
  }

  /** Several tool entries in a row: one expandable line (who, how many, the last time), the
   * entries inside. Cached by its first message, so an open run stays open as it grows. */
  toolRunFor(run) {
    const key = `run:${run[0].id}`;
    let cached = this.cache.get(key);
    if (!cached) {
      const summary = h("summary", {});
      const body = h("div", { class: "tool-run-body" });
      cached = { el: h("details", { class: "tool-run" }, summary, body), version: "" };
      this.cache.set(key, cached);
    }
    const { el } = cached;
    const last = run[run.length - 1];
    el.dataset.seq = String(run[0].seq);
    el.dataset.id = key;
    const who = [...new Set(run.map((m) => authorName(this.room, m.author_id)))].join("、");
    const entries = run.map((m) => this.entryFor(m));
    const failed = entries.some((entry) => entry.querySelector(":scope > summary .badge-warn"));
    const version = `${who}|${run.length}|${last.id}|${failed}|${this.room.membersVersion}`;
    if (cached.version !== version) {
      cached.version = version;
      el.firstElementChild.replaceChildren(
        icon("tool"),
        h("span", { class: "tool-who", text: who }),
        h("span", { class: "tool-name", text: t("tool.run", { n: run.length }) }),
        failed ? h("span", { class: "badge badge-warn", text: t("tool.failed") }) : null,
        h("time", { dateTime: last.created_at, text: formatTime(last.created_at) }),
      );
    }
    reconcile(el.lastElementChild, entries);
    quiet(el.firstElementChild);
    return el;
  }

  dayEl(iso, key) {
    if (!this.days.has(key)) this.days.set(key, h("div", { class: "day-sep", attrs: { role: "separator" } }, h("span")));
    const el = this.days.get(key);
    el.firstChild.textContent = formatDay(iso);
    return el;
  }

  entryFor(message) {
    const room = this.room;
    const quote = message.reply_excerpt ? `${message.reply_excerpt.deleted ? "-" : ""}${message.reply_excerpt.excerpt}` : "";
    const version = `${room.membersVersion}|${room.project.state}|${message.edited_at}|${message.deleted}|${message.html}|${message.meta?.requirement_change ? 1 : 0}|${quote}|${JSON.stringify(message.reactions || [])}|${message.meta?.research ? JSON.stringify(message.meta.research) : ""}|${isOwner(room) ? 1 : 0}|${JSON.stringify(message.thread || null)}`;
    const cached = this.cache.get(message.id);
    if (cached && (cached.version === version || cached.el.classList.contains("editing"))) return cached.el;
    const el = renderMessage(room, message, { actions: this.actionsFor(message), reactions: this.reactionsFor(message) });
    quiet(el);
    if (cached && cached.el === this.active) {
      this.active = el; // the redrawn entry keeps the timeline's one Tab stop
      el.tabIndex = 0;
    }
    if (cached && cached.el.contains(document.activeElement)) {
      // ...and the focus, once the redraw put it in place (a reaction, an edit or a thread
      // reply on the focused message would otherwise drop the reader's focus to the page).
      queueMicrotask(() => {
        if (el.isConnected && !el.contains(document.activeElement)) el.focus({ preventScroll: true });
      });
    }
    this.cache.set(message.id, { el, version });
    const slot = el.querySelector(".msg-delivery");
    if (slot) {
      renderDelivery(slot, room, message.id);
      quiet(slot);
      this.observer.observe(el);
    }
    return el;
  }

  pendingFor(txn, pending) {
    const key = `p:${txn}`;
    const version = `${pending.failed || ""}`;
    const cached = this.cache.get(key);
    if (cached && cached.version === version) return cached.el;
    const fake = {
      id: key, seq: Number.MAX_SAFE_INTEGER, author_id: this.room.you, kind: "chat", body: pending.body,
      html: "", created_at: pending.createdAt, mentions: [], reply_excerpt: null,
    };
    const el = renderMessage(this.room, fake, { pending });
    el.querySelector(".msg-body").textContent = pending.body; // not rendered yet: shown as typed
    this.cache.set(key, { el, version });
    return el;
  }

  actionsFor(message) {
    const room = this.room;
    if (message.kind === "system") {
      if (!mayPost(room.project)) return [];
      const tripped = message.meta?.brake && message.meta.brake !== "cleared";
      if (tripped) return [{ id: "clear-brake", label: t("brake.clear"), run: () => this.actions.clearBrake() }];
      // A failure notice lists the failed deliveries: a person asks for them again (once each).
      const failed = Array.isArray(message.meta?.retry) ? message.meta.retry : [];
      return failed.length && room.you ? [{ id: "retry", label: t("delivery.retry"), run: () => this.actions.retryDeliveries(failed) }] : [];
    }
    // Replying, editing, deleting and marking all post into the project: where the server does
    // not offer this viewer `post` (archived, trashed, stopping …), none of them is offered.
    if (message.kind !== "chat" || !room.you) return [];
    // Reading needs no `post`: the link, and the menu (mark as unread, message info).
    const reading = [
      { id: "link", icon: "link", label: t("action.copyLink"), run: () => copyLink(room, message) },
      { id: "more", icon: "more", label: t("action.more"), run: (event) => this.moreMenu(event.currentTarget, message) },
    ];
    if (!mayPost(room.project)) return reading;
    const mine = message.author_id === room.you;
    const list = [{ id: "reply", icon: "reply", label: t("action.reply"), run: () => this.actions.reply(message) }];
    if (!mine && message.author_id !== null) list.push({ id: "mention", icon: "at", label: t("action.mentionAuthor"), run: () => this.actions.mention(message.author_id) });
    if (mine) {
      list.push({ id: "edit", icon: "edit", label: t("action.edit"), run: () => this.edit(message.id) });
      list.push({ id: "delete", icon: "trash", label: t("action.delete"), danger: true, run: () => this.actions.remove(message) });
    }
    if (mayChange(room)) list.push({ id: "requirement", icon: "flag", label: t("action.requirementChange"), run: () => this.actions.markRequirement(message) });
    if (this.mayReact()) list.splice(1, 0, { id: "react", icon: "smile", label: t("react.add"), run: (event) => openPicker(event.currentTarget, room, message, (emoji, remove) => this.react(message, emoji, remove)) });
    return [...list, ...reading];
  }

  /** The message's menu: mark as unread, message info (edits, versions, deliveries). */
  moreMenu(anchor, message) {
    openMenu(anchor, [
      { id: "unread", icon: "dot", label: t("action.markUnread"), run: () => this.markUnread(message) },
      { id: "info", icon: "info", label: t("action.info"), hint: message.edited_at ? t("msg.edited") : "", run: () => openMessageInfo(this.room, message) },
      { id: "copy-link", icon: "link", label: t("action.copyLink"), run: () => copyLink(this.room, message) },
    ], { label: t("action.more") });
  }

  mayReact() {
    const room = this.room;
    return Boolean(room?.you) && mayPost(room.project); // the server's check_posting, as offered
  }

  reactionsFor(message) {
    if (!["chat", "system"].includes(message.kind) || message.deleted) return null;
    if (!this.mayReact()) return { toggle: null, pick: null };
    return {
      toggle: (emoji, remove) => this.react(message, emoji, remove),
      pick: (anchor) => openPicker(anchor, this.room, message, (emoji, remove) => this.react(message, emoji, remove)),
    };
  }

  react(message, emoji, remove) {
    return sendReaction(this.conn, this.room, message, emoji, remove);
  }

  /** Move my read cursor back to just before `message`: it and what follows count as unread
   * (here and in the projects column) until I read them again — after leaving the project or
   * sending; staying at the bottom does not mark them read at once. */
  async markUnread(message) {
    const room = this.room;
    const seq = Math.max(0, message.seq - 1);
    try {
      await this.conn.request({ type: "read", project_id: room.id, seq, unread: true });
    } catch (err) {
      toastError(err);
      return;
    }
    clearTimeout(this.readTimer);
    this.readTimer = null;
    this.pendingRead = null;
    room.readCursors.set(room.you, seq);
    room.heldUnread = true;
    room.unreadFromSeq = message.seq;
    this.render();
    bus.emit("read", room);
    toast(t("action.markedUnread"));
  }

  editLast() {
    const room = this.room;
    const last = sortedMessages(room).reverse().find((m) => m.author_id === room.you && m.kind === "chat" && !m.deleted);
    if (last && mayPost(room.project)) {
      this.cache.get(last.id)?.el.scrollIntoView({ block: "nearest" });
      this.edit(last.id);
    }
  }

  edit(messageId) {
    const cached = this.cache.get(messageId);
    const message = this.room.messages.get(messageId);
    if (!cached || !message) return;
    startEdit(cached.el, message, this.conn, this.room, () => {
      this.cache.delete(messageId);
      this.render();
      this.cache.get(messageId)?.el.focus();
    });
  }

  // -- receipts ---------------------------------------------------------------------------------

  onVisible(entries) {
    for (const entry of entries) {
      if (!entry.isIntersecting) continue;
      const id = Number(entry.target.dataset.id);
      this.observer.unobserve(entry.target);
      this.askReceipts(id);
    }
  }

  async askReceipts(messageId, force = false) {
    const room = this.room;
    if (!force && room.receiptsAsked.has(messageId)) return;
    room.receiptsAsked.add(messageId);
    this.pendingReceipts.set(messageId, []);
    try {
      const answer = await this.conn.request({ type: "receipts", project_id: room.id, message_id: messageId });
      if (room !== this.room) return;
      setReceipts(room, messageId, answer.deliveries);
      for (const frame of this.pendingReceipts.get(messageId) || []) applyDelivery(room, frame);
      this.refreshDelivery(messageId);
    } catch {
      room.receiptsAsked.delete(messageId); // asked again when it next comes into view
    } finally {
      this.pendingReceipts.delete(messageId);
    }
  }

  onDelivery(frame) {
    const room = this.room;
    if (this.pendingReceipts.has(frame.message_id)) this.pendingReceipts.get(frame.message_id).push(frame);
    applyDelivery(room, frame);
    this.refreshDelivery(frame.message_id);
  }

  /** After a resume: delivery frames are not replayed, so ask again for rows still open. */
  refreshOpenReceipts() {
    for (const [messageId, rows] of this.room.receipts) {
      if ([...rows.values()].some((row) => OPEN_STATES.has(row.state))) this.askReceipts(messageId, true);
    }
  }

  refreshDelivery(messageId) {
    const entry = this.cache.get(messageId)?.el;
    const slot = entry?.querySelector(".msg-delivery");
    if (!slot) return;
    renderDelivery(slot, this.room, messageId);
    if (entry !== this.entered) quiet(slot);
  }

  // -- scrolling, reading, keyboard --------------------------------------------------------------

  atBottom() {
    return this.el.scrollHeight - this.el.scrollTop - this.el.clientHeight < NEAR_BOTTOM_PX;
  }

  scrollToBottom(focusLast) {
    if (this.room?.detached) {
      this.loadLatest().then(() => this.scrollToBottom(focusLast));
      return;
    }
    this.pin = "bottom";
    this.placeScroll(this.el.scrollHeight);
    this.newCount = 0;
    this.updateJump();
    if (focusLast) {
      const entries = this.entries();
      entries[entries.length - 1]?.focus();
    }
  }

  /** Set scrollTop and remember it, so `onScroll` can tell it from the reader's own scrolling. */
  placeScroll(top) {
    this.el.scrollTop = top;
    this.placedTop = this.el.scrollTop;
  }

  /** Scroll so `el` is `offset` px below the timeline's top, and keep it there. */
  pinTo(el, offset) {
    this.pin = { el, offset };
    this.placeScroll(this.el.scrollTop + el.getBoundingClientRect().top - this.el.getBoundingClientRect().top - offset);
    if (this.atBottom()) this.pin = "bottom";
  }

  /** Put the view back where it is pinned after something changed size. */
  keepPinned() {
    const pin = this.pin;
    if (!pin || !this.room?.historyLoaded) return;
    if (pin === "bottom") {
      if (this.room.detached) return;
      if (this.el.scrollHeight - this.el.scrollTop - this.el.clientHeight > 0.5) this.placeScroll(this.el.scrollHeight);
    } else if (!pin.el.isConnected) this.pin = null;
    else {
      const drift = pin.el.getBoundingClientRect().top - this.el.getBoundingClientRect().top - pin.offset;
      if (Math.abs(drift) > 0.5) this.placeScroll(this.el.scrollTop + drift);
    }
    this.updateJump();
  }

  onScroll() {
    // The reader's own scroll (not one this code placed) unpins: at the bottom it pins there.
    if (this.placedTop === null || Math.abs(this.el.scrollTop - this.placedTop) > 1) {
      this.placedTop = null;
      const rest = this.el.scrollHeight - this.el.scrollTop - this.el.clientHeight;
      this.pin = rest < PINNED_PX && !this.room?.detached ? "bottom" : null;
    }
    if (this.el.scrollTop < LOAD_OLDER_PX) this.loadOlder();
    if (this.room?.detached && this.el.scrollHeight - this.el.scrollTop - this.el.clientHeight < LOAD_OLDER_PX) this.loadNewer();
    if (this.atBottom()) {
      this.newCount = 0;
      this.markRead();
    }
    this.updateJump();
  }

  updateJump() {
    const show = Boolean(this.room?.historyLoaded) && (Boolean(this.room.detached) || !this.atBottom());
    this.jump.hidden = !show;
    this.jump.lastChild.textContent = this.newCount ? t("timeline.newMessages", { n: this.newCount }) : t("timeline.latest");
  }

  markRead() {
    const room = this.room;
    if (!room || !room.historyLoaded || room.detached || room.heldUnread || document.hidden || !document.hasFocus() || !this.atBottom()) return;
    const seq = this.conn.lastSeq ?? 0;
    if (seq > (room.readCursors.get(room.you) ?? 0)) {
      room.readCursors.set(room.you, seq);
      this.sendRead(room.id, seq);
      bus.emit("read", room);
    }
  }

  flushRead() {
    clearTimeout(this.readTimer);
    this.readTimer = null;
    const pending = this.pendingRead;
    this.pendingRead = null;
    if (pending) this.conn.raw({ type: "read", project_id: pending.projectId, seq: pending.seq });
  }

  /** Throttled: in a busy room the cursor moves with every message, the server needs the last. */
  sendRead(projectId, seq) {
    if (this.readTimer) {
      this.pendingRead = { projectId, seq };
      return;
    }
    this.conn.raw({ type: "read", project_id: projectId, seq });
    this.readTimer = setTimeout(() => {
      this.readTimer = null;
      const pending = this.pendingRead;
      this.pendingRead = null;
      if (pending) this.sendRead(pending.projectId, pending.seq);
    }, READ_EVERY_MS);
  }

  firstVisible() {
    const top = this.el.getBoundingClientRect().top;
    return this.entries().find((el) => el.getBoundingClientRect().bottom > top) || null;
  }

  entries() {
    return [...this.el.querySelectorAll(":scope > [data-seq]")];
  }

  /** The one entry in the Tab order (roving tabindex). */
  setActive(el) {
    if (this.active === el) return;
    if (this.active) this.active.tabIndex = -1;
    if (this.entered && this.entered !== el) this.leave();
    this.active = el;
    el.tabIndex = 0;
  }

  /** Enter an entry: its controls (actions, links, reactions, delivery details) join the Tab
   * order until focus leaves it or Escape; the first one gets focus. */
  enter(entry) {
    this.entered = entry;
    const inner = [...entry.querySelectorAll(INNER)].filter((node) => node !== entry);
    for (const node of inner) node.tabIndex = 0;
    // Its actions first (the bar is drawn over the bubble), else the first control shown.
    const first = entry.querySelector(".msg-actions button") || inner.find((node) => node.getClientRects().length);
    if (first instanceof HTMLElement) first.focus();
  }

  leave() {
    const entry = this.entered;
    this.entered = null;
    if (entry) quiet(entry);
  }

  onKey(event) {
    const entry = event.target.closest("#timeline > [data-seq]");
    if (!entry || event.target.closest("textarea, input")) return;
    if (event.key === "Escape" && event.target !== entry) {
      this.leave();
      entry.focus();
      return;
    }
    if (event.target !== entry || event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return;
    const entries = this.entries();
    const index = entries.indexOf(entry);
    const keys = { ArrowUp: index - 1, k: index - 1, ArrowDown: index + 1, j: index + 1, Home: 0, End: entries.length - 1 };
    const go = keys[event.key];
    if (go !== undefined) {
      event.preventDefault();
      const target = entries[Math.max(0, Math.min(go, entries.length - 1))];
      if (target) {
        target.focus();
        target.scrollIntoView({ block: "nearest" });
      }
      if (go < 0) this.loadOlder();
      return;
    }
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      if (entry instanceof HTMLDetailsElement) entry.open = !entry.open; // tool activity
      else if (event.key === "Enter") this.enter(entry);
      return;
    }
    // Single keys on the focused message: r reply, e edit (my own), + react, c copy its link.
    const message = this.room?.messages.get(Number(entry.dataset.id));
    if (!message || message.kind !== "chat") return;
    const action = { r: "reply", e: "edit", "+": "react", c: "link" }[event.key];
    const found = action && this.actionsFor(message).find((a) => a.id === action);
    if (!found) return;
    event.preventDefault();
    const anchor = entry.querySelector(`[data-action="${action}"]`) || entry;
    found.run({ currentTarget: anchor });
  }

  /**
   * Show a message: scrolled to the middle, flashed and focused, with `terms` marked in it. A
   * message not loaded is found by its seq (given, or read from the server) and opened in a
   * window around it. `gone` is the string key said when it cannot be shown.
   */
  async jumpTo(messageId, { seq = null, terms = [], gone = "timeline.quotedGone" } = {}) {
    const room = this.room;
    if (!room) return false;
    if (!room.messages.has(messageId)) {
      if (seq === null) {
        try {
          const detail = await get(`/api/messages/${messageId}`);
          if (detail.project_id !== room.id) throw new Error("another project");
          seq = detail.seq;
        } catch {
          toast(t(gone));
          return false;
        }
      }
      if (room !== this.room) return false;
      await this.openAround(seq);
      if (room !== this.room) return false;
    }
    const el = this.cache.get(messageId)?.el;
    if (!el) {
      toast(t(gone));
      return false;
    }
    clearHighlights(this.el);
    const body = el.querySelector(".msg-body") || el;
    const mark = highlightIn(body, terms);
    el.scrollIntoView({ block: "center" });
    mark?.scrollIntoView({ block: "nearest" });
    this.pinTo(el, el.getBoundingClientRect().top - this.el.getBoundingClientRect().top);
    el.classList.add("flash");
    setTimeout(() => el.classList.remove("flash"), 1600);
    el.focus({ preventScroll: true });
    return true;
  }

  /** Replace what is loaded with a window around `seq`; new messages wait until it meets them. */
  async openAround(seq) {
    const room = this.room;
    room.detached = true;
    room.loadingHistory = true;
    let answer;
    try {
      answer = await get(`/api/projects/${room.id}/messages?around=${seq}&limit=${PAGE}`);
    } catch (err) {
      toastError(err);
      if (room === this.room) this.loadLatest();
      return;
    } finally {
      room.loadingHistory = false;
    }
    if (room !== this.room) return;
    room.messages.clear();
    for (const message of answer.messages) room.messages.set(message.id, message);
    room.oldestSeq = answer.messages.length ? answer.messages[0].seq : null;
    room.hasMore = answer.has_more;
    room.unreadFromSeq = null;
    room.historyLoaded = true;
    if (!answer.has_newer) this.attach();
    this.render();
    this.updateJump();
    // A short window cannot be scrolled down to ask for more: ask now.
    if (room.detached && this.el.scrollHeight <= this.el.clientHeight + NEAR_BOTTOM_PX) this.loadNewer();
  }

  /** The page after the window; when it reaches the latest, the window becomes the timeline. */
  async loadNewer() {
    const room = this.room;
    if (!room?.detached || room.loadingHistory) return;
    const newest = sortedMessages(room).at(-1);
    if (!newest) return;
    room.loadingHistory = true;
    let answer;
    try {
      answer = await get(`/api/projects/${room.id}/messages?after=${newest.seq}&limit=${PAGE}`);
    } catch (err) {
      toastError(err);
      return;
    } finally {
      room.loadingHistory = false;
    }
    if (room !== this.room || !room.detached) return;
    for (const message of answer.messages) if (!room.messages.has(message.id)) room.messages.set(message.id, message);
    if (!answer.has_newer) this.attach();
    this.render();
    this.updateJump();
  }

  attach() {
    const room = this.room;
    for (const [id, message] of room.later) room.messages.set(id, message);
    room.later.clear();
    room.detached = false;
    this.newCount = 0;
  }
}

/** The message's permalink (it opens the message from a fresh page too) to the clipboard; where
 * the browser keeps the clipboard from the page (plain http off localhost) it is shown to copy. */
async function copyLink(room, message) {
  const url = `${location.origin}${location.pathname}#/p/${room.id}/m/${message.id}`;
  try {
    await navigator.clipboard.writeText(url);
    toast(t("action.linkCopied"));
  } catch {
    toast(url, { timeout: 15000 });
  }
}

/** Take an entry's controls out of the Tab order (the timeline is one Tab stop). */
function quiet(root) {
  for (const node of root.querySelectorAll(INNER)) node.tabIndex = -1;
}

function continues(prev, message) {
  return Boolean(
    prev && prev.kind === "chat" && message.kind === "chat" && prev.author_id === message.author_id &&
      new Date(message.created_at).getTime() - new Date(prev.created_at).getTime() < GROUP_GAP_MS,
  );
}

/** Make `parent`'s children exactly `nodes`, moving as few as possible (focus survives). */
function reconcile(parent, nodes) {
  const wanted = new Set(nodes);
  for (const child of [...parent.children]) if (!wanted.has(child)) child.remove();
  let ref = parent.firstChild;
  for (const node of nodes) {
    if (node === ref) ref = ref.nextSibling;
    else parent.insertBefore(node, ref);
  }
}
