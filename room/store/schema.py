"""Named, append-only schema migrations. ``PRAGMA user_version`` = number of migrations applied.

Never edit a migration that has shipped; add a new one. Times are UTC epoch seconds (REAL).
"""

from __future__ import annotations

from typing import NamedTuple

from room.store.schema_attachments import ATTACHMENTS, PDF_PREVIEWS
from room.store.schema_attempts import TASK_ATTEMPTS
from room.store.schema_cluster import CLUSTER_ID
from room.store.schema_fts_recent import FTS_RECENT
from room.store.schema_leases import LEASES
from room.store.schema_memory import MEMORY
from room.store.schema_message_fts import MESSAGE_FTS_PROJECT
from room.store.schema_notify import NOTIFY
from room.store.schema_pg_parity import PG_PARITY
from room.store.schema_portfolio import PORTFOLIO
from room.store.schema_research import RESEARCH
from room.store.schema_rowid import LINK_TABLES_KEY_FIRST
from room.store.schema_tasks import TASKS
from room.store.schema_thread_frames import THREAD_FRAMES
from room.store.schema_threads import THREADS
from room.store.schema_turn_deliveries import TURN_DELIVERIES
from room.store.schema_uploads import UPLOAD_RESERVATIONS
from room.store.schema_users import USERS_ADMIN
from room.store.schema_waits import CLUSTER_WAITS


class Migration(NamedTuple):
    name: str
    sql: str


FOUNDATION = """
CREATE TABLE users (
    id            INTEGER PRIMARY KEY,
    handle        TEXT NOT NULL UNIQUE COLLATE NOCASE,
    display_name  TEXT NOT NULL,
    is_admin      INTEGER NOT NULL DEFAULT 0,
    created_at    REAL NOT NULL
);

CREATE TABLE projects (
    id              INTEGER PRIMARY KEY,
    name            TEXT NOT NULL,
    goal            TEXT NOT NULL DEFAULT '',
    workspace       TEXT,
    state           TEXT NOT NULL DEFAULT 'active',
    state_from      TEXT,
    stop_target     TEXT,
    epoch           INTEGER NOT NULL DEFAULT 1,
    last_seq        INTEGER NOT NULL DEFAULT 0,
    lead_member_id  INTEGER,
    settings_json   TEXT NOT NULL DEFAULT '{}',
    created_by      INTEGER REFERENCES users(id),
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL
);
CREATE UNIQUE INDEX projects_name ON projects(name COLLATE NOCASE) WHERE state != 'purged';

CREATE TABLE members (
    id            INTEGER PRIMARY KEY,
    project_id    INTEGER NOT NULL REFERENCES projects(id),
    kind          TEXT NOT NULL CHECK (kind IN ('human', 'agent')),
    user_id       INTEGER REFERENCES users(id),
    role          TEXT NOT NULL,
    handle        TEXT NOT NULL,
    display_name  TEXT NOT NULL,
    status        TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused', 'left')),
    created_at    REAL NOT NULL,
    left_at       REAL,
    CHECK ((kind = 'human') = (user_id IS NOT NULL))
);
CREATE UNIQUE INDEX members_user ON members(project_id, user_id) WHERE user_id IS NOT NULL;
CREATE INDEX members_project ON members(project_id);

-- Every name a member answers to, and the tombstones of those who left (names stay reserved).
CREATE TABLE member_names (
    project_id  INTEGER NOT NULL REFERENCES projects(id),
    member_id   INTEGER NOT NULL REFERENCES members(id),
    name        TEXT NOT NULL,
    name_key    TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('handle', 'alias', 'display_name')),
    tombstoned  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, name_key, member_id, kind)
) WITHOUT ROWID;
CREATE UNIQUE INDEX member_handles ON member_names(project_id, name_key) WHERE kind = 'handle';

CREATE TABLE agent_tokens (
    id          INTEGER PRIMARY KEY,
    member_id   INTEGER NOT NULL REFERENCES members(id),
    token_hash  TEXT NOT NULL UNIQUE,
    created_at  REAL NOT NULL,
    revoked_at  REAL
);

-- One-time login links and invites; only the SHA-256 of the secret is stored.
CREATE TABLE login_links (
    token_hash  TEXT PRIMARY KEY,
    purpose     TEXT NOT NULL CHECK (purpose IN ('login', 'invite')),
    user_id     INTEGER REFERENCES users(id),
    project_id  INTEGER REFERENCES projects(id),
    role        TEXT,
    created_by  INTEGER REFERENCES users(id),
    created_at  REAL NOT NULL,
    expires_at  REAL NOT NULL,
    used_at     REAL,
    used_by     INTEGER REFERENCES users(id)
);

CREATE TABLE sessions (
    token_hash    TEXT PRIMARY KEY,
    user_id       INTEGER NOT NULL REFERENCES users(id),
    csrf_token    TEXT NOT NULL,
    created_at    REAL NOT NULL,
    expires_at    REAL NOT NULL,
    revoked_at    REAL
);

CREATE TABLE messages (
    id             INTEGER PRIMARY KEY,
    project_id     INTEGER NOT NULL REFERENCES projects(id),
    seq            INTEGER NOT NULL,
    author_id      INTEGER REFERENCES members(id),
    kind           TEXT NOT NULL DEFAULT 'chat' CHECK (kind IN ('chat', 'system', 'tool')),
    body           TEXT NOT NULL,
    reply_to       INTEGER REFERENCES messages(id),
    client_txn_id  TEXT,
    txn_digest     TEXT,
    frame          TEXT NOT NULL,
    created_at     REAL NOT NULL,
    edited_at      REAL,
    deleted_at     REAL
);
CREATE UNIQUE INDEX messages_seq ON messages(project_id, seq);
CREATE UNIQUE INDEX messages_txn ON messages(author_id, client_txn_id)
    WHERE client_txn_id IS NOT NULL;

CREATE TABLE message_edits (
    id          INTEGER PRIMARY KEY,
    message_id  INTEGER NOT NULL REFERENCES messages(id),
    body        TEXT NOT NULL,
    edited_at   REAL NOT NULL,
    action      TEXT NOT NULL CHECK (action IN ('edit', 'delete'))
);
CREATE INDEX message_edits_message ON message_edits(message_id);

CREATE TABLE mentions (
    message_id  INTEGER NOT NULL REFERENCES messages(id),
    member_id   INTEGER NOT NULL REFERENCES members(id),
    via         TEXT NOT NULL,
    PRIMARY KEY (message_id, member_id)
) WITHOUT ROWID;

-- The delivery ledger (docs/architecture.md, "The delivery ledger"): one row per
-- (message, recipient).
CREATE TABLE deliveries (
    id            INTEGER PRIMARY KEY,
    project_id    INTEGER NOT NULL REFERENCES projects(id),
    message_id    INTEGER NOT NULL REFERENCES messages(id),
    recipient_id  INTEGER NOT NULL REFERENCES members(id),
    state         TEXT NOT NULL CHECK (state IN
        ('pending', 'held', 'delivered', 'consumed', 'unknown', 'failed', 'cancelled')),
    mode          TEXT CHECK (mode IN ('queue', 'steer')),
    reason        TEXT,
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    UNIQUE (message_id, recipient_id)
);
CREATE INDEX deliveries_recipient ON deliveries(recipient_id, state, message_id);

-- The project's resumable event stream: one gap-free seq per project. Message events carry no
-- frame of their own: replay joins the message's current frame.
CREATE TABLE events (
    project_id  INTEGER NOT NULL REFERENCES projects(id),
    seq         INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    message_id  INTEGER REFERENCES messages(id),
    frame       TEXT,
    created_at  REAL NOT NULL,
    PRIMARY KEY (project_id, seq)
) WITHOUT ROWID;

CREATE TABLE read_cursors (
    member_id   INTEGER PRIMARY KEY REFERENCES members(id),
    project_id  INTEGER NOT NULL REFERENCES projects(id),
    seq         INTEGER NOT NULL,
    updated_at  REAL NOT NULL
);

CREATE TABLE audit_events (
    id           INTEGER PRIMARY KEY,
    at           REAL NOT NULL,
    actor_kind   TEXT NOT NULL,
    actor_id     INTEGER,
    project_id   INTEGER,
    action       TEXT NOT NULL,
    from_state   TEXT,
    outcome      TEXT NOT NULL,
    detail_json  TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_project ON audit_events(project_id, id);
"""

RUNTIME = """
ALTER TABLE members ADD COLUMN driver TEXT NOT NULL DEFAULT 'builtin'
    CHECK (driver IN ('builtin', 'external'));
ALTER TABLE members ADD COLUMN charter TEXT;
ALTER TABLE projects ADD COLUMN config_version INTEGER NOT NULL DEFAULT 1;

-- The turn that took a delivery in, and for external agents the connection it was handed to.
ALTER TABLE deliveries ADD COLUMN turn_id INTEGER;
ALTER TABLE deliveries ADD COLUMN handoff TEXT;
CREATE INDEX deliveries_open ON deliveries(state, recipient_id)
    WHERE state IN ('pending', 'delivered', 'unknown');

-- One row per turn of an agent session.
CREATE TABLE turns (
    id                  INTEGER PRIMARY KEY,
    project_id          INTEGER NOT NULL REFERENCES projects(id),
    member_id           INTEGER NOT NULL REFERENCES members(id),
    state               TEXT NOT NULL CHECK (state IN
        ('running', 'completed', 'failed', 'cancelled', 'interrupted', 'step_limit', 'braked')),
    trigger_message_id  INTEGER REFERENCES messages(id),
    reply_message_id    INTEGER REFERENCES messages(id),
    steps               INTEGER NOT NULL DEFAULT 0,
    side_effects        INTEGER NOT NULL DEFAULT 0,
    error               TEXT,
    started_at          REAL NOT NULL,
    ended_at            REAL
);
CREATE INDEX turns_member ON turns(member_id, id);
CREATE INDEX turns_running ON turns(state) WHERE state = 'running';

-- The persistent transcript of each agent session (its own record, used to reconcile).
CREATE TABLE transcript_entries (
    id               INTEGER PRIMARY KEY,
    member_id        INTEGER NOT NULL REFERENCES members(id),
    turn_id          INTEGER REFERENCES turns(id),
    role             TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
    content          TEXT NOT NULL,
    name             TEXT,
    tool_calls_json  TEXT,
    tool_call_id     TEXT,
    delivery_id      INTEGER REFERENCES deliveries(id),
    superseded       INTEGER NOT NULL DEFAULT 0,
    created_at       REAL NOT NULL
);
CREATE INDEX transcript_member ON transcript_entries(member_id, id);

-- Every real model request: the route observed, latency and tokens (no money is guessed).
CREATE TABLE model_requests (
    id               INTEGER PRIMARY KEY,
    project_id       INTEGER NOT NULL REFERENCES projects(id),
    member_id        INTEGER NOT NULL REFERENCES members(id),
    turn_id          INTEGER REFERENCES turns(id),
    model_id         TEXT NOT NULL,
    route_source     TEXT NOT NULL,
    provider         TEXT NOT NULL,
    model_reported   TEXT,
    latency_ms       REAL,
    input_tokens     INTEGER NOT NULL DEFAULT 0,
    output_tokens    INTEGER NOT NULL DEFAULT 0,
    usage_reported   INTEGER NOT NULL DEFAULT 1,
    ok               INTEGER NOT NULL,
    error_code       TEXT,
    created_at       REAL NOT NULL
);
CREATE INDEX model_requests_member ON model_requests(member_id, id);
CREATE INDEX model_requests_project ON model_requests(project_id, id);

-- Current route configuration; every change is also appended to route_changes.
CREATE TABLE route_settings (
    project_id      INTEGER NOT NULL REFERENCES projects(id),
    scope           TEXT NOT NULL CHECK (scope IN ('project', 'role', 'member', 'pool', 'pool_pick')),
    target          TEXT NOT NULL DEFAULT '',
    value           TEXT NOT NULL,
    reason          TEXT,
    config_version  INTEGER NOT NULL,
    updated_at      REAL NOT NULL,
    PRIMARY KEY (project_id, scope, target)
) WITHOUT ROWID;

CREATE TABLE route_changes (
    id              INTEGER PRIMARY KEY,
    project_id      INTEGER NOT NULL REFERENCES projects(id),
    scope           TEXT NOT NULL,
    target          TEXT NOT NULL,
    old_value       TEXT,
    new_value       TEXT,
    reason          TEXT NOT NULL,
    author_kind     TEXT NOT NULL,
    author_id       INTEGER,
    config_version  INTEGER NOT NULL,
    created_at      REAL NOT NULL
);
CREATE INDEX route_changes_project ON route_changes(project_id, id);

-- The loop brake of each project (limits live in projects.settings_json).
CREATE TABLE project_brakes (
    project_id      INTEGER PRIMARY KEY REFERENCES projects(id),
    agent_turns     INTEGER NOT NULL DEFAULT 0,
    tokens_used     INTEGER NOT NULL DEFAULT 0,
    tripped         TEXT,
    tripped_detail  TEXT,
    tripped_at      REAL,
    cleared_by      INTEGER,
    cleared_at      REAL
);

-- What start-up did to deliveries caught mid-hand-off, and why.
CREATE TABLE reconciliations (
    id           INTEGER PRIMARY KEY,
    delivery_id  INTEGER NOT NULL REFERENCES deliveries(id),
    from_state   TEXT NOT NULL,
    to_state     TEXT NOT NULL,
    reason       TEXT NOT NULL,
    at           REAL NOT NULL
);
"""

LIFECYCLE = """
ALTER TABLE projects ADD COLUMN state_at REAL;
-- A restorable digest written when a project is trashed (counts and hashes per table).
CREATE TABLE project_snapshots (
    id          INTEGER PRIMARY KEY,
    project_id  INTEGER NOT NULL REFERENCES projects(id),
    digest_json TEXT NOT NULL,
    created_at  REAL NOT NULL,
    created_by  INTEGER
);
CREATE INDEX project_snapshots_project ON project_snapshots(project_id, id);

-- What remains of a purged project: who, what and when (the audit trail stays too).
CREATE TABLE project_tombstones (
    project_id  INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    purged_at   REAL NOT NULL,
    purged_by   INTEGER
);

-- Purge progress, one row per released resource, so a retry resumes where it stopped.
CREATE TABLE purge_steps (
    project_id  INTEGER NOT NULL,
    step        TEXT NOT NULL,
    done_at     REAL NOT NULL,
    detail      TEXT,
    PRIMARY KEY (project_id, step)
) WITHOUT ROWID;
"""

# Deliveries carry a machine reason code (room.rules.ledger.Reason) next to the free-text reason.
# Rows written before it get the code their text stands for; a text no code matches keeps a NULL
# code.
DELIVERY_REASON_CODES = """
ALTER TABLE deliveries ADD COLUMN reason_code TEXT;
UPDATE deliveries SET reason_code = CASE
    WHEN reason = 'recipient left' THEN 'recipient_left'
    WHEN reason = 'message deleted' THEN 'message_deleted'
    WHEN reason = 'member paused' THEN 'member_paused'
    WHEN reason = 'project not active' THEN 'project_not_active'
    WHEN reason = 'project trashed' THEN 'project_trashed'
    WHEN reason = 'socket lost before receipt' THEN 'socket_lost'
    WHEN reason = 'awaiting the agent''s confirmation' THEN 'awaiting_confirmation'
    WHEN reason = 'the external agent asked for it again' THEN 'redelivery_requested'
    WHEN reason = 'dispatch stopped before the turn started' THEN 'dispatch_stopped'
    WHEN reason IN ('loop brake: waiting for a human', 'loop brake tripped',
        'repeating the same action', 'step limit reached without a final answer')
        THEN 'loop_brake'
    WHEN reason = 'the turn''s reply was posted before the restart' THEN 'restart_reply_posted'
    WHEN reason LIKE 'turn interrupted by a restart after it had acted%'
        THEN 'restart_after_effect'
    WHEN reason LIKE 'turn interrupted by a restart before any effect%'
        THEN 'restart_before_effect'
    WHEN reason LIKE 'in the session inbox at restart%' THEN 'restart_in_inbox'
    WHEN reason LIKE 'stopped: a person stopped%' THEN 'turn_stopped'
    WHEN reason LIKE 'internal error%' THEN 'turn_failed'
    WHEN reason = 'the turn could not start' THEN 'turn_not_started'
    WHEN reason LIKE 'answer not posted%' THEN 'answer_not_posted'
    WHEN reason GLOB '[a-z]*_*: *' THEN 'provider_error'
END
WHERE reason IS NOT NULL;
"""

CHECKPOINTS = """
-- The task checkpoints of agent sessions: at each turn's start, steps, steers and end (and when a
-- restart cut a turn off), the member's current task and the prompt still waiting for an answer.
CREATE TABLE checkpoints (
    id                  INTEGER PRIMARY KEY,
    project_id          INTEGER NOT NULL REFERENCES projects(id),
    member_id           INTEGER NOT NULL REFERENCES members(id),
    turn_id             INTEGER NOT NULL REFERENCES turns(id),
    phase               TEXT NOT NULL CHECK (phase IN
        ('start', 'step', 'steer', 'end', 'interrupted')),
    state               TEXT NOT NULL,
    step                INTEGER NOT NULL DEFAULT 0,
    summary             TEXT NOT NULL DEFAULT '',
    did_json            TEXT NOT NULL DEFAULT '[]',
    next                TEXT NOT NULL DEFAULT '',
    blocked             TEXT NOT NULL DEFAULT '',
    last_tool           TEXT NOT NULL DEFAULT '',
    pending_tools_json  TEXT NOT NULL DEFAULT '[]',
    prompt_json         TEXT NOT NULL DEFAULT '[]',
    created_at          REAL NOT NULL
);
CREATE INDEX checkpoints_member ON checkpoints(member_id, id);
CREATE INDEX checkpoints_turn ON checkpoints(turn_id, id);
CREATE INDEX transcript_turn ON transcript_entries(turn_id, id);
"""

# Full-text search (room.store.search, docs/search.md): the normalised text of every live message
# (rowid = message id) and memory record (rowid = -search_records.id). Existing messages are
# indexed here through room_index_text and room_index_unigrams (room.rules.searchtext's functions).
SEARCH = """
CREATE VIRTUAL TABLE search_fts USING fts5(body, uni, tokenize = 'unicode61 remove_diacritics 2');

CREATE TABLE search_records (
    id          INTEGER PRIMARY KEY,
    project_id  INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    record_id   INTEGER NOT NULL,
    author_id   INTEGER,
    at          REAL NOT NULL,
    body        TEXT NOT NULL,
    UNIQUE (kind, record_id)
);
CREATE INDEX search_records_project ON search_records(project_id, kind);

-- Set while messages may be missing from the index (a start with search_index_messages off);
-- the next start with it on rebuilds the messages' rows and clears it.
CREATE TABLE search_state (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    messages_stale  INTEGER NOT NULL DEFAULT 0
);
INSERT INTO search_state (id) VALUES (1);

INSERT INTO search_fts (rowid, body, uni)
    SELECT id, room_index_text(body), room_index_unigrams(body) FROM messages
    WHERE deleted_at IS NULL ORDER BY id;
"""

# What was deleted or edited stays private (docs/protocol.md, "Pages of the timeline over HTTP"):
# message_updated events keep no frame of their own (replays join the message's current object, as
# for message events), and replies to a deleted message no longer quote its text. Replies are found
# by reply_to.
MESSAGE_PRIVACY = """
UPDATE events SET frame = NULL WHERE kind = 'message_updated' AND message_id IS NOT NULL;
CREATE INDEX messages_reply_to ON messages(reply_to) WHERE reply_to IS NOT NULL;
UPDATE messages SET frame = json_set(frame, '$.reply_excerpt.excerpt', '',
        '$.reply_excerpt.deleted', json('true'))
    WHERE reply_to IN (SELECT id FROM messages WHERE deleted_at IS NOT NULL)
    AND json_type(frame, '$.reply_excerpt') = 'object';
"""

# Model calls record the HTTP requests they really sent (retries included; 0 when none was).
MODEL_REQUEST_ATTEMPTS = """
ALTER TABLE model_requests ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1;
"""

# Where a project came from (docs/packs.md): the project a fork was made from, and the projects
# merged into it (a JSON array of ids, oldest first).
PACKS = """
ALTER TABLE projects ADD COLUMN forked_from INTEGER REFERENCES projects(id);
ALTER TABLE projects ADD COLUMN merged_from TEXT NOT NULL DEFAULT '[]'
"""


# Emoji reactions (room.store.reactions): one row per (message, emoji, member).
REACTIONS = """
CREATE TABLE reactions (
    message_id  INTEGER NOT NULL REFERENCES messages(id),
    emoji       TEXT NOT NULL,
    member_id   INTEGER NOT NULL REFERENCES members(id),
    created_at  REAL NOT NULL,
    PRIMARY KEY (message_id, emoji, member_id)
) WITHOUT ROWID;
"""

# The messages' full-text index moves to its own file (``search.sqlite`` beside this one),
# written by a background indexer from a watermark (room.store.indexer, docs/search.md), off
# the send path. ``search_fts`` keeps the memory records only (rebuilt without the messages'
# rows, which the indexer writes afresh there); edits, deletes and purges of messages are
# queued in ``search_changes`` in the same transaction as the change itself.
SEARCH_INDEXER = """
CREATE VIRTUAL TABLE search_fts_records USING fts5(body, uni,
    tokenize = 'unicode61 remove_diacritics 2');
INSERT INTO search_fts_records (rowid, body, uni)
    SELECT rowid, body, uni FROM search_fts WHERE rowid < 0;
DROP TABLE search_fts;
ALTER TABLE search_fts_records RENAME TO search_fts;
DROP TABLE search_state;
CREATE TABLE search_changes (
    seq         INTEGER PRIMARY KEY,
    message_id  INTEGER NOT NULL
);
CREATE INDEX search_changes_message ON search_changes(message_id);
"""

# What a send writes, without a temporary table per row. SQLite tests a CHECK constraint or a
# partial index's condition of the form ``x IN (...)`` by building the list as a temporary
# table for every row written (about 2 µs each; a send wrote three). The same conditions as
# ORs cost a few comparisons.
#
# * The two CHECK constraints (``messages.kind``, ``deliveries.state``) change their text only:
#   the documented way for a constraint every row already meets (sqlite.org/lang_altertable.html,
#   "Making Other Kinds Of Table Schema Changes"), no copy of the tables. The index statements
#   after them change the schema cookie, so every connection reads the new text.
# * The open deliveries' partial index: ``state IN (...)`` as an index's WHERE is implied by no
#   query that names one state (``state = 'pending'``), so no query used it; as ORs the
#   ledger's reads by state (a member's pending rows, the rows handed to sessions) search it.
SEND_ROWS = """
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(sql,
    'CHECK (kind IN (''chat'', ''system'', ''tool''))',
    'CHECK (kind = ''chat'' OR kind = ''system'' OR kind = ''tool'')')
    WHERE type = 'table' AND name = 'messages';
UPDATE sqlite_master SET sql = replace(sql,
    'CHECK (state IN
        (''pending'', ''held'', ''delivered'', ''consumed'', ''unknown'', ''failed'', ''cancelled''))',
    'CHECK (state = ''pending'' OR state = ''held'' OR state = ''delivered''
        OR state = ''consumed'' OR state = ''unknown'' OR state = ''failed''
        OR state = ''cancelled'')')
    WHERE type = 'table' AND name = 'deliveries';
PRAGMA writable_schema = OFF;
DROP INDEX deliveries_open;
CREATE INDEX deliveries_open ON deliveries(state, recipient_id)
    WHERE state = 'pending' OR state = 'delivered' OR state = 'unknown';
"""

# A brake holds the members of the loop, not the team (room.rules.brakes): whom it
# holds (``held_json``: a JSON array of member ids, NULL for the whole project), the agent turns
# of each member since the last human message (``turns_json``: {member id: turns}), and the
# turns a brake interrupted (``brake_resume``: 1 waiting for the clear, 2 resumed by it).
BRAKE_HOLDS = """
ALTER TABLE project_brakes ADD COLUMN held_json TEXT;
ALTER TABLE project_brakes ADD COLUMN turns_json TEXT NOT NULL DEFAULT '{}';
ALTER TABLE turns ADD COLUMN brake_resume INTEGER NOT NULL DEFAULT 0;
CREATE INDEX turns_brake_resume ON turns(project_id) WHERE brake_resume = 1
"""

# Several writers, the same guarantees (docs/storage.md, "Several writers"): one running turn
# per member is a constraint (older duplicates, which the scheduler never made, are settled
# first so the index can be built), a turn and a research run name the node that runs them (the
# start-up reconciliation settles only its own), and a project's roster carries a version that every
# roster change raises in its transaction (a send checks it under the project's lock).
MULTI_WRITER = """
UPDATE turns SET state = 'interrupted', error = 'another turn of the member was running',
    ended_at = started_at
  WHERE state = 'running' AND id NOT IN
    (SELECT max(id) FROM turns WHERE state = 'running' GROUP BY member_id);
CREATE UNIQUE INDEX turns_one_running ON turns(member_id) WHERE state = 'running';
ALTER TABLE turns ADD COLUMN owner TEXT;
ALTER TABLE research_runs ADD COLUMN owner TEXT;
ALTER TABLE projects ADD COLUMN roster_version INTEGER NOT NULL DEFAULT 0
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration("0001_foundation", FOUNDATION),
    Migration("0002_runtime", RUNTIME),
    Migration("0003_lifecycle", LIFECYCLE),
    Migration("0004_tasks", TASKS),
    Migration("0005_delivery_reason_codes", DELIVERY_REASON_CODES),
    Migration("0006_task_attempts", TASK_ATTEMPTS),
    Migration("0007_link_tables_key_first", LINK_TABLES_KEY_FIRST),
    Migration("0008_checkpoints", CHECKPOINTS),
    Migration("0009_memory", MEMORY),
    Migration("0010_search", SEARCH),
    Migration("0011_message_privacy", MESSAGE_PRIVACY),
    Migration("0012_model_request_attempts", MODEL_REQUEST_ATTEMPTS),
    Migration("0013_packs", PACKS),
    Migration("0014_attachments", ATTACHMENTS),
    Migration("0015_portfolio", PORTFOLIO),
    Migration("0016_reactions", REACTIONS),
    Migration("0017_research", RESEARCH),
    Migration("0018_search_indexer", SEARCH_INDEXER),
    Migration("0019_send_rows", SEND_ROWS),
    Migration("0020_brake_holds", BRAKE_HOLDS),
    Migration("0021_users_admin", USERS_ADMIN),
    Migration("0022_multi_writer", MULTI_WRITER),
    Migration("0023_threads", THREADS),
    Migration("0024_notifications", NOTIFY),
    Migration("0025_thread_frames", THREAD_FRAMES),
    Migration("0026_pdf_previews", PDF_PREVIEWS),
    Migration("0027_pg_parity", PG_PARITY),
    Migration("0028_leases", LEASES),
    Migration("0029_upload_reservations", UPLOAD_RESERVATIONS),
    Migration("0030_message_fts_project", MESSAGE_FTS_PROJECT),
    Migration("0031_cluster_id", CLUSTER_ID),
    Migration("0032_message_fts_recent", FTS_RECENT),
    Migration("0033_cluster_waits", CLUSTER_WAITS),
    Migration("0034_turn_deliveries", TURN_DELIVERIES),
)

SCHEMA_VERSION = len(MIGRATIONS)
