// Project Room — the browser page. Plain ES module, no build step.
// State comes from the server: /api/me for who we are and our projects, /ws for the timeline.
// Message HTML is rendered and sanitised on the server (markdown-it + nh3) and the page runs
// under a strict CSP, so it is inserted as-is; everything else is set with textContent.

const $ = (sel) => document.querySelector(sel);

const state = {
  me: null,
  projects: [],
  projectId: null,
  members: new Map(),
  you: null,
  lastSeq: 0,          // highest event seq applied: the resume cursor
  epoch: null,
  oldestSeq: null,     // oldest message loaded, for history paging
  hasMore: true,
  loadingHistory: false,
  ws: null,
  retry: 0,
  pending: new Map(),  // client_txn_id -> draft text, until acked
};

async function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  if (options.method && options.method !== "GET" && state.me) headers["X-CSRF-Token"] = state.me.csrf_token;
  const response = await fetch(path, { ...options, headers, credentials: "same-origin" });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw Object.assign(new Error(data?.error?.message || response.statusText), { status: response.status, data });
  return data;
}

async function boot() {
  try {
    state.me = await api("/api/me");
  } catch (error) {
    if (error.status === 401) {
      $("#app").hidden = true;
      $("#signed-out").hidden = false;
      return;
    }
    throw error;
  }
  state.projects = state.me.projects;
  renderProjects();
  window.addEventListener("hashchange", route);
  route();
}

function renderProjects() {
  const nav = $("#project-list");
  nav.replaceChildren();
  for (const project of state.projects) {
    const link = document.createElement("a");
    link.href = `#/p/${project.id}`;
    link.textContent = project.name;
    link.dataset.projectId = project.id;
    if (project.id === state.projectId) link.setAttribute("aria-current", "page");
    nav.append(link);
  }
}

function route() {
  const match = location.hash.match(/^#\/p\/(\d+)/);
  const id = match ? Number(match[1]) : state.projects[0]?.id;
  if (id && id !== state.projectId) openProject(id);
}

function openProject(id) {
  state.projectId = id;
  state.lastSeq = 0;
  state.epoch = null;
  state.oldestSeq = null;
  state.hasMore = true;
  state.members.clear();
  $("#timeline").replaceChildren();
  const project = state.projects.find((p) => p.id === id);
  $("#room-title").textContent = project ? project.name : "";
  $("#composer").hidden = false;
  renderProjects();
  connect();
}

function connect() {
  if (state.ws) state.ws.close();
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
  const ws = new WebSocket(url);
  state.ws = ws;
  setConn("连接中…");
  ws.addEventListener("open", () => {
    state.retry = 0;
    const frame = { type: "subscribe", project_id: state.projectId };
    if (state.epoch !== null) Object.assign(frame, { since: state.lastSeq, epoch: state.epoch });
    ws.send(JSON.stringify(frame));
  });
  ws.addEventListener("message", (event) => handle(JSON.parse(event.data)));
  ws.addEventListener("close", () => {
    if (state.ws !== ws) return;
    setConn("已断开，正在重连…");
    const delay = Math.min(10000, 500 * 2 ** state.retry++);
    setTimeout(() => state.ws === ws && connect(), delay);
  });
}

function setConn(text) {
  $("#conn-state").textContent = text;
}

function send(frame) {
  if (state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify(frame));
}

function handle(frame) {
  switch (frame.type) {
    case "subscribed": {
      state.you = frame.you;
      state.epoch = frame.project.epoch;
      for (const m of frame.members) state.members.set(m.id, m);
      setConn("已连接");
      if (frame.since === null || frame.since === undefined) {
        state.lastSeq = frame.head_seq;
        loadHistory();
      }
      resendPending();
      break;
    }
    case "batch":
      for (const inner of frame.frames) handle(inner);
      break;
    case "message":
    case "message_updated":
      if (frame.project_id !== state.projectId) return;
      if (frame.seq <= state.lastSeq) return; // already applied (no duplicates)
      state.lastSeq = frame.seq;
      upsertMessage(frame.message, true);
      break;
    case "history":
      state.loadingHistory = false;
      state.hasMore = frame.has_more;
      prependHistory(frame.messages);
      break;
    case "ack":
      state.pending.delete(frame.client_txn_id);
      break;
    case "resync_required":
      state.epoch = null;
      state.lastSeq = 0;
      state.oldestSeq = null;
      $("#timeline").replaceChildren();
      send({ type: "subscribe", project_id: state.projectId });
      break;
    case "error": {
      const txn = frame.details?.client_txn_id;
      if (txn && state.pending.has(txn) && frame.code !== "rate_limited") {
        // Refused, not lost: the draft goes back into the composer.
        if (!$("#draft").value) $("#draft").value = state.pending.get(txn);
        state.pending.delete(txn);
      }
      if (frame.code === "rate_limited") setConn(`发送过快，请 ${Math.ceil(frame.details.retry_after_ms / 1000)} 秒后再试`);
      else setConn(`错误：${frame.message}`);
      break;
    }
    default:
      break;
  }
}

function loadHistory() {
  if (state.loadingHistory || !state.hasMore) return;
  state.loadingHistory = true;
  const frame = { type: "history", project_id: state.projectId, limit: 50 };
  if (state.oldestSeq !== null) frame.before = state.oldestSeq;
  send(frame);
}

function authorName(message) {
  if (message.author_id === null) return "系统";
  const member = state.members.get(message.author_id);
  return member ? member.display_name : `#${message.author_id}`;
}

function renderMessage(message) {
  const el = document.createElement("article");
  el.className = "msg";
  el.dataset.id = message.id;
  el.dataset.seq = message.seq;
  if (message.author_id === state.you) el.classList.add("mine");
  if (message.kind === "system") el.classList.add("system");
  if (message.deleted) el.classList.add("deleted");
  const meta = document.createElement("div");
  meta.className = "meta";
  const who = document.createElement("span");
  who.className = "author";
  who.textContent = authorName(message);
  const when = document.createElement("time");
  when.dateTime = message.created_at;
  when.textContent = new Date(message.created_at).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  meta.append(who, when);
  if (message.edited_at && !message.deleted) {
    const edited = document.createElement("span");
    edited.textContent = "已编辑";
    meta.append(edited);
  }
  const body = document.createElement("div");
  body.className = "body";
  if (message.deleted) body.textContent = "此消息已删除";
  else body.innerHTML = message.html; // sanitised server-side; CSP forbids inline script
  el.append(meta, body);
  return el;
}

function upsertMessage(message, live) {
  const timeline = $("#timeline");
  const existing = timeline.querySelector(`[data-id="${message.id}"]`);
  const el = renderMessage(message);
  if (existing) {
    existing.replaceWith(el);
    return;
  }
  if (!live) return;
  const atBottom = timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < 40;
  timeline.append(el);
  if (state.oldestSeq === null) state.oldestSeq = message.seq;
  if (atBottom || message.author_id === state.you) timeline.scrollTop = timeline.scrollHeight;
}

function prependHistory(messages) {
  const timeline = $("#timeline");
  const before = timeline.scrollHeight;
  const first = timeline.firstElementChild;
  const fragment = document.createDocumentFragment();
  for (const message of messages) {
    if (timeline.querySelector(`[data-id="${message.id}"]`)) continue;
    fragment.append(renderMessage(message));
  }
  timeline.insertBefore(fragment, first);
  if (messages.length) state.oldestSeq = Math.min(state.oldestSeq ?? Infinity, messages[0].seq);
  if (first) timeline.scrollTop += timeline.scrollHeight - before;
  else timeline.scrollTop = timeline.scrollHeight;
}

function submitDraft() {
  const draft = $("#draft");
  const body = draft.value;
  if (!body.trim()) return;
  const txn = crypto.randomUUID();
  state.pending.set(txn, body);
  send({ type: "send", project_id: state.projectId, client_txn_id: txn, body });
  draft.value = "";
}

function resendPending() {
  // Retransmits reuse their client_txn_id: the server applies each send exactly once.
  for (const [txn, body] of state.pending) {
    send({ type: "send", project_id: state.projectId, client_txn_id: txn, body });
  }
}

$("#composer").addEventListener("submit", (event) => {
  event.preventDefault();
  submitDraft();
});

$("#draft").addEventListener("keydown", (event) => {
  // Never send while an IME is composing (Chinese input): Enter confirms the candidate there.
  if (event.key !== "Enter" || event.shiftKey || event.isComposing || event.keyCode === 229) return;
  event.preventDefault();
  submitDraft();
});

$("#timeline").addEventListener("scroll", () => {
  if ($("#timeline").scrollTop < 60) loadHistory();
});

boot();
