// Streamed partial answers (docs/protocol.md, "Drafts"): what an agent is writing while its
// answer streams, shown as a live preview under the timeline, one per member. Each `draft` frame
// carries the whole text so far; a preview ends with the `done` frame, or when the posted message
// arrives (its meta.turn_id is the draft's turn_id) — whichever comes first, so the answer is
// never on the page twice.

import { h } from "./dom.js";
import { t } from "./i18n.js";
import { authorName, avatar } from "./message.js";

export class Drafts {
  constructor(el) {
    this.el = el;
    this.room = null;
    this.shown = new Map(); // member id -> the last draft frame
    this.ended = new Set(); // turn ids whose answer ended (posted, or given up)
    this.nodes = new Map(); // member id -> its preview element
  }

  open(room) {
    this.room = room;
    this.shown.clear();
    this.ended.clear();
    this.render();
  }

  /** A (re)subscription: the server sends the drafts streaming now after its replay. */
  reset() {
    this.shown.clear();
    this.render();
  }

  onFrame(frame) {
    const room = this.room;
    if (!room || frame.project_id !== room.id) return;
    if (frame.done) {
      this.ended.add(frame.turn_id);
      this.drop((d) => d.turn_id === frame.turn_id);
      return;
    }
    if (this.ended.has(frame.turn_id) || this.posted(frame.turn_id)) return;
    this.shown.set(frame.member_id, frame);
    this.render();
  }

  /** A message (new or replayed): an answer that was streaming is now posted. */
  onMessage(message) {
    const turn = message.meta?.turn_id;
    if (turn === undefined || turn === null) return;
    this.ended.add(turn);
    this.drop((d) => d.turn_id === turn);
  }

  posted(turnId) {
    if ([...this.shown.values()].some((d) => d.turn_id === turnId)) return false; // seen already
    for (const message of this.room.messages.values()) if (message.meta?.turn_id === turnId) return true;
    return false;
  }

  drop(match) {
    let changed = false;
    for (const [id, draft] of this.shown) {
      if (match(draft)) {
        this.shown.delete(id);
        changed = true;
      }
    }
    if (changed) this.render();
  }

  render() {
    const room = this.room;
    for (const [id, node] of this.nodes) {
      if (!this.shown.has(id)) {
        node.remove();
        this.nodes.delete(id);
      }
    }
    for (const [id, draft] of this.shown) {
      let node = this.nodes.get(id);
      if (!node) {
        node = h(
          "div",
          { class: "draft", dataset: { memberId: String(id) } },
          avatar(room, id, "sm"),
          h(
            "div",
            { class: "draft-main" },
            h("div", { class: "draft-head" }, h("span", { class: "draft-name", text: authorName(room, id) }), h("span", { class: "draft-state", text: t("draft.writing") })),
            h("div", { class: "draft-text" }),
          ),
        );
        this.nodes.set(id, node);
        this.el.append(node);
      }
      node.dataset.turnId = String(draft.turn_id);
      const text = node.querySelector(".draft-text");
      text.textContent = (draft.omitted ? "…" : "") + draft.text;
      text.scrollTop = text.scrollHeight; // the newest words in view
    }
    this.el.hidden = this.shown.size === 0;
  }
}
