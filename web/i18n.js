// Interface strings in Chinese (zh-CN) or English: the person's choice (localStorage) or, until
// they make one, their browser's (navigator.languages: the first Chinese or English tag; a list
// naming neither reads English) — the rule of room/rules/languages.py for the sign-in pages.
// Server-written notices with a code are worded from it (notices.js); server errors are worded from their
// code (errorText).
//
// Static markup marks its strings with data-i18n (textContent), data-i18n-label (aria-label and
// title), data-i18n-placeholder; applyStatic() fills them. Dynamic parts call t() when they render
// and re-render on the "lang" event.

import { local } from "./dom.js";
import { STRINGS_EN } from "./strings-en.js";
import { STRINGS_ZH } from "./strings-zh.js";

const LANG_KEY = "room.lang";
const DICTS = { "zh-CN": STRINGS_ZH, en: STRINGS_EN };
const listeners = new Set();

/** The language a browser asks for, by the rule above. */
export function browserLang(tags = navigator.languages?.length ? navigator.languages : [navigator.language]) {
  const named = tags.filter(Boolean);
  for (const tag of named) {
    const base = String(tag).toLowerCase().replace("_", "-").split("-")[0];
    if (base === "zh") return "zh-CN";
    if (base === "en") return "en";
  }
  return named.length ? "en" : "zh-CN";
}

let lang = DICTS[local.get(LANG_KEY)] ? local.get(LANG_KEY) : browserLang();

export function getLang() {
  return lang;
}

export function setLang(next) {
  if (!DICTS[next] || next === lang) return;
  lang = next;
  local.set(LANG_KEY, next);
  applyStatic(document);
  for (const fn of listeners) fn(next);
}

export function onLang(fn) {
  listeners.add(fn);
}

/**
 * Plurals: a count string's `key` is its general ("other") form; a language whose words change
 * with the count adds `key.<category>` for the other categories of Intl.PluralRules it needs —
 * English `key.one` ("{n} reply" beside "{n} replies"); Chinese has one form. The count is the
 * first placeholder of the general form that a word follows ("{n} replies", not "v{version} (")
 * and whose value is a number (or a string of digits); a second count in the same string is
 * worded so nothing agrees with it ("… added since: {n}"). tests/test_plural_strings.py holds
 * the English table to this.
 */
const pluralRules = new Map();

function plural(dict, key, vars) {
  const general = dict[key];
  if (general === undefined) return undefined;
  for (const [, name] of general.matchAll(/\{(\w+)\}(?= \p{L})/gu)) {
    const value = vars[name];
    const count = typeof value === "number" ? value : typeof value === "string" && /^\d+$/.test(value) ? Number(value) : NaN;
    if (Number.isNaN(count)) continue;
    if (!pluralRules.has(lang)) pluralRules.set(lang, new Intl.PluralRules(lang));
    const category = pluralRules.get(lang).select(count);
    return category === "other" ? general : (dict[`${key}.${category}`] ?? general);
  }
  return general;
}

/** The string for `key` with `{name}` placeholders filled (in the form its count asks for, as
 * above); falls back to Chinese, then the key. */
export function t(key, vars = {}) {
  const template = plural(DICTS[lang], key, vars) ?? STRINGS_ZH[key] ?? key;
  return template.replace(/\{(\w+)\}/g, (whole, name) => (name in vars ? String(vars[name]) : whole));
}

/** True if `key` has a string (in the interface language or the Chinese fallback). */
export function hasString(key) {
  return key in DICTS[lang] || key in STRINGS_ZH;
}

/**
 * The one way the page words a server error (an HTTP `{error}` or a `/ws` `error` frame): from
 * its `code`, in the interface language (every code the server sends has both texts; a test
 * lists them). A code with no text falls back to the server's words — only the language's half
 * of a bilingual "中文 (English)" message — and an English-only message is framed in Chinese for
 * a Chinese reader. Placeholders the error's details do not fill are left out.
 */
export function errorText(err) {
  const code = err?.code;
  const key = `error.${code}`;
  const template = code ? (plural(DICTS[lang], key, err.details || {}) ?? STRINGS_ZH[key]) : null;
  if (template) return fill(template, err.details || {});
  const message = typeof err?.message === "string" ? err.message.trim() : "";
  if (!message) return t("error.generic");
  const halves = message.match(/^(.*\p{Script=Han}.*?)\s*[(（]([^()（）]*[A-Za-z][^()（）]*)[)）]\s*[.。]?$/su);
  if (halves) return lang === "en" ? halves[2].trim() : halves[1].trim();
  if (lang !== "en" && !/\p{Script=Han}/u.test(message)) return t("error.untranslated", { message });
  return message;
}

function fill(template, vars) {
  const word = (name) => {
    const value = vars[name];
    if (value === undefined || value === null) return "";
    return name === "state" ? label("projectState", value) : String(value); // a project's state, in words
  };
  return template
    .replace(/\{(\w+)\}/g, (whole, name) => word(name))
    .replace(/（\s*）|\(\s*\)|“\s*”|「\s*」/g, "")
    .replace(/\s*[:：]\s*$/, "")
    .trim();
}

/** Either language's word for a server code (role, state …) with a fallback to the code itself. */
export function label(group, code) {
  const key = `${group}.${code}`;
  const found = DICTS[lang][key] ?? STRINGS_ZH[key];
  return found ?? String(code ?? "");
}

export function applyStatic(root) {
  document.documentElement.lang = lang;
  for (const el of root.querySelectorAll("[data-i18n]")) el.textContent = t(el.dataset.i18n);
  for (const el of root.querySelectorAll("[data-i18n-label]")) {
    el.setAttribute("aria-label", t(el.dataset.i18nLabel));
    el.title = t(el.dataset.i18nLabel);
  }
  for (const el of root.querySelectorAll("[data-i18n-placeholder]")) el.placeholder = t(el.dataset.i18nPlaceholder);
}

/** Dates and times in the interface language, local time zone. */
export function formatTime(iso) {
  return new Date(iso).toLocaleTimeString(lang, { hour: "2-digit", minute: "2-digit" });
}

export function formatDateTime(iso) {
  if (!iso) return "—";
  // Records carry ISO strings; a few answers give Unix seconds.
  return new Date(typeof iso === "number" ? iso * 1000 : iso).toLocaleString(lang, {
    month: "short",
    day: "numeric",
    hour: "2-digit",
    minute: "2-digit",
  });
}

export function dayKey(iso) {
  const d = new Date(iso);
  return `${d.getFullYear()}-${d.getMonth() + 1}-${d.getDate()}`;
}

/** "今天" / "昨天" / "12月1日 星期一" (with the year when it is not this year). */
export function formatDay(iso, now = new Date()) {
  const d = new Date(iso);
  const startOf = (x) => new Date(x.getFullYear(), x.getMonth(), x.getDate()).getTime();
  const days = Math.round((startOf(now) - startOf(d)) / 86_400_000);
  if (days === 0) return t("day.today");
  if (days === 1) return t("day.yesterday");
  /** @type {Intl.DateTimeFormatOptions} */
  const options = { month: "long", day: "numeric", weekday: "long" };
  if (d.getFullYear() !== now.getFullYear()) options.year = "numeric";
  return d.toLocaleDateString(lang, options);
}

export function formatNumber(n) {
  return typeof n === "number" ? n.toLocaleString(lang) : "—";
}
