// Search highlights. A result's `snippet_html` is escaped text with <mark>…</mark> around the
// matches (and, across projects, <code>/<strong>/<em>/<del> for its inline markdown); it is never
// given to innerHTML: snippetNodes() splits it on those tags, decodes the entities of each piece
// and builds text nodes and elements, so anything else in the string stays visible text.
// highlightIn() marks the same words inside a message or record.

import { h } from "./dom.js";

const NAMED = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'", nbsp: "\u00a0" };

export function decodeEntities(text) {
  return text.replace(/&(#x[0-9a-f]+|#\d+|[a-z]+);/gi, (whole, name) => {
    if (name[0] === "#") {
      const code = name[1] === "x" || name[1] === "X" ? parseInt(name.slice(2), 16) : parseInt(name.slice(1), 10);
      return Number.isFinite(code) && code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : whole;
    }
    return NAMED[name.toLowerCase()] ?? whole;
  });
}

// The elements a snippet may carry (docs/search.md): <mark> around matches, and the inline
// markdown the cross-project search renders. Any other text that looks like a tag stays text.
const SNIPPET_TAGS = ["mark", "code", "strong", "em", "del"];
const TAG = new RegExp(`(</?(?:${SNIPPET_TAGS.join("|")})>)`, "i");

/** The pieces of a snippet: [{text, marked}], marked inside <mark>…</mark>. */
export function snippetParts(html) {
  const parts = [];
  let marked = false;
  for (const piece of String(html || "").split(TAG)) {
    if (/^<mark>$/i.test(piece)) marked = true;
    else if (/^<\/mark>$/i.test(piece)) marked = false;
    else if (TAG.test(piece) && /^<\/?[a-z]+>$/i.test(piece)) continue;
    else if (piece) parts.push({ text: decodeEntities(piece), marked });
  }
  return parts;
}

/** DOM nodes for a snippet: text nodes and the allow-listed elements, nested as the tags say
 * (a closing tag closes back to its element; a stray one is dropped). Never innerHTML. */
export function snippetNodes(html) {
  const root = document.createDocumentFragment();
  /** @type {Array<Node>} */
  const stack = [root];
  for (const piece of String(html || "").split(TAG)) {
    if (!piece) continue;
    const tag = /^<(\/?)([a-z]+)>$/i.exec(piece);
    if (tag && SNIPPET_TAGS.includes(tag[2].toLowerCase())) {
      const name = tag[2].toLowerCase();
      if (!tag[1]) {
        const el = h(name, {});
        stack[stack.length - 1].appendChild(el);
        stack.push(el);
      } else {
        const at = stack.findLastIndex((node) => node instanceof Element && node.localName === name);
        if (at > 0) stack.length = at;
      }
      continue;
    }
    stack[stack.length - 1].appendChild(document.createTextNode(decodeEntities(piece)));
  }
  return [...root.childNodes];
}

/** The words to mark: what the snippet marked, else the query's words without operators. */
export function termsOf(snippetHtml, query = "") {
  const marked = snippetParts(snippetHtml).filter((p) => p.marked).map((p) => p.text.trim());
  const words = marked.length
    ? marked
    : String(query).replace(/["*()^:+]/g, " ").split(/\s+/).filter((w) => w && !/^(AND|OR|NOT|NEAR)$/.test(w));
  return [...new Set(words.filter(Boolean))].sort((a, b) => b.length - a.length);
}

/** Wrap each occurrence of `terms` in `root`'s text (case-insensitive) with <mark class="hit">.
 * Returns the first mark, or null. Text inside buttons (actions) is left alone. */
export function highlightIn(root, terms) {
  const words = terms.filter((w) => w && w.length);
  if (!words.length) return null;
  const pattern = new RegExp(words.map(escapeRegExp).join("|"), "gi");
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
    acceptNode: (node) => (node.parentElement?.closest("button, mark, .msg-actions, time") ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
  });
  /** @type {Text[]} */
  const nodes = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) nodes.push(/** @type {Text} */ (node));
  let first = null;
  for (const node of nodes) {
    const text = node.data;
    pattern.lastIndex = 0;
    if (!pattern.test(text)) continue;
    pattern.lastIndex = 0;
    const frag = document.createDocumentFragment();
    let at = 0;
    for (const match of text.matchAll(pattern)) {
      if (match.index > at) frag.append(text.slice(at, match.index));
      const mark = h("mark", { class: "hit", text: match[0] });
      first ??= mark;
      frag.append(mark);
      at = match.index + match[0].length;
    }
    if (at < text.length) frag.append(text.slice(at));
    node.replaceWith(frag);
  }
  return first;
}

/** Remove the marks highlightIn() added under `root`. */
export function clearHighlights(root) {
  for (const mark of root.querySelectorAll("mark.hit")) {
    const parent = mark.parentNode;
    mark.replaceWith(...mark.childNodes);
    parent?.normalize();
  }
}

function escapeRegExp(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
