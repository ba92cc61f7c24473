// The thread pane: a root message and its replies (docs/protocol.md, "Threads") beside the
// timeline on wide screens, over it on narrow ones, with its own composer (the Composer class,
// IME-safe like the timeline's, with "thread-" ids) and a follow / unfollow button.
//
// The replies come from GET /api/messages/{id}/thread (paged, oldest first); new ones from the
// socket's `message` frames whose `reply_to` is a message of the open thread; the root's count
// from its `message_updated` frames.

import { get, put } from "./api.js";
import { Composer } from "./composer.js";
import { $, h, icon } from "./dom.js";
import { t } from "./i18n.js";
import { renderMessage } from "./message.js";
import { toastError } from "./ui.js";

const PAGE = 50;

function composerForm() {
  const p = "thread-";
  return h(
    "form",
    { id: `${p}composer`, class: "composer thread-composer", autocomplete: "off", noValidate: true },
    h("div", { id: `${p}quote-bar`, class: "quote-bar", hidden: true },
      h("span", { class: "quote-label" }), h("span", { class: "quote-text" }),
      h("button", { type: "button", id: `${p}quote-cancel`, class: "icon-btn", hidden: true })),
    h("div", { id: `${p}recipients`, class: "recipients", attrs: { "aria-live": "polite" }, hidden: true }),
    h("ul", { id: `${p}diagnostics`, class: "diagnostics", attrs: { "aria-live": "polite" }, hidden: true }),
    h("ul", { id: `${p}picker`, class: "picker", attrs: { role: "listbox", "aria-label": t("picker.label") }, hidden: true }),
    h("div", { class: "composer-row" },
      h("label", { class: "visually-hidden", attrs: { for: `${p}draft` }, text: t("thread.placeholder") }),
      h("textarea", { id: `${p}draft`, rows: 1, placeholder: t("thread.placeholder"), attrs: { "aria-autocomplete": "list", "aria-controls": `${p}picker` } }),
      h("button", { type: "submit", id: `${p}send`, class: "btn btn-primary send", text: t("composer.send") })),
    h("p", { id: `${p}composer-note`, class: "composer-note", hidden: true }),
  ); // prettier-ignore
}

export class ThreadPane {
  constructor(conn, { onSent }) {
    this.conn = conn;
    this.onSent = onSent;
    this.room = null;
    this.rootId = null;
    this.ids = new Set(); // the root and the replies shown: a new message replying to one joins
    this.replies = [];
    this.hasMore = false;
    this.following = false;
    this.sent = new Set(); // this composer's sends: a refused one comes back here
    this.el = null; // built when a thread is first opened (no second composer in the page before)
    this.composer = null;
  }

  build() {
    this.list = h("div", { class: "thread-list", attrs: { role: "log", "aria-live": "polite" } });
    this.older = h("button", { type: "button", class: "btn btn-small btn-ghost thread-older", text: t("thread.older"), hidden: true, on: { click: () => this.loadOlder() } });
    this.follow = h("button", { type: "button", class: "btn btn-small thread-follow", attrs: { "aria-pressed": "false" }, on: { click: () => this.toggleFollow() } });
    const close = h("button", { type: "button", class: "icon-btn thread-close", attrs: { "aria-label": t("thread.close") }, on: { click: () => this.close() } }, icon("close"));
    const form = composerForm();
    this.el = h(
      "aside",
      { id: "thread-pane", class: "thread-pane", hidden: true, attrs: { "aria-labelledby": "thread-heading" } },
      h("header", { class: "thread-head" }, h("h2", { id: "thread-heading", text: t("thread.title") }), this.follow, close),
      h("div", { class: "thread-scroll" }, this.older, this.list),
      form,
    );
    document.body.append(this.el);
    this.el.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && !event.defaultPrevented) this.close();
    });
    const sent = (txn) => {
      this.sent.add(txn);
      this.onSent?.();
    };
    this.composer = new Composer(form, this.conn, { prefix: "thread-", thread: true, onSent: sent, onEditLast: () => {} });
  }

  /** Whether the send `txn` was written in this pane's composer. */
  wrote(txn) {
    return this.sent.has(txn);
  }

  get isOpen() {
    return Boolean(this.el) && !this.el.hidden;
  }

  async open(room, messageId) {
    this.room = room;
    let page;
    try {
      page = await get(`/api/messages/${messageId}/thread?limit=${PAGE}`);
    } catch (err) {
      toastError(err);
      return;
    }
    if (!this.el) this.build();
    this.rootId = page.root_id;
    this.root = page.root;
    this.replies = page.replies;
    this.hasMore = page.has_more;
    this.following = page.following;
    this.ids = new Set([page.root_id, ...page.replies.map((m) => m.id)]);
    this.el.hidden = false;
    document.body.classList.add("thread-open");
    this.composer.setThread(page.root);
    this.composer.open(room);
    this.render();
    this.scrollToEnd();
    this.composer.input.focus();
  }

  close() {
    if (!this.isOpen) return;
    this.el.hidden = true;
    document.body.classList.remove("thread-open");
    const opener = document.querySelector(`#timeline [data-thread-open="${this.rootId}"]`);
    this.rootId = null;
    this.ids = new Set();
    if (opener instanceof HTMLElement) opener.focus({ preventScroll: true });
  }

  async loadOlder() {
    const first = this.replies[0];
    if (!first) return;
    const page = await get(`/api/messages/${this.rootId}/thread?limit=${PAGE}&before=${first.id}`);
    this.replies = [...page.replies, ...this.replies];
    for (const m of page.replies) this.ids.add(m.id);
    this.hasMore = page.has_more;
    this.render();
  }

  async toggleFollow() {
    try {
      const answer = await put(`/api/messages/${this.rootId}/thread/follow`, { following: !this.following });
      this.following = answer.following;
      this.renderFollow();
    } catch (err) {
      toastError(err);
    }
  }

  /** A `message` or `message_updated` frame of the open project. */
  apply(frame) {
    if (!this.isOpen || frame.project_id !== this.room?.id) return;
    const message = frame.message;
    if (message.id === this.rootId) {
      this.root = message;
      this.render();
      return;
    }
    const at = this.replies.findIndex((m) => m.id === message.id);
    if (at >= 0) this.replies[at] = message;
    else if (message.reply_to !== null && this.ids.has(message.reply_to)) {
      this.replies.push(message);
      this.ids.add(message.id);
    } else return;
    const end = this.atEnd();
    this.render();
    if (end) this.scrollToEnd();
  }

  render() {
    if (!this.root) return;
    const room = this.room;
    const items = [renderMessage(room, this.root), h("div", { class: "thread-divider", text: this.root.thread?.replies ? t("thread.replies", { n: this.root.thread.replies }) : t("thread.empty") })];
    // A reply to the root needs no quote of it here: the root heads the pane.
    for (const m of this.replies) items.push(renderMessage(room, m.reply_to === this.rootId ? { ...m, reply_excerpt: null } : m));
    this.list.replaceChildren(...items);
    this.older.hidden = !this.hasMore;
    this.renderFollow();
  }

  renderFollow() {
    this.follow.textContent = this.following ? t("thread.unfollow") : t("thread.follow");
    this.follow.setAttribute("aria-pressed", String(this.following));
    this.follow.classList.toggle("is-following", this.following);
  }

  atEnd() {
    const scroller = $(".thread-scroll", this.el);
    return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 40;
  }

  scrollToEnd() {
    const scroller = $(".thread-scroll", this.el);
    scroller.scrollTop = scroller.scrollHeight;
  }
}
