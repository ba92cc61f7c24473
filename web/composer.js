// The composer: Enter sends, Shift+Enter adds a line, IME composition never sends; `@`/`＠`
// opens the member picker; recipients, "将触达 N 位 AI 成员" and the diagnostics with their fixes
// come from the server's `preview` answer (asked a moment after typing stops; an answer for an
// older draft is ignored), and a draft the server would refuse is not sent; a quote bar for
// replies; the draft is kept per project.

import { AttachTray } from "./attachments.js";
import { $, debounce, local } from "./dom.js";
import { t } from "./i18n.js";
import { isComposing, isSubmitKey, trackComposition } from "./ime.js";
import { excerptOf, plainText } from "./message.js";
import { Picker, pickerItems } from "./picker.js";
import { isBlocked, renderDiagnostics, renderRecipients, withLocalSpans } from "./reach.js";
import { app, member, mayPost } from "./store.js";

const TYPING_EVERY_MS = 3000;
const PREVIEW_AFTER_MS = 150;
// An at-sign may open the picker unless it continues an ASCII word, a path or an email.
const NO_PICKER_BEFORE = /[A-Za-z0-9_.\-+/%@＠]/;
// Whitespace as shared/mentions/SPEC.md §1 spells it, not JS `\s` (which takes U+FEFF, an
// ordinary character there, and leaves out U+0085). tests/test_web_facts.py pins these classes.
const WHITESPACE = /[\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/;
// What ends a name after an at-sign (shared/mentions/SPEC.md §4, less `.:!?`): the picker closes.
const NAME_END = /[,;)\]}>"'*~([{<（［｛〈《「『【〔〖“‘）］｝〉》」』】〕〗”’，。、；：！？…—～]/;
// What may stand before an at-sign that starts a mention (SPEC §3).
const BOUNDARY_BEFORE = /[\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000([{<"'*~,;（［｛〈《「『【〔〖“‘）］｝〉》」』】〕〗”’，。、；：！？…—～]/;

export class Composer {
  /** `prefix`: the ids of this composer's parts start with it (a second composer on the page,
   * the thread pane's: "thread-"). `thread`: that composer replies in a thread; its drafts are
   * kept apart from the timeline's and each send replies to the thread (see setThread). */
  constructor(form, conn, { onSent, onEditLast, prefix = "", thread = false }) {
    this.form = form;
    this.conn = conn;
    this.onSent = onSent;
    this.onEditLast = onEditLast;
    this.prefix = prefix;
    this.thread = thread;
    this.fixedReply = null; // the thread's root, in a thread composer
    this.input = this.part("draft");
    this.room = null;
    this.chips = []; // [{id, token}] picked from the picker or the avatar menu
    this.replyTo = null; // {id, author_id, excerpt}
    this.answer = null; // {key, preview}: the server's preview of the draft `key`
    this.asking = null; // {key, promise}: the preview request in flight
    this.sending = false;
    this.askPreview = debounce(() => this.previewOf(this.draftState()), PREVIEW_AFTER_MS);
    this.ime = trackComposition(this.input);
    this.picker = new Picker(this.part("picker"), this.input, (item) => this.pickItem(item));
    this.mentionStart = null;
    this.unmatched = null; // "@zzz": Enter was pressed while the picker matched nobody
    this.lastTyping = 0;
    this.saveDraft = debounce(() => this.storeDraft(), 300);
    this.input.addEventListener("input", () => this.onInput());
    this.input.addEventListener("keydown", (event) => this.onKey(event));
    this.input.addEventListener("compositionend", () => this.onInput());
    this.input.addEventListener("blur", () => {
      setTimeout(() => document.activeElement !== this.input && this.picker.close(), 0);
      this.typing(false);
    });
    this.input.addEventListener("click", () => this.updatePicker());
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit(false);
    });
    this.part("quote-cancel").addEventListener("click", () => this.setReply(null));
    this.tray = new AttachTray(form, this.input, {
      roomId: () => this.room?.id,
      onChange: () => this.onFiles(),
      // Files dropped anywhere on the timeline go to the timeline's composer, not the thread's.
      dropZones: thread ? [] : [$(".timeline-wrap")],
    });
  }

  /** One part of this composer's form, by its id without the prefix. */
  part(name) {
    return $(`#${this.prefix}${name}`, this.form);
  }

  /** A thread composer: every send replies to `root` (null: no thread open). */
  setThread(root) {
    this.fixedReply = root ? { id: root.id, author_id: root.author_id, excerpt: "" } : null;
    this.replyTo = this.fixedReply;
    this.renderQuote();
  }

  /** The tray's files changed: a note while uploads run, and the send button follows. */
  onFiles() {
    const note = this.part("composer-note");
    if (this.tray.busy()) {
      note.textContent = t("attach.waitUploads");
      note.hidden = false;
    } else if (note.textContent === t("attach.waitUploads")) {
      note.textContent = "";
      note.hidden = true;
    }
  }

  open(room) {
    if (this.room) this.saveDraft.flush();
    if (this.room && this.room.id !== room?.id) this.tray.clear(); // uploads belong to a project
    this.room = room;
    const draft = local.get(this.draftKey(), null);
    this.input.value = draft?.text || "";
    this.chips = draft?.chips || [];
    this.replyTo = this.thread ? this.fixedReply : draft?.replyTo || null;
    this.unmatched = null;
    this.picker.close();
    this.refresh();
    this.autosize();
  }

  draftKey() {
    const key = `room.draft.${app.identity?.user_id}.${this.room?.id}`;
    return this.thread ? `${key}.thread.${this.fixedReply?.id}` : key;
  }

  storeDraft() {
    if (!this.room) return;
    const text = this.input.value;
    const empty = !text && (this.thread || !this.replyTo);
    local.set(this.draftKey(), empty ? null : { text, chips: this.chips, replyTo: this.replyTo });
  }

  /** Re-render everything that depends on the room (members, state, language). */
  refresh() {
    if (!this.room) return;
    const state = this.room.project.state;
    const mayPostHere = mayPost(this.room.project);
    const open = mayPostHere && Boolean(this.room.you);
    this.input.disabled = !open;
    this.tray.disabled = !open;
    this.part("send").disabled = !open;
    const note = this.part("composer-note");
    if (!mayPostHere) note.textContent = t(`composerNote.${state}`);
    else note.textContent = state === "paused" ? t("composer.pausedNote") : "";
    note.hidden = !note.textContent;
    this.renderQuote();
    this.answer = null; // members or state changed: ask again
    this.preview();
  }

  // -- input ------------------------------------------------------------------------------------

  onInput() {
    this.unmatched = null;
    this.autosize();
    this.chips = this.chips.filter((chip) => this.input.value.includes(chip.token));
    this.updatePicker();
    this.preview();
    this.saveDraft();
    this.typing(Boolean(this.input.value.trim()));
  }

  autosize() {
    this.input.style.height = "auto"; // CSSOM, allowed by the CSP
    this.input.style.height = `${Math.min(this.input.scrollHeight + 2, Math.round(window.innerHeight * 0.4))}px`;
  }

  onKey(event) {
    const composing = isComposing(event, this.ime);
    if (this.picker.isOpen && !composing) {
      if (event.key === "ArrowDown" || event.key === "ArrowUp") {
        event.preventDefault();
        this.picker.move(event.key === "ArrowDown" ? 1 : -1);
        return;
      }
      if ((event.key === "Enter" && !event.shiftKey) || event.key === "Tab") {
        if (this.picker.items.length) {
          event.preventDefault();
          this.picker.pick();
          return;
        }
        if (event.key === "Enter") {
          // "没有匹配的成员": this Enter does not send (the @word names nobody, and the message
          // would go to the lead by default). Say so; the next Enter sends it as it is.
          event.preventDefault();
          this.unmatched = this.picker.query;
          this.picker.close();
          this.preview();
          return;
        }
      }
      if (event.key === "Escape") {
        event.preventDefault();
        this.picker.close();
        return;
      }
    }
    if (event.key === "ArrowUp" && !composing && !this.input.value && !event.shiftKey) {
      event.preventDefault();
      this.onEditLast(); // like most chat apps: ↑ in an empty composer edits my last message
      return;
    }
    if (event.key === "Escape" && !composing && this.replyTo) {
      event.preventDefault();
      this.setReply(null);
      return;
    }
    if (isSubmitKey(event, this.ime)) {
      event.preventDefault();
      this.submit(false);
    }
  }

  /** Open, filter or close the picker from the text before the caret. */
  updatePicker() {
    const text = this.input.value;
    const caret = this.input.selectionStart;
    if (!this.room || caret !== this.input.selectionEnd) {
      this.picker.close();
      return;
    }
    const found = mentionQuery(text, caret);
    if (found) {
      this.mentionStart = found.start;
      this.picker.show(this.room, found.query);
      return;
    }
    // `@前端 小林` typed without brackets: a name with a space in it. Offered only while some
    // member's name starts with what was typed; otherwise the space ended the mention.
    const spaced = spacedMentionQuery(text, caret);
    if (spaced && pickerItems(this.room, spaced.query).length) {
      this.mentionStart = spaced.start;
      this.picker.show(this.room, spaced.query);
      return;
    }
    this.picker.close();
  }

  pickItem(item) {
    const text = this.input.value;
    const caret = this.input.selectionStart;
    const start = this.mentionStart ?? caret;
    const token = item.kind === "all" ? "@所有人" : tokenFor(item.member);
    // A mention must follow a space or punctuation (SPEC §3): add one after CJK text.
    const before = start > 0 && !BOUNDARY_BEFORE.test(text[start - 1]) ? " " : "";
    const after = text[caret] && WHITESPACE.test(text[caret]) ? "" : " ";
    this.replace(start, caret, `${before}${token}${after}`);
    if (item.kind === "member") this.addChip(item.member.id, token);
    this.mentionStart = null;
  }

  /** `@ 他` from the member menu: insert a mention at the caret, keep the draft, never send. */
  insertMention(memberId) {
    const m = member(this.room, memberId);
    if (!m || this.input.disabled) return;
    const text = this.input.value;
    const at = document.activeElement === this.input ? this.input.selectionStart : text.length;
    const token = tokenFor(m);
    const before = at > 0 && !WHITESPACE.test(text[at - 1]) ? " " : "";
    const after = text[at] && WHITESPACE.test(text[at]) ? "" : " ";
    this.replace(at, at, `${before}${token}${after}`);
    this.addChip(m.id, token);
  }

  addChip(id, token) {
    if (!this.chips.some((chip) => chip.id === id)) this.chips.push({ id, token });
    this.preview();
    this.storeDraft();
  }

  replace(start, end, insert) {
    this.input.focus();
    this.input.setRangeText(insert, start, end, "end");
    this.onInput();
  }

  setReply(message) {
    this.replyTo = message ? { id: message.id, author_id: message.author_id, excerpt: plainText(message.html) } : null;
    this.renderQuote();
    this.storeDraft();
    this.input.focus();
  }

  renderQuote() {
    const bar = this.part("quote-bar");
    bar.hidden = !this.replyTo || this.thread; // in a thread the pane says what is answered
    if (bar.hidden) return;
    const who = member(this.room, this.replyTo.author_id);
    $(".quote-label", bar).textContent = t("composer.replyingTo", { name: who ? who.display_name : `#${this.replyTo.author_id}` });
    const quoted = this.room?.messages.get(this.replyTo.id);
    if (quoted) this.replyTo.excerpt = excerptOf(quoted).excerpt; // edited meanwhile, or deleted
    $(".quote-text", bar).textContent = quoted?.deleted ? t("msg.quoteDeleted") : this.replyTo.excerpt;
  }

  // -- preview and sending ----------------------------------------------------------------------

  chipIds() {
    return this.chips.filter((chip) => this.input.value.includes(chip.token)).map((chip) => chip.id);
  }

  /** What the server previews: the text and the chips still in it. */
  draftState() {
    const body = this.input.value;
    const chips = this.chipIds();
    return { body, chips, key: JSON.stringify([this.room?.id, body, chips]) };
  }

  /** Show the server's answer for the current draft, or ask for it (the last answer stays on
   * screen, dimmed, until the new one comes). */
  preview() {
    if (!this.room || !this.room.you) return;
    const draft = this.draftState();
    if (!draft.body.trim()) {
      this.render(null, draft.body);
      return;
    }
    if (this.answer?.key === draft.key) {
      this.render(this.answer.preview, draft.body);
      return;
    }
    for (const id of ["recipients", "diagnostics"]) this.part(id).classList.add("is-stale");
    this.askPreview();
  }

  render(preview, text) {
    for (const id of ["recipients", "diagnostics"]) this.part(id).classList.remove("is-stale");
    renderRecipients(this.part("recipients"), this.room, preview);
    renderDiagnostics(this.part("diagnostics"), preview, {
      text,
      room: this.room,
      unmatched: this.unmatched,
      fix: (start, end, insert) => this.replace(start, end, insert),
      sendPlain: () => this.submit(true),
    });
  }

  /** The server's preview of `draft` (asked once); null if it cannot be had (offline). */
  previewOf(draft) {
    if (!this.room || !draft.body.trim()) return Promise.resolve(null);
    if (this.answer?.key === draft.key) return Promise.resolve(this.answer.preview);
    if (this.asking?.key === draft.key) return this.asking.promise;
    const frame = { type: "preview", project_id: this.room.id, body: draft.body };
    if (draft.chips.length) frame.chips = draft.chips;
    const promise = this.conn.request(frame).then(
      (answer) => {
        const preview = withLocalSpans(answer, draft.body);
        // Kept and shown only while the draft is still the one asked about: a stale answer
        // neither shows nor displaces the answer for the current draft.
        if (this.draftState().key === draft.key) {
          this.answer = { key: draft.key, preview };
          this.render(preview, draft.body);
        }
        return preview;
      },
      () => null,
    );
    this.asking = { key: draft.key, promise };
    promise.finally(() => {
      if (this.asking?.promise === promise) this.asking = null;
    });
    return promise;
  }

  async submit(asPlainText) {
    if (!this.room || this.input.disabled || this.sending) return;
    const body = this.input.value;
    if (this.tray.busy()) {
      this.onFiles(); // the files are not all uploaded yet: say so, send nothing
      return;
    }
    const files = this.tray.ready();
    if (!body.trim() && !files.length) return;
    this.picker.close();
    if (!asPlainText && body.trim()) {
      // The server's answer decides (it refuses a blocked draft with `mentions_unresolved` too).
      const draft = this.draftState();
      this.sending = true;
      let preview;
      try {
        preview = await this.previewOf(draft);
      } finally {
        this.sending = false;
      }
      if (this.draftState().key !== draft.key) return; // edited while waiting: not this text
      if (isBlocked(preview)) {
        const list = this.part("diagnostics");
        list.classList.remove("shake");
        void list.offsetWidth; // restart the animation
        list.classList.add("shake");
        list.querySelector("button")?.focus();
        return;
      }
    }
    const txn = crypto.randomUUID();
    const frame = { type: "send", project_id: this.room.id, client_txn_id: txn, body };
    if (this.replyTo) frame.reply_to = this.replyTo.id;
    const chips = this.chipIds();
    if (chips.length) frame.chips = chips;
    if (asPlainText) frame.as_plain_text = true;
    if (files.length) frame.attachments = files.map((file) => file.id);
    this.tray.take();
    this.room.pending.set(txn, { body, frame, replyTo: this.replyTo, chips: this.chips, attachments: files, createdAt: new Date().toISOString() });
    this.conn.sendMessage(frame);
    this.unmatched = null;
    this.input.value = "";
    this.chips = [];
    this.replyTo = this.thread ? this.fixedReply : null;
    this.storeDraft();
    this.typing(false);
    this.refresh();
    this.autosize();
    this.onSent(txn);
  }

  /** A send was refused: the text comes back (never lost), with the server's reason. */
  restore(txn, error) {
    const pending = this.room?.pending.get(txn);
    if (!pending) return;
    this.room.pending.delete(txn);
    if (pending.attachments?.length) this.tray.restore(pending.attachments);
    if (!this.input.value.trim()) {
      this.input.value = pending.body;
      this.chips = pending.chips || [];
      this.replyTo = pending.replyTo;
      this.refresh();
      this.autosize();
      this.storeDraft();
    }
    return error;
  }

  typing(active) {
    if (!this.room) return;
    const now = Date.now();
    if (active && now - this.lastTyping < TYPING_EVERY_MS) return;
    if (!active && !this.lastTyping) return;
    this.lastTyping = active ? now : 0;
    this.conn.raw({ type: "typing", project_id: this.room.id, active });
  }
}

export function tokenFor(m) {
  if (m.handle && !/\s/.test(m.handle)) return `@${m.handle}`;
  return `@「${m.display_name}」`;
}

/** A mention with whitespace in it being typed before `caret` (`@前端 小林`): {start, query}
 * or null. The query holds at least one space and no line break. */
export function spacedMentionQuery(text, caret) {
  let i = caret - 1;
  while (i >= 0 && text[i] !== "@" && text[i] !== "＠" && text[i] !== "\n" && !NAME_END.test(text[i]) && caret - i <= 33) i -= 1;
  if (i < 0 || (text[i] !== "@" && text[i] !== "＠")) return null;
  if (i > 0 && NO_PICKER_BEFORE.test(text[i - 1])) return null;
  const query = text.slice(i + 1, caret);
  if (!WHITESPACE.test(query) || !query.trim() || WHITESPACE.test(query[0]) || query.startsWith("「")) return null;
  return { start: i, query };
}

/** The mention being typed before `caret`: {start, query} or null. */
export function mentionQuery(text, caret) {
  let i = caret - 1;
  while (i >= 0 && text[i] !== "@" && text[i] !== "＠" && !WHITESPACE.test(text[i]) && !NAME_END.test(text[i]) && caret - i <= 33) i -= 1;
  if (i < 0 || (text[i] !== "@" && text[i] !== "＠")) return null;
  if (i > 0 && NO_PICKER_BEFORE.test(text[i - 1])) return null;
  const query = text.slice(i + 1, caret);
  if (query.startsWith("「")) return null;
  return { start: i, query };
}

