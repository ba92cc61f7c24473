// One timeline entry: a chat message, a system notice or a tool activity.
//
// Message bodies are the server's `html` (markdown-it with raw HTML off, then nh3 with a small
// allow-list); the page runs under a CSP without inline script, so the HTML is inert even if a
// sanitiser bug let something through. Everything around the body is built with textContent.

import { renderAttachments } from "./attachments.js";
import { h, icon } from "./dom.js";
import { formatDateTime, formatTime, label, t } from "./i18n.js";
import { resolve } from "./mentions.js";
import { noticeText } from "./notices.js";
import { reactionsRow } from "./reactions.js";
import { researchCard } from "./research.js";
import { member, presenceOf, roster } from "./store.js";
import { threadSummary } from "./threadsummary.js";

const AVATAR_COLOURS = 8;

export function initials(name) {
  const first = [...(name || "?").trim()][0] || "?";
  return first.toUpperCase();
}

export function colourClass(id) {
  return `c${Math.abs(Number(id) || 0) % AVATAR_COLOURS}`;
}

/** The avatar button: opens the member menu (click, right-click, long-press, keyboard).
 * `still` draws the same avatar as a picture only (inside a modal dialog, for one). */
export function avatar(room, memberId, size = "md", { still = false } = {}) {
  const m = member(room, memberId);
  const name = m ? m.display_name : `#${memberId}`;
  const button = h(
    still ? "span" : "button",
    {
      type: still ? undefined : "button",
      class: ["avatar", `avatar-${size}`, colourClass(memberId), m?.kind === "agent" && "is-agent"],
      dataset: still ? { memberId: String(memberId) } : { memberId: String(memberId), memberMenu: "1" },
      attrs: still
        ? { "aria-hidden": "true" }
        : { "aria-label": t("member.menuFor", { name }), "aria-haspopup": "menu", title: name },
    },
    h("span", { class: "avatar-initial", attrs: { "aria-hidden": "true" }, text: initials(name) }),
    h("span", { class: ["status-dot", `presence-${presenceOf(room, memberId)}`], attrs: { "aria-hidden": "true" } }),
  );
  return button;
}

/** Presence changed: repaint every avatar's dot in place (nothing else is rebuilt). */
export function paintPresence(room, root = document) {
  for (const dot of root.querySelectorAll("[data-member-id] > .status-dot")) {
    const id = Number(dot.parentElement.dataset.memberId);
    dot.className = `status-dot presence-${presenceOf(room, id)}`;
  }
}

/** What the presence of a member reads as ("在线", "工作中" …); a paused person says so, and
 * one whose account an operator disabled reads 已停用 (`disabled` on the wire member). */
export function presenceLabel(room, m) {
  if (m.disabled && m.status !== "left") return label("memberStatus", "disabled");
  if (m.kind !== "agent" && m.status === "paused") return label("memberStatus", "paused");
  const state = presenceOf(room, m.id);
  return state === "left" ? label("memberStatus", "left") : label("presence", state);
}

export function authorName(room, authorId) {
  if (authorId === null || authorId === undefined) return t("msg.system");
  const m = member(room, authorId);
  return m ? m.display_name : `#${authorId}`;
}

function roleTag(room, authorId) {
  const m = member(room, authorId);
  if (!m) return null;
  const text = m.kind === "agent" ? `AI · ${label("role", m.role)}` : m.status === "left" ? t("member.left") : null;
  return text ? h("span", { class: ["role-tag", m.kind === "agent" && "is-agent"], text }) : null;
}

/**
 * Build the entry for `message`. `actions` is the list of hover actions that apply
 * ({id, icon, label, run}); `continued` collapses the header under the previous one.
 */
export function renderMessage(room, message, { actions = [], pending = null, reactions = null } = {}) {
  if (message.kind === "system" && message.meta?.research) return researchCard(room, message);
  if (message.kind === "system") return renderNotice(room, message, actions, reactions);
  if (message.kind === "tool") return renderTool(room, message);
  const mine = message.author_id === room.you;
  const el = h("article", {
    class: ["msg", mine && "mine", message.deleted && "deleted", pending && "pending", pending?.failed && "failed"],
    dataset: { id: String(message.id), seq: String(message.seq), author: String(message.author_id) },
    tabIndex: -1,
    attrs: { "aria-label": `${authorName(room, message.author_id)} ${formatTime(message.created_at)}` },
  });
  if (!mine) el.append(avatar(room, message.author_id));
  const main = h("div", { class: "msg-main" });
  const head = h(
    "header",
    { class: "msg-head" },
    h("span", { class: "author", text: mine ? t("msg.you") : authorName(room, message.author_id) }),
    mine ? null : roleTag(room, message.author_id),
    h("time", { dateTime: message.created_at, title: formatDateTime(message.created_at), text: formatTime(message.created_at) }),
    message.edited_at && !message.deleted ? h("span", { class: "edited", text: t("msg.edited") }) : null,
    message.meta?.requirement_change ? h("span", { class: "badge badge-warn", text: t("msg.requirementChange") }) : null,
  );
  main.append(head);
  if (message.reply_excerpt && !message.deleted) main.append(quoteOf(room, message));
  const body = h("div", { class: "msg-body" });
  if (message.deleted) body.textContent = t("msg.deleted");
  else {
    body.innerHTML = message.html; // sanitised by the server; inert under the CSP
    finishBody(body, room, message);
  }
  main.append(body);
  const files = renderAttachments(pending ? { meta: { attachments: pending.attachments } } : message);
  if (files) main.append(files);
  if (!message.deleted && reactions) {
    const row = reactionsRow(room, message, reactions);
    if (row) main.append(row);
  }
  const thread = threadSummary(message);
  if (thread) main.append(thread);
  if (pending) {
    main.append(h("div", { class: "msg-state", text: pending.failed ? pending.failed : t("msg.sending") }));
  }
  main.append(h("div", { class: "msg-delivery", dataset: { for: String(message.id) } }));
  // First in the DOM (it is positioned over the bubble): Tab from a message reaches its actions.
  if (actions.length && !message.deleted) main.prepend(actionBar(actions));
  el.append(main);
  return el;
}

const EXCERPT_CHARS = 140;
const BLOCKS = "p, li, pre, blockquote, h1, h2, h3, h4, h5, h6, br, td, th";

/**
 * A message's words as one line of plain text (no markdown marks), for a quote bar or a reply
 * chip, from the server's sanitised `html`. The HTML is parsed into a detached document (inert:
 * nothing runs or loads) and only its text is read; callers show the result with textContent.
 * The server makes the same kind of excerpt for `reply_excerpt` (room.rules.render.plain_text).
 */
export function plainText(html, limit = EXCERPT_CHARS) {
  const doc = new DOMParser().parseFromString(html || "", "text/html");
  for (const block of doc.body.querySelectorAll(BLOCKS)) block.after(" ");
  const flat = doc.body.textContent.split(/\s+/).filter(Boolean).join(" ");
  const chars = [...flat];
  return chars.length <= limit ? flat : `${chars.slice(0, limit - 1).join("")}…`;
}

/** What a reply's quote says of `quoted` now (mirrors the server's `reply_excerpt`). */
export function excerptOf(quoted) {
  if (quoted.deleted) return { author_id: quoted.author_id, seq: quoted.seq, excerpt: "", deleted: true };
  return { author_id: quoted.author_id, seq: quoted.seq, excerpt: plainText(quoted.html) };
}

function quoteOf(room, message) {
  const ex = message.reply_excerpt;
  return h(
    "button",
    {
      type: "button",
      class: "msg-quote",
      dataset: { jump: String(message.reply_to) },
    },
    icon("reply"),
    // Named by what it shows, after what it does (axe: the visible text is in the name).
    h("span", { class: "visually-hidden", text: t("msg.jumpToQuoted") }),
    h("span", { class: "quote-author", text: authorName(room, ex.author_id) }),
    ex.deleted
      ? h("span", { class: "quote-text quote-deleted", text: t("msg.quoteDeleted") })
      : h("span", { class: "quote-text", text: ex.excerpt }),
  );
}

function actionBar(actions) {
  const bar = h("div", { class: "msg-actions", attrs: { role: "toolbar", "aria-label": t("msg.actions") } });
  for (const action of actions) {
    bar.append(
      h(
        "button",
        {
          type: "button",
          class: ["icon-btn", action.danger && "danger"],
          tabIndex: -1,
          dataset: { action: action.id },
          attrs: { "aria-label": action.label, title: action.label },
          on: { click: (event) => action.run(event) },
        },
        icon(action.icon),
      ),
    );
  }
  return bar;
}

/** Links open in a new tab without a referrer; delivered mentions are highlighted; each code
 * block gets a copy button (its text, as written: the server's highlighting is only spans). */
function finishBody(body, room, message) {
  for (const a of body.querySelectorAll("a[href]")) {
    a.target = "_blank";
    a.rel = "noopener noreferrer nofollow";
  }
  for (const pre of body.querySelectorAll("pre")) addCopyButton(pre);
  highlightMentions(body, room, message);
}

function addCopyButton(pre) {
  const code = pre.querySelector("code") || pre;
  const button = h("button", {
    type: "button",
    class: "code-copy btn btn-small btn-ghost",
    text: t("code.copy"),
    attrs: { "aria-label": t("code.copyLabel") },
    on: {
      click: async () => {
        try {
          await navigator.clipboard.writeText(code.textContent);
          button.textContent = t("code.copied");
        } catch {
          button.textContent = t("code.copyFailed");
        }
        setTimeout(() => (button.textContent = t("code.copy")), 1500);
      },
    },
  });
  // The language and the copy button sit in a strip above the code, never over its first line.
  const head = h("div", { class: "code-head" }, pre.dataset.lang ? h("span", { class: "code-lang", text: pre.dataset.lang }) : null, button);
  const wrap = h("div", { class: "code-block" });
  pre.replaceWith(wrap);
  wrap.append(head, pre);
}

const SKIP = new Set(["CODE", "PRE", "BLOCKQUOTE"]);

/**
 * Wrap the @names that reached someone (the server's `mentions`) in a span. The resolver gives
 * the written spans in the body; we find the same text, in order, in the rendered text nodes
 * outside code and quotes (which are masked and wake nobody).
 */
export function highlightMentions(body, room, message) {
  const delivered = new Set((message.mentions || []).map(String));
  if (!delivered.size || !message.body) return;
  const result = resolve(message.body, roster(room), String(message.author_id ?? ""), []);
  const seen = new Set();
  const wanted = [];
  for (const m of result.mentions) {
    if (m.start < 0 || !delivered.has(m.memberId) || seen.has(m.start)) continue;
    seen.add(m.start);
    wanted.push({ text: message.body.slice(m.start, m.end), self: m.memberId === String(room.you), everyone: result.everyone });
  }
  if (!wanted.length) return;
  const walker = document.createTreeWalker(body, NodeFilter.SHOW_TEXT, {
    acceptNode(node) {
      for (let p = node.parentElement; p && p !== body; p = p.parentElement) if (SKIP.has(p.tagName)) return NodeFilter.FILTER_REJECT;
      return NodeFilter.FILTER_ACCEPT;
    },
  });
  let node = /** @type {Text | null} */ (walker.nextNode());
  let index = 0;
  while (node && index < wanted.length) {
    const want = wanted[index];
    const at = node.data.indexOf(want.text);
    if (at < 0) {
      node = /** @type {Text | null} */ (walker.nextNode());
      continue;
    }
    const rest = node.splitText(at);
    const after = rest.splitText(want.text.length);
    const span = h("span", { class: ["mention", want.self && "mention-me"], text: rest.data });
    rest.replaceWith(span);
    node = after;
    index += 1;
  }
}

/** @type {[string, (meta: any) => boolean][]} */
const NOTICE_KINDS = [
  ["budget", (meta) => meta.brake === "token_budget" || meta.budget !== undefined],
  ["brake", (meta) => meta.brake !== undefined && meta.brake !== "cleared"],
  ["ok", (meta) => meta.brake === "cleared"],
  ["route", (meta) => meta.route_change !== undefined],
  ["member", (meta) => meta.member_op !== undefined],
  ["lifecycle", (meta) => meta.lifecycle !== undefined || meta.project_state !== undefined],
  ["task", (meta) => ["task", "plan", "plan_start", "decision", "requirement_change"].some((k) => meta[k] !== undefined)],
  ["error", (meta) => meta.state === "failed" || meta.state === "interrupted"],
];

const NOTICE_ICONS = { brake: "alert", error: "alert", budget: "alert", ok: "check", route: "cpu", member: "user", lifecycle: "pause", task: "flag" };

export function noticeKind(message) {
  const meta = message.meta || {};
  for (const [kind, test] of NOTICE_KINDS) if (test(meta)) return kind;
  return "info";
}

const LEADING_EMOJI = /^\p{Extended_Pictographic}\uFE0F?\s*/u;

function renderNotice(room, message, actions, reactions) {
  const kind = noticeKind(message);
  const body = h("div", { class: "notice-body" });
  const worded = noticeText(message); // a coded notice, in the reader's language
  if (worded !== null) for (const line of worded.split("\n")) body.append(h("p", { text: line }));
  else body.innerHTML = message.html; // sanitised by the server
  // The kind already has an icon and a word; drop the body's own leading emoji (⛔ 🔀 ✅ …).
  const first = /** @type {Text | null} */ (document.createTreeWalker(body, NodeFilter.SHOW_TEXT).nextNode());
  if (first) first.data = first.data.replace(LEADING_EMOJI, "");
  const el = h(
    "div",
    {
      class: ["notice", `notice-${kind}`],
      dataset: { id: String(message.id), seq: String(message.seq), kind },
      attrs: { role: "note", "aria-label": t(`notice.${kind}`) },
      tabIndex: -1,
    },
    icon(NOTICE_ICONS[kind] || "dot"),
    h("span", { class: "notice-kind", text: t(`notice.${kind}`) }),
    body,
    h("time", { dateTime: message.created_at, text: formatTime(message.created_at) }),
  );
  for (const action of actions) {
    el.append(h("button", { type: "button", class: "btn btn-small", text: action.label, on: { click: action.run } }));
  }
  const row = reactions && reactionsRow(room, message, reactions);
  if (row) el.append(row);
  return el;
}

/** Tool activity: apart from speech, collapsed; one line says who used which tools. Calls the
 * server describes (`meta.tool.calls`) are listed one by one: a shell command with its exit code,
 * duration, isolation and output (collapsed, as text), a file write with its path and size. */
function renderTool(room, message) {
  const meta = message.meta || {};
  const calls = Array.isArray(meta.tool?.calls) ? meta.tool.calls : null;
  const tool = calls
    ? [...new Set(calls.map((c) => c.name))].join("、") || t("tool.unknown")
    : (typeof meta.tool === "string" && meta.tool) || meta.name || t("tool.unknown");
  const body = h("div", { class: "tool-body" });
  if (calls) body.append(h("ol", { class: "tool-calls" }, calls.map((call) => toolCall(call))));
  else body.innerHTML = message.html; // sanitised by the server
  return h(
    "details",
    { class: "tool", dataset: { id: String(message.id), seq: String(message.seq) } },
    h(
      "summary",
      {},
      icon("tool"),
      h("span", { class: "tool-who", text: authorName(room, message.author_id) }),
      h("span", { class: "tool-name", text: t("tool.used", { tool }) }),
      calls?.some((c) => c.ok === false) ? h("span", { class: "badge badge-warn", text: t("tool.failed") }) : null,
      h("time", { dateTime: message.created_at, text: formatTime(message.created_at) }),
    ),
    body,
  );
}

function toolCall(call) {
  const ok = call.ok === true ? "ok" : call.ok === false ? "failed" : null;
  return h("li", { class: ["tool-call", ok && `call-${ok}`], dataset: { name: String(call.name ?? "") } },
    h("div", { class: "call-head" },
      h("code", { class: "call-name", text: String(call.name ?? "") }),
      call.command ? null : h("code", { class: "call-args muted", text: String(call.arguments ?? "") }),
      ok ? h("span", { class: ["call-ok", ok], text: ok === "ok" ? "✓" : "✗", attrs: { title: t(`tool.${ok}`) } }) : null),
    call.command ? commandView(call.command) : null,
    call.file ? fileView(call.file) : null);
}

/** One shell run: the command, ✓ 0 / ✗ n / killed, how long, whether it was isolated, and the
 * capped output the model saw (text, collapsed). */
function commandView(run) {
  const killed = run.killed === true;
  const code = run.exit_code;
  const state = killed ? "killed" : code === 0 ? "ok" : "failed";
  const exit = killed ? t("tool.killed") : code === 0 ? "✓ 0" : `✗ ${code ?? "?"}`;
  const output = typeof run.output === "string" ? run.output : "";
  return h("div", { class: "tool-command", dataset: { exit: String(code ?? ""), state } },
    h("code", { class: "command-line", text: `$ ${run.command ?? ""}` }),
    h("div", { class: "command-facts" },
      h("span", { class: ["command-exit", state], attrs: { title: t("tool.exitCode") }, text: exit }),
      typeof run.duration_secs === "number" ? h("span", { class: "command-duration muted", text: formatSecs(run.duration_secs) }) : null,
      run.sandboxed === false ? h("span", { class: "badge badge-warn command-unsandboxed", text: t("tool.unsandboxed") }) : null,
      run.command_result_id ? h("span", { class: "muted command-id", text: t("tool.commandId", { id: run.command_result_id }) }) : null),
    output
      ? h("details", { class: "command-output" }, h("summary", { text: run.truncated ? t("tool.outputTruncated") : t("tool.output") }), h("pre", { text: output }))
      : h("span", { class: "muted command-output", text: t("tool.noOutput") }));
}

function fileView(file) {
  return h("div", { class: "tool-file" },
    h("code", { class: "file-path", text: String(file.path ?? "") }),
    typeof file.bytes === "number" ? h("span", { class: "muted file-size", text: formatSize(file.bytes) }) : null);
}

function formatSecs(secs) {
  return secs < 1 ? `${Math.round(secs * 1000)} ms` : `${secs.toFixed(secs < 10 ? 1 : 0)} s`;
}

export function formatSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}
