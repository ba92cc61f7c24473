// DOM helpers. Everything the page shows is built with these (textContent, never innerHTML),
// except message bodies, which arrive as HTML sanitised by the server (see message.js).

const SVG_NS = "http://www.w3.org/2000/svg";

export const $ = (selector, root = document) => root.querySelector(selector);
export const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];

/**
 * Create an element. `props`: `class`, `text`, `attrs` (set with setAttribute; null/false skip),
 * `dataset`, `on` ({event: handler}), and any other key is assigned as a property
 * (`hidden`, `type`, `value`, `disabled`, `id`, `tabIndex` …). Children may be nodes, strings
 * (text nodes) or null/false (skipped); arrays are flattened.
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  applyProps(el, props);
  append(el, children);
  return el;
}

function applyProps(el, props) {
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined) continue;
    if (key === "class") el.className = Array.isArray(value) ? value.filter(Boolean).join(" ") : value;
    else if (key === "text") el.textContent = value;
    else if (key === "attrs") {
      for (const [name, v] of Object.entries(value)) {
        if (v === null || v === false || v === undefined) continue;
        el.setAttribute(name, v === true ? "" : String(v));
      }
    } else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "on") for (const [type, fn] of Object.entries(value)) el.addEventListener(type, fn);
    else el[key] = value;
  }
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

/** An icon drawn from a few stroked paths (no icon font, no remote asset). */
export function icon(name, label = null) {
  const spec = ICONS[name] || ICONS.dot;
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("class", `icon icon-${name}`);
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  for (const d of spec.paths || []) {
    const path = document.createElementNS(SVG_NS, "path");
    path.setAttribute("d", d);
    svg.append(path);
  }
  for (const [cx, cy, r] of spec.dots || []) {
    const dot = document.createElementNS(SVG_NS, "circle");
    dot.setAttribute("cx", cx);
    dot.setAttribute("cy", cy);
    dot.setAttribute("r", r);
    dot.setAttribute("class", "fill");
    svg.append(dot);
  }
  if (label) {
    const wrap = h("span", { class: "icon-wrap" }, svg, h("span", { class: "visually-hidden", text: label }));
    return wrap;
  }
  return svg;
}

const ICONS = {
  menu: { paths: ["M4 6h16M4 12h16M4 18h16"] },
  more: { dots: [[5, 12, 1.6], [12, 12, 1.6], [19, 12, 1.6]] },
  close: { paths: ["M6 6l12 12M18 6L6 18"] },
  reply: { paths: ["M9 15L4 10l5-5", "M4 10h10a6 6 0 0 1 6 6v3"] },
  at: { paths: ["M16 12a4 4 0 1 1-8 0 4 4 0 0 1 8 0z", "M16 8v5a3 3 0 0 0 6 0v-1a10 10 0 1 0-4 8"] },
  edit: { paths: ["M4 20h4L19 9l-4-4L4 16v4z", "M13 7l4 4"] },
  trash: { paths: ["M4 7h16", "M9 7V4h6v3", "M6 7l1 13h10l1-13"] },
  plus: { paths: ["M12 5v14M5 12h14"] },
  panel: { paths: ["M4 5h16v14H4z", "M15 5v14"] },
  check: { paths: ["M5 12l5 5 9-10"] },
  checks: { paths: ["M2 12l5 5 9-10", "M12 16l1 1 9-10"] },
  clock: { paths: ["M12 21a9 9 0 1 0 0-18 9 9 0 0 0 0 18z", "M12 7v5l3 2"] },
  alert: { paths: ["M12 3l10 18H2L12 3z", "M12 10v5", "M12 18v.01"] },
  tool: { paths: ["M14.5 5.5a4 4 0 0 0-5 5L4 16l4 4 5.5-5.5a4 4 0 0 0 5-5l-3 3-3-1-1-3 3-3z"] },
  chevron: { paths: ["M6 9l6 6 6-6"] },
  flag: { paths: ["M5 21V4", "M5 4h12l-2 4 2 4H5"] },
  pause: { paths: ["M8 5v14M16 5v14"] },
  play: { paths: ["M7 5l12 7-12 7V5z"] },
  stop: { paths: ["M6 6h12v12H6z"] },
  user: { paths: ["M12 12a4 4 0 1 0 0-8 4 4 0 0 0 0 8z", "M4 21a8 8 0 0 1 16 0"] },
  cpu: { paths: ["M7 7h10v10H7z", "M9 3v4M15 3v4M9 17v4M15 17v4M3 9h4M3 15h4M17 9h4M17 15h4"] },
  leave: { paths: ["M15 4h4v16h-4", "M10 8l-4 4 4 4", "M6 12h10"] },
  arrowDown: { paths: ["M12 5v14", "M6 13l6 6 6-6"] },
  send: { paths: ["M4 12l16-8-6 16-3-7-7-1z"] },
  branch: { paths: ["M6 3v12", "M18 9a9 9 0 0 1-9 9"], dots: [[18, 6, 2.5], [6, 18, 2.5]] },
  folder: { paths: ["M3 6h6l2 2h10v11H3z"] },
  dot: { dots: [[12, 12, 3]] },
  smile: { paths: ["M12 21a9 9 0 1 0 0-18 9 9 0 0 0 0 18z", "M8 14a4.5 4.5 0 0 0 8 0"], dots: [[9, 9.5, 1.2], [15, 9.5, 1.2]] },
  info: { paths: ["M12 21a9 9 0 1 0 0-18 9 9 0 0 0 0 18z", "M12 11v6"], dots: [[12, 7.5, 1.2]] },
  link: { paths: ["M10 14a4 4 0 0 0 5.7 0l3-3a4 4 0 0 0-5.7-5.7l-1 1", "M14 10a4 4 0 0 0-5.7 0l-3 3a4 4 0 0 0 5.7 5.7l1-1"] },
  search: { paths: ["M11 18a7 7 0 1 0 0-14 7 7 0 0 0 0 14z", "M20 20l-4-4"] },
  history: { paths: ["M4 12a8 8 0 1 0 2.3-5.7", "M4 4v4h4", "M12 8v4l3 2"] },
  archive: { paths: ["M4 5h16v4H4z", "M6 9v10h12V9", "M10 13h4"] },
};

/** Keep focus inside `root` while it is open (drawers; dialogs use <dialog>). */
export function focusables(root) {
  return $$(
    'a[href], button:not([disabled]), input:not([disabled]):not([type="hidden"]), select:not([disabled]), textarea:not([disabled]), [tabindex]:not([tabindex="-1"])',
    root,
  ).filter((el) => !el.closest("[hidden]") && el.getClientRects().length > 0);
}

/** Debounce: run `fn` once, `ms` after the last call. */
export function debounce(fn, ms) {
  let timer = null;
  const wrapped = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
  wrapped.flush = (...args) => {
    clearTimeout(timer);
    fn(...args);
  };
  return wrapped;
}

/** Local storage that never throws (private mode, quota). */
export const local = {
  get(key, fallback = null) {
    try {
      const raw = localStorage.getItem(key);
      return raw === null ? fallback : JSON.parse(raw);
    } catch {
      return fallback;
    }
  },
  set(key, value) {
    try {
      if (value === null || value === undefined) localStorage.removeItem(key);
      else localStorage.setItem(key, JSON.stringify(value));
    } catch {
      /* storage unavailable: the setting lasts for this page only */
    }
  },
};
