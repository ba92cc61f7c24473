// Deterministic @mention resolution — the browser half of shared/mentions/SPEC.md.
//
// The server's room/rules/mentions.py is authoritative; this module gives the composer the same answer
// before sending (the pre-send preview). Both must pass shared/mentions/vectors.json:
//     node web/mentions-check.mjs shared/mentions/vectors.json
//
// Spans are UTF-16 code-unit indices (JavaScript string indices); Python reports code points.
// Wherever a rule counts characters (word length, deletions, the NFC window) this module counts
// code points, so both sides decide the same. Section numbers (§n) refer to SPEC.md.

// §1. Spelled out: JavaScript's `\s` and Python's `str.isspace` disagree (U+FEFF, U+001C–U+001F).
const WS_CLASS =
  "[\\t\\n\\x0b\\x0c\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
const WS_RE = new RegExp(WS_CLASS);
const WHITESPACE = new Set(
  "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009" +
    "\u200a\u2028\u2029\u202f\u205f\u3000",
);
const ASCII_WORD = /^[A-Za-z0-9_]$/;

// §4. CJK punctuation; all of it may also precede an at-sign (§3).
const CJK_PUNCT = "（［｛〈《「『【〔〖“‘" + "）］｝〉》」』】〕〗”’" + "，。、；：！？…—～";
const BOUNDARY = new Set([...WHITESPACE, ...CJK_PUNCT, ...",;)]}>\"'*~([{<"]);
const BOUNDARY_UNLESS_WORD = new Set(".:!?"); // `@lin.` ends at lin, `@lin.zhang` does not
const BEFORE_AT = new Set([...WHITESPACE, ...CJK_PUNCT, ..."([{<\"'*~,;"]);

const FENCE_RE = /^ {0,3}(`{3,}|~{3,})([\s\S]*)$/;
const QUOTE_RE = /^[ \t]*>/;
const BLANK_RE = new RegExp(`^${WS_CLASS}*$`);
const ASCII_LETTERS = new Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
const SCHEME_CHARS = new Set([...ASCII_LETTERS, ..."0123456789+.-"]);
const URL_CHARS = new Set([...ASCII_LETTERS, ..."0123456789-._~:/?#[]@!$&'()*+,;=%"]);
const EMAIL_LOCAL_CHARS = new Set([...ASCII_LETTERS, ..."0123456789._%+-"]);
const EMAIL_DOMAIN_RE = /[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+/y; // sticky: only via emails()
const WWW_RE = /^[Ww]{3}$/;
// Global regexes are only used through matchAll, which copies them: no shared lastIndex state.
const BACKTICKS_RE = /`+/g;
const AT_RE = /[@＠]/g;

// Upper bound of len(x) / len(NFC(x)) in code points: no canonical decomposition is longer than 4.
const NFC_EXPANSION = 4;

const EVERYONE_NAMES = ["all", "everyone", "所有人"];
const HUMANS_NAMES = ["humans", "用户"];

// Ranks of §5: lower wins when entries share a folded name; a tombstone counts only when no live
// member has the name (a departed name never hides a live member).
const RANK_GROUP = 0;
const RANK_HANDLE = 1;
const RANK_ALIAS = 2;
const RANK_DISPLAY = 3;
const RANK_TOMBSTONE = 4;
const VIA_BY_RANK = { 1: "handle", 2: "alias", 3: "display_name" };
// §5: an unmatched plain word with a letter outside ASCII (`@张三`) is `unknown` up to this length.
export const UNKNOWN_WORD_MAX = 32;
const FOREIGN_LETTER = /[^\x00-\x7f]/u;
const LETTER = /^\p{L}$/u;

/** True if `word` holds a letter outside ASCII: a person's name, not a code word (`@param`). */
function hasForeignLetter(word) {
  if (!FOREIGN_LETTER.test(word)) return false;
  for (const c of word) if (c.charCodeAt(0) >= 128 && LETTER.test(c)) return true;
  return false;
}

const isAscii = (unit) => unit.charCodeAt(0) < 128;

/** Map only A-Z (SPEC §1); Unicode case mapping differs between platforms. */
const fold = (s) => s.replace(/[A-Z]+/g, (m) => m.toLowerCase());
const nameKey = (s) => fold(s.normalize("NFC"));
const hasWhitespace = (s) => [...s].some((c) => WHITESPACE.has(c));

/** Compare strings by code point, as Python's `sorted` does (UTF-16 order differs above U+FFFF). */
export function byCodePoint(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return shiftSurrogates(x) - shiftSurrogates(y);
  }
  return a.length - b.length;
}

function shiftSurrogates(unit) {
  if (unit >= 0xe000) return unit - 0x800;
  if (unit >= 0xd800) return unit + 0x2000;
  return unit;
}

/** The key and every string made by deleting one code point from it (never the empty one). */
function deletions(key) {
  const cps = Array.from(key);
  const out = new Set([key]);
  for (let i = 0; i < cps.length; i++) {
    out.add(cps.slice(0, i).join("") + cps.slice(i + 1).join(""));
  }
  out.delete("");
  return out;
}

/**
 * Build the lookup structures for one roster in the vectors' format (SPEC §8):
 * `{members: [{id, kind, handle, display_name, aliases, status}],
 *   tombstones: [{name, member_id}]}`. Throws on a duplicate member id.
 */
export function buildRoster(json) {
  const byId = new Map();
  for (const m of json.members) {
    if (byId.has(m.id)) throw new Error(`duplicate member id ${JSON.stringify(m.id)}`);
    byId.set(m.id, {
      id: m.id,
      kind: m.kind,
      handle: m.handle ?? "",
      displayName: m.display_name ?? "",
      aliases: [...(m.aliases ?? [])],
      status: m.status ?? "active",
    });
  }
  const tombstones = json.tombstones ?? [];
  const entries = new Map(); // key -> [[rank, member id or group]]
  const near = new Map();
  const prefixes = new Map();
  const spacedHeads = new Set();
  const add = (name, rank, ref) => {
    const key = nameKey(name);
    if (!key) return;
    if (!entries.has(key)) entries.set(key, []);
    entries.get(key).push([rank, ref]);
  };
  for (const name of EVERYONE_NAMES) add(name, RANK_GROUP, "all");
  for (const name of HUMANS_NAMES) add(name, RANK_GROUP, "humans");
  for (const t of tombstones) add(t.name, RANK_TOMBSTONE, t.member_id);
  for (const m of byId.values()) {
    const names = [
      [m.handle, RANK_HANDLE],
      [m.displayName, RANK_DISPLAY],
      ...m.aliases.map((a) => [a, RANK_ALIAS]),
    ];
    for (const [name, rank] of names) {
      add(name, rank, m.id);
      const key = nameKey(name);
      if (m.status !== "left" && key) {
        for (const variant of deletions(key)) {
          if (!near.has(variant)) near.set(variant, new Set());
          near.get(variant).add(m.id);
        }
        let prefix = "";
        for (const c of key) {
          prefix += c;
          if (!prefixes.has(prefix)) prefixes.set(prefix, new Set());
          prefixes.get(prefix).add(m.id);
        }
        const space = key.search(WS_RE);
        if (space > 0) spacedHeads.add(key.slice(0, space));
      }
    }
  }
  const live = [...byId.values()].filter((m) => m.status !== "left");
  live.sort((a, b) => byCodePoint(a.id, b.id));
  const bracket = new Map();
  const plain = new Map();
  const lengths = new Set();
  let maxLen = 0;
  for (const [key, found] of entries) {
    const target = resolveEntries(found, byId);
    bracket.set(key, target);
    maxLen = Math.max(maxLen, Array.from(key).length);
    if (!hasWhitespace(key)) {
      plain.set(key, target);
      lengths.add(key.length);
    }
  }
  return Object.freeze({
    byId,
    everyone: live.map((m) => m.id),
    humans: live.filter((m) => m.kind === "human").map((m) => m.id),
    tombstoned: new Set(tombstones.map((t) => t.member_id)),
    bracket,
    plain,
    // Distinct plain-name lengths (UTF-16), longest first: the fast path tries only these ends.
    lengths: [...lengths].sort((a, b) => b - a),
    maxLen, // in code points
    near,
    prefixes,
    spacedHeads,
  });
}

/** Resolve the entries sharing one folded name (SPEC §5, §6): a group name first, then the best
 * rank among live members; only a name no live member has is departed. */
function resolveEntries(found, byId) {
  const groups = found.filter(([rank]) => rank === RANK_GROUP).map(([, ref]) => ref).sort(byCodePoint);
  if (groups.length) return { action: groups[0], ids: [], via: groups[0] };
  const live = found.filter(([rank, ref]) => rank !== RANK_TOMBSTONE && byId.get(ref).status !== "left");
  if (!live.length) {
    return { action: "departed", ids: [...new Set(found.map(([, ref]) => ref))].sort(byCodePoint), via: "" };
  }
  const best = Math.min(...live.map(([rank]) => rank));
  const ids = [...new Set(live.filter(([rank]) => rank === best).map(([, ref]) => ref))];
  ids.sort(byCodePoint);
  if (ids.length > 1) return { action: "ambiguous", ids, via: "" };
  return { action: "member", ids, via: VIA_BY_RANK[best] };
}

// ---------------------------------------------------------------------------------- masking (§2)

function fenceBlocks(text) {
  const blocks = [];
  let fence = ""; // the opener's run while inside a block
  let blockStart = 0;
  let pos = 0;
  const n = text.length;
  while (pos <= n) {
    const nl = text.indexOf("\n", pos);
    const end = nl < 0 ? n : nl;
    const m = FENCE_RE.exec(text.slice(pos, end));
    if (!fence) {
      if (m && !(m[1][0] === "`" && m[2].includes("`"))) {
        fence = m[1];
        blockStart = pos;
      }
    } else if (m && m[1][0] === fence[0] && m[1].length >= fence.length && BLANK_RE.test(m[2])) {
      blocks.push([blockStart, end]);
      fence = "";
    }
    pos = end + 1;
  }
  if (fence) blocks.push([blockStart, n]);
  return blocks;
}

function lineMasks(line, offset) {
  const spans = [];
  if (line.includes("`")) spans.push(...codeSpans(line));
  if (line.includes("](")) spans.push(...linkTargets(line));
  spans.push(...urls(line));
  if (line.includes("@")) spans.push(...emails(line));
  return merge(spans).map(([a, b]) => [a + offset, b + offset]);
}

/** Backtick runs paired with the next run of the same width (§2.3), in linear time. */
function codeSpans(line) {
  const runs = [...line.matchAll(BACKTICKS_RE)].map((m) => [m.index, m.index + m[0].length]);
  const byWidth = new Map();
  runs.forEach(([a, b], index) => {
    if (!byWidth.has(b - a)) byWidth.set(b - a, { runs: [], next: 0 });
    byWidth.get(b - a).runs.push(index);
  });
  const spans = [];
  let i = 0;
  while (i < runs.length) {
    const same = byWidth.get(runs[i][1] - runs[i][0]);
    while (same.next < same.runs.length && same.runs[same.next] <= i) same.next += 1;
    if (same.next < same.runs.length) {
      const close = same.runs[same.next];
      spans.push([runs[i][0], runs[close][1]]);
      i = close + 1;
    } else {
      i += 1; // no partner: a literal backtick run
    }
  }
  return spans;
}

// The URL, email and link-target rules are written as regexes in SPEC §2, but a backtracking
// engine is quadratic on hostile lines with them (a long run of letters and no `://`), so they
// are scanned from their anchors instead; room/rules/mentions.py does the same and tests both ways.

/** The `(…)` of each `](…)` (§2.4). */
function linkTargets(line) {
  const spans = [];
  let k = line.indexOf("](");
  while (k >= 0) {
    const close = line.indexOf(")", k + 2);
    if (close < 0) break; // no `)` after this `](`, so none after any later one either
    spans.push([k + 1, close + 1]);
    k = line.indexOf("](", close + 1);
  }
  return spans;
}

/** URLs (§2.5): a URL runs from its leftmost start to the end of its run of URL characters. */
function urls(line) {
  const n = line.length;
  const starts = [];
  for (let k = line.indexOf("://"); k >= 0; k = line.indexOf("://", k + 1)) {
    if (!(k + 3 < n && URL_CHARS.has(line[k + 3]))) continue;
    let j = k;
    while (j > 0 && SCHEME_CHARS.has(line[j - 1])) j -= 1;
    while (j < k && !ASCII_LETTERS.has(line[j])) j += 1;
    if (j < k) starts.push(j);
  }
  for (let k = line.indexOf(".", 3); k >= 0; k = line.indexOf(".", k + 1)) {
    if (WWW_RE.test(line.slice(k - 3, k)) && k + 1 < n && URL_CHARS.has(line[k + 1])) {
      starts.push(k - 3);
    }
  }
  starts.sort((a, b) => a - b);
  const spans = [];
  for (const j of starts) {
    if (spans.length && j < spans[spans.length - 1][1]) continue;
    let end = j;
    while (end < n && URL_CHARS.has(line[end])) end += 1;
    spans.push([j, end]);
  }
  return spans;
}

/** Emails (§2.6), decided at each `@`: the local part cannot contain one. */
function emails(line) {
  const spans = [];
  let prevEnd = 0;
  for (let k = line.indexOf("@"); k >= 0; k = line.indexOf("@", k + 1)) {
    let j = k;
    while (j > prevEnd && EMAIL_LOCAL_CHARS.has(line[j - 1])) j -= 1;
    if (j === k) continue;
    EMAIL_DOMAIN_RE.lastIndex = k + 1;
    const domain = EMAIL_DOMAIN_RE.exec(line);
    if (domain) {
      spans.push([j, k + 1 + domain[0].length]);
      prevEnd = k + 1 + domain[0].length;
    }
  }
  return spans;
}

function merge(spans) {
  const merged = [];
  for (const [a, b] of [...spans].sort((x, y) => x[0] - y[0] || x[1] - y[1])) {
    const last = merged[merged.length - 1];
    if (last && a <= last[1]) last[1] = Math.max(last[1], b);
    else merged.push([a, b]);
  }
  return merged;
}

/** Index of the first element of sorted `xs` greater than `x` (or `>= x` when `orEqual`). */
function bisect(xs, x, orEqual = false) {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < x || (!orEqual && xs[mid] === x)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * The line under the at-sign being resolved, with its masked regions (§2). At-signs are visited
 * in increasing order, so the line only moves forward and every lookup stays linear overall.
 */
class Line {
  constructor(text) {
    this.text = text;
    this.fences = text.includes("```") || text.includes("~~~") ? fenceBlocks(text) : [];
    this.fenceStarts = this.fences.map(([a]) => a);
    this.end = -1;
    this.regions = [];
    this.starts = [];
    this.closers = null;
  }

  moveTo(pos) {
    if (pos < this.end) return;
    const text = this.text;
    const start = pos > 0 ? text.lastIndexOf("\n", pos - 1) + 1 : 0;
    const nl = text.indexOf("\n", pos);
    this.end = nl < 0 ? text.length : nl;
    const line = text.slice(start, this.end);
    const i = bisect(this.fenceStarts, pos) - 1;
    if (i >= 0 && pos < this.fences[i][1]) this.regions = [this.fences[i]];
    else if (QUOTE_RE.test(line)) this.regions = [[start, this.end]];
    else this.regions = lineMasks(line, start);
    this.starts = this.regions.map(([a]) => a);
    this.closers = null;
  }

  /** The first `」` of this line in [lo, hi), or -1. */
  closer(lo, hi) {
    if (this.closers === null) {
      this.closers = [];
      let k = this.text.indexOf("」", lo);
      while (k >= 0 && k < this.end) {
        this.closers.push(k);
        k = this.text.indexOf("」", k + 1);
      }
    }
    const i = bisect(this.closers, lo, true);
    return i < this.closers.length && this.closers[i] < hi ? this.closers[i] : -1;
  }
}

// --------------------------------------------------------------------------------- matching (§5)

function isBoundary(text, q) {
  if (q >= text.length) return true;
  const c = text[q];
  if (BOUNDARY.has(c)) return true;
  return BOUNDARY_UNLESS_WORD.has(c) && (q + 1 >= text.length || !ASCII_WORD.test(text[q + 1]));
}

/** Index `count` code points after `s`, but not beyond `limit`. */
function advance(text, s, count, limit) {
  let q = s;
  for (let i = 0; i < count && q < limit; i++) q += text.codePointAt(q) > 0xffff ? 2 : 1;
  return Math.min(q, limit);
}

/** The longest name at `s` followed by a boundary, and the longest one that is not. */
function matchPlain(text, s, limit, roster) {
  let unbounded = null;
  const bound = advance(text, s, NFC_EXPANSION * roster.maxLen, limit);
  const window = text.slice(s, bound);
  const tryEnd = (q, key) => {
    const target = roster.plain.get(key);
    if (target === undefined) return null;
    if (isBoundary(text, q)) return [q, target];
    if (unbounded === null) unbounded = [q, target];
    return null;
  };
  if (window.normalize("NFC") === window) {
    // Fast path: in NFC text a name of length L can only end at s + L.
    for (const n of roster.lengths) {
      if (s + n > bound) continue;
      const found = tryEnd(s + n, fold(text.slice(s, s + n)));
      if (found) return [found, unbounded];
    }
  } else {
    // Slow path: try every end. A plain name has no whitespace and NFC keeps whitespace, so the
    // first whitespace bounds the ends to try (normalising every prefix is quadratic).
    const space = window.search(WS_RE);
    for (let q = space < 0 ? bound : s + space; q > s; q--) {
      const found = tryEnd(q, nameKey(text.slice(s, q)));
      if (found) return [found, unbounded];
    }
  }
  return [null, unbounded];
}

/** End of the word after an at-sign (for the unknown-name check) and its length in code points;
 * the word stops at a later at-sign (SPEC §5). */
function wordEnd(text, s, limit, longest) {
  let q = s;
  let count = 0;
  while (q < limit && !isBoundary(text, q) && (q === s || (text[q] !== "@" && text[q] !== "＠"))) {
    q = Math.min(limit, q + (text.codePointAt(q) > 0xffff ? 2 : 1));
    count += 1;
    if (count > longest) return [-1, count];
  }
  return [q, count];
}

// -------------------------------------------------------------------------------- resolution (§6)

function hint(code, name, roster, ids, bracket, side) {
  const written = bracket ? `@「${name}」` : `@${name}`;
  const refs = ids.map((id) => ref(roster, id)).join("、");
  switch (code) {
    case "needs_boundary":
      if (side === "before") return `请在 @ 前加空格或标点（例如 … ${written}）`;
      if (side === "both") return `请在 @ 前和名字后加空格（例如 … ${written} …）`;
      return `请在名字后加空格或标点（例如 ${written}）`;
    case "ambiguous":
      return `有 ${ids.length} 位成员都叫 ${name}，请改用 ${refs}`;
    case "unknown":
      return `没有名为 ${name} 的成员` + (ids.length ? `，是不是想找 ${refs}？` : "");
    case "departed":
      return `${name} 已离开项目，不会收到这条消息`;
    case "self":
      return "不能提及自己，已忽略";
    default:
      return `AI 成员不能用 ${written} 通知所有人，请直接提及需要的成员`;
  }
}

function ref(roster, id) {
  const m = roster.byId.get(id);
  if (m === undefined) return id;
  if (m.handle && !hasWhitespace(m.handle)) return `@${m.handle}`;
  return `@「${m.displayName}」`;
}

class Resolver {
  constructor(text, roster, sender) {
    this.text = text;
    this.roster = roster;
    this.sender = sender;
    this.mentions = [];
    this.diagnostics = [];
    this.everyone = false;
    this.humans = false;
  }

  diagnose(code, name, [start, end], ids = [], { bracket = false, side = "after" } = {}) {
    const h = hint(code, name, this.roster, ids, bracket, side);
    this.diagnostics.push({ code, name, start, end, hint: h, candidates: [...ids] });
  }

  scan() {
    const text = this.text;
    const line = new Line(text);
    const masked = new Map();
    for (const at of text.matchAll(AT_RE)) {
      const p = at.index;
      const before = p ? text[p - 1] : " ";
      const starts = BEFORE_AT.has(before);
      // After an ASCII letter, digit, `/`, `.`… an at-sign is silent whatever surrounds it. After
      // other non-ASCII (`请@前端 看`) it is read, to say why it is not a mention.
      if (!starts && (isAscii(before) || before === "＠")) continue; // SPEC §3: `＠@lin` is read from its first at-sign
      line.moveTo(p);
      const i = bisect(line.starts, p);
      if (i && p < line.regions[i - 1][1]) {
        masked.set(line.starts[i - 1], line.regions[i - 1]);
        continue;
      }
      // Names stop at the end of the line or where the next masked region starts.
      const limit = i < line.starts.length ? line.starts[i] : line.end;
      this.atSign(p, limit, line, starts);
    }
    return [...masked.values()].sort((x, y) => x[0] - y[0]);
  }

  atSign(p, limit, line, starts) {
    const { text, roster } = this;
    const s = p + 1;
    if (s < limit && text[s] === "「") {
      const close = line.closer(s + 1, limit);
      if (close === s + 1) return; // `@「」` names nobody and is not worth a diagnostic
      if (close > 0) {
        this.bracket(p, close, starts);
        return;
      }
    }
    const [found, unbounded] = matchPlain(text, s, limit, roster);
    if (found) {
      const [q, target] = found;
      if (starts) this.apply(target, text.slice(s, q), [p, q], target.via);
      else this.diagnose("needs_boundary", text.slice(s, q), [p, q], [], { side: "before" });
      return;
    }
    if (unbounded) {
      const q = unbounded[0];
      const name = text.slice(s, q); // q < text.length: the end of the text is a boundary
      if (!(isAscii(name[name.length - 1]) && isAscii(text[q]))) {
        this.diagnose("needs_boundary", name, [p, q], [], { side: starts ? "after" : "both" });
        return;
      }
    }
    if (starts) {
      // Longer words cannot be near a name, even once NFC has shortened them.
      const longest = Math.max(NFC_EXPANSION * (roster.maxLen + 1), UNKNOWN_WORD_MAX);
      const [end, count] = wordEnd(text, s, limit, longest);
      const word = end >= 0 ? text.slice(s, end) : "";
      if (count > 0 && end >= 0 && !roster.plain.has(nameKey(word))) {
        const near = count >= 2 ? this.near(word) : [];
        const foreign = count <= UNKNOWN_WORD_MAX && hasForeignLetter(word);
        if (near.length || foreign || roster.spacedHeads.has(nameKey(word))) {
          this.diagnose("unknown", word, [p, end], this.candidates(word, near));
        }
      }
    }
  }

  bracket(p, close, starts) {
    const name = this.text.slice(p + 2, close);
    const target = this.roster.bracket.get(nameKey(name));
    const span = /** @type {[number, number]} */ ([p, close + 1]);
    if (!starts) {
      if (target !== undefined) {
        this.diagnose("needs_boundary", name, span, [], { bracket: true, side: "before" });
      }
    } else if (target !== undefined) {
      this.apply(target, name, span, "bracket");
    } else {
      this.diagnose("unknown", name, span, this.candidates(name), { bracket: true });
    }
  }

  near(word) {
    const key = nameKey(word);
    if (Array.from(key).length > this.roster.maxLen + 1) return []; // too long to be near a name
    const ids = new Set();
    for (const variant of deletions(key)) {
      for (const id of this.roster.near.get(variant) ?? []) ids.add(id);
    }
    return [...ids].sort(byCodePoint);
  }

  /** Who an unknown `word` may have meant (§5): live members with a name starting with it
   * (`@前端` suggests 「前端 小林」), then those with a name near it; each group sorted. */
  candidates(word, near = null) {
    const first = [...(this.roster.prefixes.get(nameKey(word)) ?? [])].sort(byCodePoint);
    const then = (near ?? this.near(word)).filter((id) => !first.includes(id)).sort(byCodePoint);
    return [...first, ...then];
  }

  apply(target, name, span, via) {
    const bracket = via === "bracket";
    if (target.action === "all") {
      const author = this.roster.byId.get(this.sender);
      if (author === undefined || author.kind !== "human") {
        this.diagnose("all_not_allowed", name, span, [], { bracket });
      } else {
        this.everyone = true;
        this.addGroup(span, "all");
      }
    } else if (target.action === "humans") {
      this.humans = true;
      this.addGroup(span, "humans");
    } else if (target.action !== "member") {
      this.diagnose(target.action, name, span, target.ids, { bracket });
    } else if (target.ids[0] === this.sender) {
      this.diagnose("self", name, span, [], { bracket });
    } else {
      this.mentions.push({ memberId: target.ids[0], start: span[0], end: span[1], via });
    }
  }

  addGroup([start, end], via) {
    const ids = via === "all" ? this.roster.everyone : this.roster.humans;
    for (const id of ids) {
      if (id !== this.sender) this.mentions.push({ memberId: id, start, end, via });
    }
  }

  chips(chips) {
    const named = new Set(this.mentions.map((m) => m.memberId));
    const seen = new Set();
    for (const chip of chips) {
      if (seen.has(chip)) continue;
      seen.add(chip);
      const member = this.roster.byId.get(chip);
      if (chip === this.sender) this.diagnose("self", chip, [-1, -1]);
      else if (member === undefined && !this.roster.tombstoned.has(chip)) {
        this.diagnose("unknown", chip, [-1, -1]);
      } else if (member === undefined || member.status === "left") {
        this.diagnose("departed", chip, [-1, -1], [chip]);
      } else if (!named.has(chip)) {
        named.add(chip);
        this.mentions.push({ memberId: chip, start: -1, end: -1, via: "chip" });
      }
    }
  }
}

/**
 * Decide who `text` (plus composer `chips`, member ids) reaches, by the rules of SPEC.md.
 * Returns {mentioned, mentions, diagnostics, masked, everyone, humansOnlyGroup}; spans are UTF-16
 * indices into `text`. Never throws for any string input.
 */
export function resolve(text, roster, senderId, chips = []) {
  const resolver = new Resolver(text, roster, senderId);
  let masked = [];
  // Fast path: most messages name nobody, and then there is nothing to mask either.
  if (text.includes("@") || text.includes("＠")) masked = resolver.scan();
  resolver.chips(chips);
  const mentioned = [...new Set(resolver.mentions.map((m) => m.memberId))].sort(byCodePoint);
  return {
    mentioned,
    mentions: resolver.mentions,
    diagnostics: resolver.diagnostics,
    masked,
    everyone: resolver.everyone,
    humansOnlyGroup: resolver.humans,
  };
}

/** How many AI (agent) members a resolution reaches. */
export function agentsReached(resolution, roster) {
  return resolution.mentioned.filter((id) => roster.byId.get(id)?.kind === "agent").length;
}
