// The /ws connection: subscribe with resume, apply sequenced frames exactly once, retransmit
// unacknowledged sends, and answer requests by req_id (docs/protocol.md).
//
// Cursor rule: a `message`/`message_updated` frame is applied only when its seq is the next one.
// An older seq is a duplicate (dropped); a newer one means a gap, and we resume with `since`.
// After a dropped connection we reconnect with backoff and subscribe with `since` + `epoch`: the
// server replays what we missed, in order, so the page never reloads and never duplicates.

const BACKOFF_MS = [250, 500, 1000, 2000, 4000, 8000];
const PING_EVERY_MS = 20_000;
const REQUEST_TIMEOUT_MS = 10_000;
const CLOSE_SIGNED_OUT = 4401; // the session ended (signed out here or in another tab)

export class Connection {
  constructor({ onFrame, onStatus }) {
    this.onFrame = onFrame; // (frame) => void, for every applied or unsequenced frame
    this.onStatus = onStatus; // (status, attempt) => void
    this.ws = null;
    this.projectId = null;
    this.closeReason = ""; // why the server ended the session ("account disabled" …)
    this.lastSeq = null; // the resume cursor: the highest seq applied
    this.epoch = null;
    this.attempt = 0;
    this.reqCounter = 0;
    this.requests = new Map(); // req_id -> {resolve, reject, timer}
    this.sends = new Map(); // client_txn_id -> send frame, until acked or refused
    this.reconnectTimer = null;
    this.pingTimer = null;
    this.status = "idle";
    this.signedOut = false; // once the server says so, never reconnect
    window.addEventListener("online", () => this.reconnectSoon(0));
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible") this.reconnectSoon(0);
    });
  }

  /** Watch a project from scratch (no cursor): its recent history is loaded separately. */
  watch(projectId) {
    if (this.projectId !== null && this.projectId !== projectId && this.isOpen()) {
      this.raw({ type: "unsubscribe", project_id: this.projectId });
    }
    this.projectId = projectId;
    this.lastSeq = null;
    this.epoch = null;
    // Unacknowledged sends of the previous project stay queued: the server accepts a send to any
    // project of ours, so switching projects never loses a message typed just before.
    if (this.isOpen()) this.subscribe();
    else this.connect();
  }

  /** Stop watching (we left the project): nothing to resubscribe on reconnect. */
  unwatch() {
    this.projectId = null;
    this.lastSeq = null;
    this.epoch = null;
  }

  isOpen() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  connect() {
    clearTimeout(this.reconnectTimer);
    if (this.signedOut) return;
    if (this.ws && (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING)) return;
    const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
    const ws = new WebSocket(url);
    this.ws = ws;
    this.setStatus(this.attempt === 0 ? "connecting" : "reconnecting");
    ws.addEventListener("open", () => {
      if (this.ws !== ws) return;
      if (this.projectId !== null) this.subscribe();
      clearInterval(this.pingTimer);
      this.pingTimer = setInterval(() => this.ping(), PING_EVERY_MS);
    });
    ws.addEventListener("message", (event) => {
      if (this.ws !== ws) return;
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      this.dispatch(frame);
    });
    ws.addEventListener("close", (event) => {
      if (this.ws !== ws) return;
      this.ws = null;
      clearInterval(this.pingTimer);
      for (const [id, req] of this.requests) {
        clearTimeout(req.timer);
        req.reject(Object.assign(new Error("connection lost"), { code: "disconnected" }));
        this.requests.delete(id);
      }
      if (event.code === CLOSE_SIGNED_OUT) {
        this.signedOut = true;
        this.closeReason = event.reason;
        this.setStatus("signed_out");
        return;
      }
      this.attempt += 1;
      this.setStatus("reconnecting");
      const delay = BACKOFF_MS[Math.min(this.attempt - 1, BACKOFF_MS.length - 1)];
      this.reconnectSoon(delay + Math.random() * delay * 0.3);
    });
  }

  reconnectSoon(delay) {
    if (this.ws !== null) return;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => this.connect(), delay);
  }

  /** Drop the socket now (tests and "reconnect" buttons); the normal resume path follows. */
  drop() {
    if (this.ws) this.ws.close();
  }

  subscribe() {
    const frame = { type: "subscribe", project_id: this.projectId };
    if (this.lastSeq !== null && this.epoch !== null) Object.assign(frame, { since: this.lastSeq, epoch: this.epoch });
    this.raw(frame);
  }

  setStatus(status) {
    this.status = status;
    this.onStatus(status, this.attempt);
  }

  raw(frame) {
    if (!this.isOpen()) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  /** A frame answered by req_id; resolves with the answer, rejects with an `error` frame. */
  request(frame, timeoutMs = REQUEST_TIMEOUT_MS) {
    return new Promise((resolve, reject) => {
      const reqId = `r${++this.reqCounter}`;
      if (!this.raw({ ...frame, req_id: reqId })) {
        reject(Object.assign(new Error("not connected"), { code: "disconnected" }));
        return;
      }
      const timer = setTimeout(() => {
        this.requests.delete(reqId);
        reject(Object.assign(new Error("no answer"), { code: "timeout" }));
      }, timeoutMs);
      this.requests.set(reqId, { resolve, reject, timer });
    });
  }

  /** Post a chat message. It is retransmitted (same client_txn_id: the server applies it once)
   * after every reconnect until an `ack` or a refusal arrives. */
  sendMessage(frame) {
    this.sends.set(frame.client_txn_id, frame);
    this.raw(frame);
  }

  ping() {
    this.request({ type: "ping" }, 8000).catch(() => this.drop());
  }

  dispatch(frame) {
    if (frame.type === "batch") {
      for (const inner of frame.frames) this.dispatch(inner);
      return;
    }
    if (frame.req_id && this.requests.has(frame.req_id)) {
      const req = this.requests.get(frame.req_id);
      this.requests.delete(frame.req_id);
      clearTimeout(req.timer);
      if (frame.type === "error") req.reject(Object.assign(new Error(frame.message), frame));
      else req.resolve(frame);
      if (frame.type !== "subscribed" && frame.type !== "resync_required") return;
    }
    switch (frame.type) {
      case "subscribed":
        if (frame.project.id !== this.projectId) return;
        this.epoch = frame.project.epoch;
        if (frame.since === null || frame.since === undefined) this.lastSeq = frame.head_seq;
        this.attempt = 0;
        this.setStatus("open");
        this.onFrame(frame);
        for (const send of this.sends.values()) this.raw(send);
        return;
      case "message":
      case "message_updated":
        if (frame.project_id !== this.projectId) return;
        if (this.lastSeq !== null && frame.seq <= this.lastSeq) return; // already applied
        if (this.lastSeq !== null && frame.seq > this.lastSeq + 1) {
          this.subscribe(); // a gap: resume from the cursor
          return;
        }
        this.lastSeq = frame.seq;
        this.onFrame(frame);
        return;
      case "resync_required":
        if (frame.project_id !== this.projectId) return;
        this.lastSeq = null;
        this.epoch = null;
        this.onFrame(frame);
        this.subscribe();
        return;
      case "ack":
        if (frame.client_txn_id) this.sends.delete(frame.client_txn_id);
        this.onFrame(frame);
        return;
      case "error": {
        const txn = frame.details?.client_txn_id;
        if (txn && this.sends.has(txn)) {
          if (frame.code === "rate_limited") {
            const send = this.sends.get(txn);
            setTimeout(() => this.sends.has(txn) && this.raw(send), frame.details.retry_after_ms || 1000);
          } else {
            this.sends.delete(txn);
          }
        }
        this.onFrame(frame);
        return;
      }
      default:
        this.onFrame(frame);
    }
  }
}
