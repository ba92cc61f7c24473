// The member picker opened by `@` or `＠` in the composer: first item 所有人 (with how many AI
// members it reaches), then members filtered by display name, handle, role and alias.
// The textarea stays focused (combobox pattern, aria-activedescendant); ↑↓ move, Enter/Tab
// pick, Esc closes.

import { append, h } from "./dom.js";
import { label, t } from "./i18n.js";
import { colourClass, initials } from "./message.js";
import { activeAgents } from "./store.js";

const MAX_ITEMS = 9;
const EVERYONE_WORDS = ["所有人", "all", "everyone", "suoyouren"];

const fold = (s) => (s || "").normalize("NFC").toLowerCase();

/** The picker's items for `query` (what follows the at-sign). */
export function pickerItems(room, query) {
  const q = fold(query);
  const items = [];
  const reach = activeAgents(room).filter((m) => m.id !== room.you).length;
  if (!q || EVERYONE_WORDS.some((w) => w.startsWith(q))) items.push({ kind: "all", reach });
  const scored = [];
  for (const m of room.members.values()) {
    if (m.status === "left" || m.id === room.you) continue;
    const names = [m.handle, m.display_name, ...(m.aliases || [])].map(fold);
    const roles = [m.role, label("role", m.role)].map(fold);
    let score = null;
    if (!q) score = 3;
    else if (names.some((n) => n.startsWith(q))) score = 0;
    else if (names.some((n) => n.includes(q))) score = 1;
    else if (roles.some((r) => r.includes(q))) score = 2;
    if (score !== null) scored.push([score, m]);
  }
  scored.sort((a, b) => a[0] - b[0] || (a[1].kind === b[1].kind ? 0 : a[1].kind === "agent" ? -1 : 1) || a[1].display_name.localeCompare(b[1].display_name));
  for (const [, m] of scored) items.push({ kind: "member", member: m });
  return items.slice(0, MAX_ITEMS);
}

export class Picker {
  constructor(list, input, onPick) {
    this.list = list;
    this.input = input;
    this.onPick = onPick;
    this.items = [];
    this.query = "";
    this.index = 0;
    this.isOpen = false;
    list.addEventListener("mousedown", (event) => event.preventDefault()); // keep the textarea focused
    list.addEventListener("click", (event) => {
      const option = event.target.closest("[role=option]");
      if (option) this.pick(Number(option.dataset.index));
    });
  }

  show(room, query) {
    this.query = query;
    this.items = pickerItems(room, query);
    this.index = 0;
    this.isOpen = true;
    this.render();
  }

  close() {
    if (!this.isOpen) return;
    this.isOpen = false;
    this.list.hidden = true;
    this.list.replaceChildren();
    this.input.removeAttribute("aria-activedescendant");
  }

  move(delta) {
    if (!this.items.length) return;
    this.index = (this.index + delta + this.items.length) % this.items.length;
    this.render();
  }

  pick(index = this.index) {
    const item = this.items[index];
    if (!item) return false;
    this.close();
    this.onPick(item);
    return true;
  }

  render() {
    this.list.replaceChildren();
    if (!this.items.length) {
      this.list.append(h("li", { class: "picker-empty", attrs: { role: "presentation" }, text: t("picker.none") }));
    }
    this.items.forEach((item, i) => {
      const id = `picker-opt-${i}`;
      const selected = i === this.index;
      const option = h("li", {
        id,
        class: ["picker-item", selected && "active"],
        dataset: { index: String(i), kind: item.kind, memberId: item.member ? String(item.member.id) : "" },
        attrs: { role: "option", "aria-selected": String(selected) },
      });
      if (item.kind === "all") {
        append(option, [
          h("span", { class: "avatar avatar-sm avatar-all", attrs: { "aria-hidden": "true" } }, h("span", { class: "avatar-initial", text: "全" })),
          h("span", { class: "picker-name", text: t("picker.everyone") }),
          h("span", { class: "picker-handle", text: "@所有人" }),
          h("span", { class: "picker-meta", text: t("picker.reach", { n: item.reach }) }),
        ]);
      } else {
        const m = item.member;
        append(option, [
          h("span", { class: ["avatar", "avatar-sm", colourClass(m.id)], attrs: { "aria-hidden": "true" } }, h("span", { class: "avatar-initial", text: initials(m.display_name) })),
          h("span", { class: "picker-name", text: m.display_name }),
          h("span", { class: "picker-handle", text: `@${m.handle}` }),
          h("span", { class: "picker-meta", text: m.kind === "agent" ? `AI · ${label("role", m.role)}` : label("role", m.role) }),
          m.disabled ? h("span", { class: "badge", text: label("memberStatus", "disabled") })
            : m.status === "paused" ? h("span", { class: "badge", text: label("memberStatus", "paused") }) : null,
        ]);
      }
      this.list.append(option);
    });
    this.list.hidden = false;
    if (this.items.length) {
      this.input.setAttribute("aria-activedescendant", `picker-opt-${this.index}`);
      this.list.children[this.index]?.scrollIntoView({ block: "nearest" });
    }
  }
}
