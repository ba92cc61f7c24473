// Keyboard shortcuts: the project switcher (Ctrl+P / ⌘P: Ctrl+K is the search box's), `?` for
// the list of shortcuts, Alt+↑/↓ for the previous/next project in the projects column and
// Alt+Shift+↑/↓ for the previous/next one with unread messages. Esc closes a drawer (layout.js),
// a dialog or a menu (ui.js). Keys on a focused message (j/k, r, e, +, c, Enter) are the
// timeline's (timeline.js); they are listed here.
//
// The switcher matches fuzzily and by characters, so Chinese names match by any of their
// characters in order (「前端重构」 ← "前重"), Latin ones case- and width-insensitively; it
// never acts on an Enter that confirms an IME candidate.

import { $$, h } from "./dom.js";
import { label, t } from "./i18n.js";
import { isComposing, trackComposition } from "./ime.js";
import { groupOf } from "./projects.js";
import { app } from "./store.js";
import { openDialog } from "./ui.js";

const MAX_RESULTS = 30;

function fold(text) {
  return Array.from((text || "").normalize("NFKC").toLowerCase());
}

/**
 * How well `query` matches `name`: null when some character of the query (ignoring spaces) is
 * missing in order; higher is better (a prefix, characters next to each other, an early start).
 */
export function fuzzyScore(query, name) {
  const q = fold(query).filter((c) => !/\s/u.test(c));
  if (!q.length) return 0;
  const n = fold(name);
  let score = 0;
  let at = -1;
  let run = 0;
  for (const c of q) {
    const found = n.indexOf(c, at + 1);
    if (found < 0) return null;
    run = found === at + 1 ? run + 1 : 0;
    score += 1 + run * 2 + (found === 0 ? 3 : 0) + (found > 0 && /[\s\-_·.]/u.test(n[found - 1]) ? 2 : 0);
    at = found;
  }
  return score - n.length * 0.01;
}

export function switcherResults(query, projects, currentId = null) {
  const scored = [];
  for (const p of projects) {
    const score = fuzzyScore(query, p.name);
    if (score === null) continue;
    // Active projects first, then archived, then the trash; the open one last among equals.
    const group = { active: 0, archived: 1, trash: 2 }[groupOf(p.state)] ?? 3;
    scored.push({ p, score: score - group * 0.5 - (p.id === currentId ? 0.25 : 0) });
  }
  scored.sort((a, b) => b.score - a.score || a.p.id - b.p.id);
  return scored.slice(0, MAX_RESULTS).map((s) => s.p);
}

function typing(target) {
  return target instanceof Element && Boolean(target.closest("input, textarea, select, [contenteditable=''], [contenteditable=true]"));
}

export function initShortcuts({ go }) {
  document.addEventListener("keydown", (event) => {
    if (event.defaultPrevented || event.isComposing || event.keyCode === 229) return;
    const modal = document.querySelector("dialog[open]");
    const k = event.key.toLowerCase();
    if (k === "p" && (event.ctrlKey || event.metaKey) && !event.altKey && !event.shiftKey) {
      event.preventDefault(); // not the browser's print dialog
      if (!modal) openSwitcher(go);
      return;
    }
    if (modal || document.querySelector(".menu")) return;
    if (event.altKey && !event.ctrlKey && !event.metaKey && (event.key === "ArrowUp" || event.key === "ArrowDown")) {
      event.preventDefault();
      step(event.key === "ArrowDown" ? 1 : -1, go, event.shiftKey);
      return;
    }
    if (event.key === "?" && !event.ctrlKey && !event.metaKey && !event.altKey && !typing(event.target)) {
      event.preventDefault();
      openHelp();
    }
  });
}

/** The previous/next project as the projects column lists them; with `unread`, the next one
 * (round the list) that has unread messages or mentions of me, if any. */
function step(delta, go, unread = false) {
  const ids = $$("#project-groups .project-link").map((a) => Number(a.dataset.projectId));
  if (!ids.length) return;
  const at = ids.indexOf(app.room?.id ?? -1);
  for (let i = 1; i <= ids.length; i += 1) {
    const next = ids[(at + delta * i + ids.length * i) % ids.length];
    if (next === app.room?.id) return;
    const p = app.projects.get(next);
    if (!unread || (p && (p.unread > 0 || p.mentions > 0))) {
      go(next);
      return;
    }
  }
}

export function openSwitcher(go) {
  return openDialog({
    title: t("switcher.title"),
    className: "switcher",
    build: (close) => {
      const input = h("input", {
        type: "text",
        class: "switcher-input",
        attrs: {
          autofocus: true,
          role: "combobox",
          "aria-expanded": "true",
          "aria-controls": "switcher-list",
          "aria-autocomplete": "list",
          "aria-label": t("switcher.label"),
          placeholder: t("switcher.placeholder"),
          autocomplete: "off",
          spellcheck: "false",
        },
      });
      const list = h("ul", { id: "switcher-list", class: "switcher-list", attrs: { role: "listbox", "aria-label": t("switcher.label") } });
      const ime = trackComposition(input);
      let results = [];
      let active = 0;
      const choose = (p) => {
        close(p.id);
        go(p.id);
      };
      const paint = () => {
        list.replaceChildren(
          ...results.map((p, i) =>
            h("li", {
              id: `switcher-opt-${p.id}`,
              class: ["switcher-item", i === active && "active"],
              dataset: { projectId: String(p.id) },
              attrs: { role: "option", "aria-selected": String(i === active) },
              on: { pointerdown: (event) => event.preventDefault(), click: () => choose(p) },
            },
            h("span", { class: "switcher-name", text: p.name }),
            p.unread ? h("span", { class: "unread-badge", text: p.unread > 99 ? "99+" : String(p.unread) }) : null,
            p.state !== "active" ? h("span", { class: ["state-badge", `state-${p.state}`], text: label("projectState", p.state) }) : null),
          ),
        );
        if (!results.length) list.append(h("li", { class: "switcher-empty muted", text: t("switcher.none") }));
        input.setAttribute("aria-activedescendant", results[active] ? `switcher-opt-${results[active].id}` : "");
        list.children[active]?.scrollIntoView({ block: "nearest" });
      };
      const update = () => {
        results = switcherResults(input.value, [...app.projects.values()], app.room?.id ?? null);
        active = 0;
        paint();
      };
      input.addEventListener("input", () => {
        if (!isComposing({}, ime)) update();
      });
      input.addEventListener("compositionend", update);
      input.addEventListener("keydown", (event) => {
        if (isComposing(event, ime)) return; // Enter and arrows belong to the IME
        if (event.key === "ArrowDown" || event.key === "ArrowUp") {
          event.preventDefault();
          if (!results.length) return;
          active = (active + (event.key === "ArrowDown" ? 1 : -1) + results.length) % results.length;
          paint();
        } else if (event.key === "Enter") {
          event.preventDefault();
          if (results[active]) choose(results[active]);
        }
      });
      update();
      return [input, list, h("p", { class: "field-hint", text: t("switcher.hint") })];
    },
  });
}

const SHORTCUTS = [
  ["Ctrl+P / ⌘P", "shortcuts.switcher"],
  ["Ctrl+K / ⌘K, /", "shortcuts.search"],
  ["Alt+↑ / Alt+↓", "shortcuts.nextProject"],
  ["Alt+Shift+↑ / Alt+Shift+↓", "shortcuts.nextUnread"],
  ["?", "shortcuts.help"],
  ["Esc", "shortcuts.close"],
  ["Enter", "shortcuts.send"],
  ["Shift+Enter", "shortcuts.newline"],
  ["↑", "shortcuts.editLast"],
  ["j / k, ↑ / ↓, Home / End", "shortcuts.moveInTimeline"],
  ["Enter", "shortcuts.enterMessage"],
  ["r", "shortcuts.reply"],
  ["e", "shortcuts.edit"],
  ["+", "shortcuts.react"],
  ["c", "shortcuts.copyLink"],
];

export function openHelp() {
  return openDialog({
    title: t("shortcuts.title"),
    className: "shortcut-help",
    build: () => [
      h("table", { class: "shortcut-table" },
        h("tbody", {}, SHORTCUTS.map(([keys, key]) => h("tr", {}, h("th", { scope: "row" }, h("kbd", { text: keys })), h("td", { text: t(key) }))))),
      h("p", { class: "field-hint", text: t("shortcuts.note") }),
    ],
  });
}
