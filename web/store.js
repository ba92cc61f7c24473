// The page's state, filled only from server data (/api/me, /ws frames, HTTP answers), and a
// small event bus. Modules render from here and re-render when told.

import { buildRoster } from "./mentions.js";

const listeners = new Map();

export const bus = {
  on(type, fn) {
    if (!listeners.has(type)) listeners.set(type, new Set());
    listeners.get(type).add(fn);
    return () => listeners.get(type).delete(fn);
  },
  emit(type, detail) {
    for (const fn of listeners.get(type) || []) {
      try {
        fn(detail);
      } catch (err) {
        console.error(`handler for ${type} failed`, err);
      }
    }
  },
};

export const app = {
  identity: null, // {kind, user_id, handle, display_name}
  projects: new Map(), // id -> project wire object
  providers: null, // GET /api/providers answer, once loaded
  trashRetentionDays: null, // how long the trash keeps a project restorable (from /api/me)
  room: null, // the open project (see createRoom)
};

export function createRoom(project) {
  return {
    id: project.id,
    project,
    you: null,
    members: new Map(),
    membersVersion: 0,
    messages: new Map(), // id -> message object
    oldestSeq: null,
    hasMore: true,
    // A window opened around an old message (a search result, a permalink) does not reach the
    // latest: new messages wait in `later` until the window pages forward to them.
    detached: false,
    later: new Map(), // id -> message, while detached
    loadingHistory: false,
    historyLoaded: false,
    readCursors: new Map(), // member id -> seq
    unreadFromSeq: null, // seq of the first unread message, for the marker
    receipts: new Map(), // message id -> Map(recipient id -> delivery)
    receiptsAsked: new Set(),
    pending: new Map(), // client_txn_id -> {body, replyTo, chips, plain, createdAt, failed}
    typing: new Map(), // member id -> timer
    presence: new Map(), // member id -> online/offline (people), running/idle/paused/offline (agents)
    headSeq: project.head_seq ?? 0,
  };
}

/** Replace the member list. A `members` frame (the same for every subscriber) gives `opsById`:
 * each member's operations per viewer (docs/protocol.md, "Allowed operations"), of which this
 * viewer's entry becomes the member's `allowed_ops`; HTTP answers and `subscribed` carry it. */
export function setMembers(room, members, opsById = null) {
  room.members = new Map(members.map((m) => [m.id, m]));
  if (opsById) {
    const kind = viewerKind(room);
    for (const m of room.members.values()) {
      const ops = opsById[String(m.id)] || {};
      m.allowed_ops = (m.id === room.you ? ops.self : ops[kind]) || [];
    }
  }
  room.membersVersion += 1;
  room._roster = null;
}

export function member(room, id) {
  return room?.members.get(id) || null;
}

export function me(room) {
  return member(room, room?.you);
}

/** Whether a member is here now (docs/protocol.md, "Presence"); "left" for one who left. */
export function presenceOf(room, id) {
  const m = member(room, id);
  if (m?.status === "left") return "left";
  return room?.presence.get(id) || "offline";
}

/** Who is here: the whole map (`subscribed`), or the members whose presence changed (`presence`). */
export function setPresence(room, map) {
  room.presence = new Map();
  mergePresence(room, map);
}

export function mergePresence(room, changes) {
  for (const [id, state] of Object.entries(changes || {})) room.presence.set(Number(id), state);
}

export function isOwner(room) {
  return me(room)?.role === "owner";
}

/** Which entry of a broadcast `allowed_ops` map is this viewer's. */
function viewerKind(room) {
  return isOwner(room) ? "owner" : "member";
}

/** The operations the server offers this viewer on a project or member object. */
export function opsOf(object) {
  return object?.allowed_ops || [];
}

export function activeAgents(room) {
  return [...room.members.values()].filter((m) => m.kind === "agent" && m.status !== "left");
}

/** The open project's roster in the resolver's format (SPEC §8): ids are strings. Members who
 * left are kept (their names resolve to `departed`) and their names become tombstones. */
export function roster(room) {
  if (room._roster && room._rosterVersion === room.membersVersion) return room._roster;
  const members = [...room.members.values()];
  const json = {
    members: members.map((m) => ({
      id: String(m.id),
      kind: m.kind,
      handle: m.handle,
      display_name: m.display_name,
      aliases: m.aliases || [],
      status: m.status,
    })),
    tombstones: members
      .filter((m) => m.status === "left")
      .flatMap((m) => [m.handle, m.display_name, ...(m.aliases || [])].map((name) => ({ name, member_id: String(m.id) }))),
  };
  room._roster = buildRoster(json);
  room._rosterVersion = room.membersVersion;
  return room._roster;
}

export function sortedMessages(room) {
  return [...room.messages.values()].sort((a, b) => a.seq - b.seq);
}

export function upsertProject(project) {
  const old = app.projects.get(project.id) || {};
  const merged = { ...old, ...project };
  app.projects.set(project.id, merged);
  if (app.room && app.room.id === project.id) app.room.project = merged;
  return merged;
}

/** A `project` frame: the project, with this viewer's entry of the frame's `allowed_ops`. */
export function upsertProjectFrame(frame) {
  const room = app.room;
  const ours = room && room.you !== null && frame.project.id === room.id;
  return upsertProject({ ...frame.project, allowed_ops: ours ? frame.allowed_ops?.[viewerKind(room)] : undefined });
}

/** True if the server lets this viewer post in the project now. */
export function mayPost(project) {
  return opsOf(project).includes("post");
}

/** Whether this viewer may change the open project: its routes, settings, members, invites and
 * brake. An owner's; and only where the server offers a person `post` — active and paused, the
 * states its `require_open` accepts for those changes — so an archived or trashed project
 * offers no form the server would refuse. */
export function mayChange(room) {
  return isOwner(room) && mayPost(room?.project);
}
