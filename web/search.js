// The search box in the room header: Ctrl+K (⌘K) focuses it anywhere, `/` when the reader is not
// typing. It asks `GET /api/search` — all of the person's projects, or only the open one (the
// 所有项目 / 本项目 toggle) — as the query settles (never mid-composition: Chinese input confirms
// candidates with Enter and Space); the query may carry operators (`from:` `has:file` `before:`
// `after:` `in:` `is:mention`, docs/search.md). It lists the ranked results with their project
// and their snippets (highlights and inline markdown, built as nodes); choosing one opens the
// message in the timeline (a permalink, `#/p/<project>/m/<message>?q=<query>`) or the record in
// the 记忆 tab, with the match marked. Recent searches are kept in this browser (localStorage,
// per person; docs/search.md says why) and offered while the box is empty.

import { get } from "./api.js";
import { $, debounce, h } from "./dom.js";
import { errorText, formatDateTime, hasString, t } from "./i18n.js";
import { isComposing, trackComposition } from "./ime.js";
import { snippetNodes, termsOf } from "./highlight.js";
import { app, member } from "./store.js";

const RECORD_KINDS = ["summary", "fact", "convention", "decision", "progress", "session", "reference"];
const SETTLE_MS = 250;
const LIMIT = 20;
const RECENT_MAX = 10;

/** This person's recent searches, newest first (localStorage; none if it is unavailable). */
export function recentSearches() {
  try {
    const list = JSON.parse(localStorage.getItem(recentKey()) || "[]");
    return Array.isArray(list) ? list.filter((q) => typeof q === "string").slice(0, RECENT_MAX) : [];
  } catch {
    return [];
  }
}

function recentKey() {
  return `room.recentSearches.${app.identity?.user_id ?? "anon"}`;
}

function remember(q) {
  const list = [q, ...recentSearches().filter((old) => old !== q)].slice(0, RECENT_MAX);
  try {
    localStorage.setItem(recentKey(), JSON.stringify(list));
  } catch {
    // private mode or full: recent searches are a convenience
  }
}

export class SearchBox {
  /** `open(result, terms)` shows a chosen result; `room()` is the open project or null. */
  constructor(form, { room, open }) {
    this.form = form;
    this.input = $("#search-input", form);
    this.panel = $("#search-panel", form);
    this.list = $("#search-results", form);
    this.status = $("#search-status", form);
    this.room = room;
    this.onOpen = open;
    this.filter = "all";
    this.scope = "all"; // all of the person's projects, or "room": the open one
    this.recent = [];
    this.results = [];
    this.active = -1;
    this.asked = 0; // answers to older questions are dropped
    this.lastQuery = null;
    this.ime = trackComposition(this.input);
    this.settle = debounce(() => this.search(), SETTLE_MS);

    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.settle.flush();
    });
    this.input.addEventListener("input", () => {
      if (this.ime.composing) return; // the query is not written yet
      this.settle();
    });
    this.input.addEventListener("compositionend", () => this.settle());
    this.input.addEventListener("keydown", (event) => this.onKey(event));
    this.input.addEventListener("focus", () => {
      form.classList.add("is-open");
      if (this.input.value.trim() && this.results.length) this.show(true);
      else if (!this.input.value.trim()) this.showRecent();
    });
    // On a narrow screen the box covers the header while it is in use; leaving it closes it.
    this.input.addEventListener("blur", () => setTimeout(() => {
      if (!form.contains(document.activeElement) && this.panel.hidden) form.classList.remove("is-open");
    }, 0));
    $("#search-open", form).addEventListener("click", () => this.focus());
    for (const button of form.querySelectorAll("[data-filter]")) {
      button.addEventListener("click", () => {
        this.filter = button.dataset.filter;
        this.lastQuery = null;
        this.renderFilters();
        this.search();
        this.input.focus();
      });
    }
    const filters = $(".search-filters", form);
    this.scopeButtons = ["all", "room"].map((scope) => h("button", {
      type: "button", class: "search-filter search-scope", dataset: { scope }, text: t(`search.scope.${scope}`),
      on: { click: () => {
        this.scope = scope;
        this.lastQuery = null;
        this.renderFilters();
        this.search();
        this.input.focus();
      } },
    }));
    filters?.prepend(...this.scopeButtons, h("span", { class: "search-filter-gap", attrs: { "aria-hidden": "true" } }));
    filters?.after(h("p", { class: "search-hint muted", text: t("search.operatorsHint") }));
    this.list.addEventListener("click", (event) => {
      const option = event.target.closest("[role=option]");
      if (!option) return;
      if (option.dataset.recent !== undefined) this.useRecent(Number(option.dataset.recent));
      else this.choose(Number(option.dataset.index));
    });
    // Results stay while the pointer or focus is inside the box; anywhere else closes them.
    document.addEventListener("pointerdown", (event) => {
      if (!form.contains(event.target)) this.close(false);
    });
    form.addEventListener("focusout", (event) => {
      if (!form.contains(event.relatedTarget) && event.relatedTarget) this.close(false);
    });
    document.addEventListener("keydown", (event) => this.onGlobalKey(event));
    this.renderFilters();
  }

  focus() {
    this.form.classList.add("is-open");
    this.input.focus();
    this.input.select();
  }

  /** Ctrl+K / ⌘K anywhere; `/` only when no field has the keyboard and no dialog is open. */
  onGlobalKey(event) {
    if (event.defaultPrevented || event.isComposing || event.keyCode === 229) return;
    if (!this.room() || document.querySelector("dialog[open]")) return; // a modal keeps the keyboard
    const k = event.key.toLowerCase();
    if (k === "k" && (event.ctrlKey || event.metaKey) && !event.altKey && !event.shiftKey) {
      event.preventDefault();
      this.focus();
      return;
    }
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
    if (document.querySelector(".menu")) return;
    const target = event.target;
    if (target instanceof Element && target.closest("input, textarea, select, [contenteditable=''], [contenteditable=true]")) return;
    event.preventDefault();
    this.focus();
  }

  onKey(event) {
    if (isComposing(event, this.ime)) return; // Enter and arrows belong to the IME
    const n = this.results.length;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      const options = this.list.querySelectorAll("[role=option]").length;
      if (!options) return;
      event.preventDefault();
      this.show(true);
      this.setActive((this.active + (event.key === "ArrowDown" ? 1 : -1) + options) % options);
    } else if (event.key === "Enter") {
      event.preventDefault();
      if (!this.input.value.trim() && this.recent.length) {
        this.useRecent(Math.max(this.active, 0));
        return;
      }
      // Enter opens the chosen result, or the first one once the results answer this query.
      const current = this.room() && this.lastQuery === this.keyOf(this.room(), this.input.value.trim());
      if (current && n && this.results === this.shown) this.choose(Math.max(this.active, 0));
      else this.settle.flush();
    } else if (event.key === "Escape") {
      event.preventDefault();
      if (!this.panel.hidden) this.close(false);
      else {
        this.input.blur();
        this.close(true);
      }
    }
  }

  params(q, room) {
    const params = new URLSearchParams({ q, limit: String(LIMIT) });
    if (this.scope === "room") params.set("project", String(room.id));
    if (this.filter === "message") params.set("kind", "message");
    if (this.filter === "memory") params.set("kind", RECORD_KINDS.join(","));
    return params;
  }

  keyOf(room, q) {
    return `${room.id}|${this.scope}|${this.filter}|${q}`;
  }

  /** The recent searches as options (while the box is empty), or nothing. */
  showRecent() {
    this.recent = recentSearches();
    this.results = [];
    this.active = -1;
    if (!this.recent.length) return this.close(false);
    this.setStatus(t("search.recent"));
    this.list.replaceChildren(...this.recent.map((q, i) => h("li", {
      id: `search-recent-${i}`, class: "search-result search-recent", dataset: { recent: String(i) },
      attrs: { role: "option", "aria-selected": "false" },
    }, h("span", { class: "search-recent-text", text: q }))));
    this.show(true);
  }

  useRecent(index) {
    const q = this.recent[index];
    if (!q) return;
    this.input.value = q;
    this.recent = [];
    this.settle.flush();
    this.search();
  }

  async search() {
    const room = this.room();
    const q = this.input.value.trim();
    if (!room) return;
    if (!q) {
      this.results = [];
      this.lastQuery = null;
      if (document.activeElement === this.input) this.showRecent();
      else this.close(false);
      return;
    }
    this.recent = [];
    const key = this.keyOf(room, q);
    if (key === this.lastQuery) {
      this.show(true);
      return;
    }
    this.lastQuery = key;
    const asked = ++this.asked;
    this.setStatus(t("search.searching"));
    this.show(true);
    let answer;
    try {
      answer = await get(`/api/search?${this.params(q, room)}`);
    } catch (err) {
      if (asked !== this.asked) return;
      this.results = [];
      this.lastQuery = null;
      this.list.replaceChildren();
      this.setStatus(err.code === "bad_query" ? t("search.badQuery") : err.code === "bad_operator" ? operatorText(err) : errorText(err), true);
      return;
    }
    if (asked !== this.asked) return;
    this.query = q;
    this.results = answer.results || [];
    this.capped = Boolean(answer.capped);
    this.shown = this.results;
    this.render(room);
  }

  render(room) {
    this.active = -1;
    this.input.removeAttribute("aria-activedescendant");
    const count = this.results.length ? t("search.count", { n: this.results.length }) : t("search.none");
    // Only the newest matches were ranked: say so, a narrower query finds older ones.
    this.setStatus(this.capped ? `${count} · ${t("search.capped")}` : count);
    this.list.replaceChildren(...this.results.map((r, i) => resultItem(room, r, i, this.scope === "all")));
    this.show(true);
  }

  renderFilters() {
    for (const button of this.form.querySelectorAll("[data-filter]")) {
      button.setAttribute("aria-pressed", String(button.dataset.filter === this.filter));
    }
    for (const button of this.scopeButtons || []) {
      button.setAttribute("aria-pressed", String(button.dataset.scope === this.scope));
    }
  }

  setStatus(text, error = false) {
    this.status.textContent = text;
    this.status.classList.toggle("error-text", error);
  }

  setActive(index) {
    const options = [...this.list.querySelectorAll("[role=option]")];
    options.forEach((o, i) => o.setAttribute("aria-selected", String(i === index)));
    this.active = index;
    const el = options[index];
    if (el) {
      this.input.setAttribute("aria-activedescendant", el.id);
      el.scrollIntoView({ block: "nearest" });
    }
  }

  show(on) {
    this.panel.hidden = !on;
    this.input.setAttribute("aria-expanded", String(on));
  }

  close(collapse) {
    this.show(false);
    if (collapse || document.activeElement !== this.input) this.form.classList.remove("is-open");
  }

  choose(index) {
    const result = this.results[index];
    if (!result) return;
    const terms = termsOf(result.snippet_html, this.query);
    remember(this.query);
    this.close(true);
    this.onOpen(result, terms, this.query);
  }

  /** The project changed: an old project's results mean nothing here. */
  reset() {
    this.input.value = "";
    this.results = [];
    this.lastQuery = null;
    this.list.replaceChildren();
    this.close(true);
  }
}

/** A refused operator, in words: which one and why. */
function operatorText(err) {
  const d = err.details || {};
  const key = `search.operator.${d.reason}`;
  return hasString(key) ? t(key, { operator: d.operator, value: d.value }) : errorText(err);
}

function resultItem(room, r, index, showProject) {
  const who = r.author ? r.author.display_name || member(room, r.author.id)?.display_name : null;
  const kindText = r.kind === "message" ? t("search.kind.message") : t(r.kind === "summary" ? "memory.summary" : `memory.kind.${r.kind}`);
  return h("li", {
    id: `search-result-${index}`,
    class: ["search-result", `search-${r.kind === "message" ? "message" : "record"}`],
    dataset: { index: String(index), kind: r.kind, id: String(r.message_id ?? r.record_id ?? r.id) },
    attrs: { role: "option", "aria-selected": "false" },
  },
  h("div", { class: "search-result-head" },
    h("span", { class: ["badge", r.kind === "message" ? null : "search-record-badge"], text: kindText }),
    showProject && r.project ? h("span", { class: "badge search-project", dataset: { projectId: String(r.project.id) }, text: r.project.name }) : null,
    who ? h("span", { class: "search-author", text: who }) : null,
    r.at ? h("time", { class: "muted", text: formatDateTime(r.at) }) : null),
  h("p", { class: "search-snippet" }, snippetNodes(r.snippet_html)));
}
