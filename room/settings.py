"""Server settings: one pydantic model, built from flags and the environment (no global instance).

Every field is documented in ``docs/settings.md``; a test fails when one is not. Environment
variables are the field name upper-cased with a ``ROOM_`` prefix (``ROOM_DATA``, ``ROOM_PORT`` …).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_PORT = 8470


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    data: Path = Field(
        default=Path(".room-data"), description="Data folder (database, lock, reports)."
    )
    host: str = Field(default="127.0.0.1", description="Interface to listen on.")
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535, description="TCP port; 0 picks one.")
    public_url: str | None = Field(
        default=None,
        description="Origin browsers use to reach the server (for links and the Origin check); "
        "defaults to http://HOST:PORT.",
    )
    extra_origins: tuple[str, ...] = Field(
        default=(), description="More origins allowed to open WebSockets (comma-separated in env)."
    )
    workspace_roots: tuple[str, ...] = Field(
        default=(),
        description="Folders inside which a project's workspace (and a research reference) may "
        "be set (comma-separated in env); empty means <data>/workspaces (or workspaces_dir) "
        "only. Wider roots are "
        "the operator's choice, listed in boot-report.json. A project's default workspace is "
        "always allowed, and a folder belongs to one project whatever the roots.",
    )
    database_url: str | None = Field(
        default=None,
        pattern=r"^postgres(ql)?://",
        description="A PostgreSQL database (postgresql://user:password@host:port/name) instead "
        "of SQLite in the data folder; several servers (each with its own data folder) may "
        "share one (docs/storage.md).",
    )
    attachments_dir: Path | None = Field(
        default=None,
        description="The folder attachments' files are stored in (content-addressed); "
        "defaults to <data>/attachments. The nodes of a cluster must share it (NFS or "
        "similar): every node serves every attachment (docs/cluster.md).",
    )
    workspaces_dir: Path | None = Field(
        default=None,
        description="The folder projects' default workspaces are made in (one folder per "
        "project, named by its id); defaults to <data>/workspaces. A cluster's nodes may share "
        "it (NFS or similar): a project whose workspace is in it needs no home node, and its "
        "agent turns and research run on whichever node holds its lease (docs/cluster.md).",
    )
    bus_url: str | None = Field(
        default=None,
        pattern=r"^nats://",
        description="PostgreSQL only: a NATS server (nats://host:port) the servers on one "
        "database share as their bus: each commit's event, typing, presence, roster changes "
        "and socket cuts reach the other servers' sockets at once (docs/cluster.md). Without "
        "it, the servers read each other's events on a short poll of the database.",
    )
    bus_poll_secs: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="With a bus: how often a server still checks the database for events whose "
        "hint never came (the bus down meanwhile it checks every 50 ms).",
    )
    lease_secs: float = Field(
        default=15.0,
        ge=1,
        le=300,
        description="PostgreSQL only: how long a node's lease on running a project's agent turns "
        "lasts unrenewed (renewed every third of it). A node paused or cut off longer loses it: "
        "once the project's home moved, another node adopts it and the old one's writes for "
        "those turns are refused.",
    )
    database_statement_timeout_ms: int = Field(
        default=30_000,
        ge=0,
        description="PostgreSQL only: the server cancels a statement of this process running "
        "longer than this (ms; 0: never). A write cancelled this way fails with its batch.",
    )
    database_check_locks: bool = Field(
        default=False,
        description="Refuse a write that takes a seq or a per-project number in a project it "
        "did not declare (the lock order of docs/storage.md): a programming error, on in the "
        "tests; off by default in production.",
    )
    synchronous: str = Field(
        default="FULL",
        pattern="^(FULL|NORMAL|EXTRA)$",
        description="SQLite synchronous mode; FULL means an acknowledged message survives power loss.",
    )
    max_batch: int = Field(
        default=512, ge=1, description="Most writes committed together in one group commit."
    )
    reader_threads: int = Field(
        default=2,
        ge=1,
        le=16,
        description="Reader threads, each with its own connection. On PostgreSQL a server "
        "opens this many connections plus one for the writer (and one at start-up): the "
        "connection limit per process.",
    )
    search_index_messages: bool = Field(
        default=True,
        description="Run the search indexer, which indexes committed messages in the background "
        "(its own file, search.sqlite). Off only to measure what indexing costs: messages "
        "written meanwhile are indexed when the server next starts with it on.",
    )
    max_frame_bytes: int = Field(
        default=64 * 1024, ge=1024, description="Largest inbound WebSocket frame (bytes)."
    )
    max_body_chars: int = Field(
        default=32_000, ge=1, description="Longest message body (characters)."
    )
    outbox_frames: int = Field(
        default=4096,
        ge=16,
        description="Frames queued for one connection before it is cut as a slow consumer.",
    )
    outbox_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=64 * 1024,
        description="Bytes queued for one connection before it is cut as a slow consumer.",
    )
    ws_stall_secs: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="A connection whose frames have not left for this long is cut as a slow "
        "consumer (1013); the close frame waits behind what the peer has not read, and a peer "
        "that reads nothing more is dropped this long after.",
    )
    header_timeout_secs: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="Time an HTTP client has to send a request's headers (first byte to last, "
        "on a new or kept-alive connection) before the connection is closed.",
    )
    attachment_max_bytes: int = Field(
        default=100 * 1024 * 1024,
        ge=1024,
        description="Largest attachment one upload may hold (bytes); a larger upload is refused "
        "(413) as soon as its declared length or its streamed bytes pass it.",
    )
    attachment_project_bytes: int = Field(
        default=2 * 1024 * 1024 * 1024,
        ge=1024,
        description="Attachment bytes one project may hold (distinct contents counted once).",
    )
    attachment_rate_per_min: float = Field(
        default=60.0,
        gt=0,
        description="Sustained uploads per member per minute; past it (and the burst) an upload "
        "is refused (429 rate_limited, with retry_after_ms) before its body is read.",
    )
    attachment_burst: int = Field(
        default=20, ge=1, description="Uploads a member may burst above the rate."
    )
    attachment_concurrent_uploads: int = Field(
        default=8,
        ge=1,
        description="Uploads the server receives at once, whoever sends them (each holds a "
        "16 MB buffer ring and two threads while it streams); more wait their turn in order, "
        "for at most attachment_wait_secs, and are then refused (503 uploads_busy).",
    )
    attachment_wait_secs: float = Field(
        default=30.0,
        gt=0,
        description="How long an upload waits for its turn while attachment_concurrent_uploads "
        "others are received, before it is refused (503 uploads_busy, with retry_after_ms).",
    )
    attachment_reservation_secs: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="How long the quota an upload reserved (in the database, so every node "
        "counts it) stays reserved unless the upload renews it; it does so every third of "
        "this while it streams. A reservation whose server died expires after this.",
    )
    attachment_max_pixels: int = Field(
        default=50_000_000,
        ge=10_000,
        description="Most pixels an uploaded image may declare; a larger one (a decompression "
        "bomb) is refused before it is decoded.",
    )
    send_rate_per_sec: float = Field(
        default=10.0, gt=0, description="Sustained sends per member per second."
    )
    send_burst: int = Field(
        default=40, ge=1, description="Sends a member may burst above the rate."
    )
    session_days: int = Field(default=30, ge=1, description="Lifetime of a browser session.")
    login_link_minutes: int = Field(
        default=30, ge=1, description="Lifetime of a one-time login link."
    )
    invite_days: int = Field(default=7, ge=1, description="Lifetime of an invite link.")
    research_approval_hours: int = Field(
        default=24, ge=1, description="How long a research approval may start a run."
    )
    research_budget_tokens: int = Field(
        default=200_000,
        ge=1,
        description="The tokens a person's research proposal form suggests (at most the cap of "
        "50 000 000, and at most what the project's token budget has left).",
    )
    research_budget_requests: int = Field(
        default=60, ge=1, description="The model requests the research proposal form suggests."
    )
    research_budget_seconds: int = Field(
        default=1800,
        ge=1,
        description="The wall-clock seconds of running the research proposal form suggests.",
    )
    research_budget_steps: int = Field(
        default=60, ge=1, description="The steps the research proposal form suggests."
    )
    trash_retention_days: int = Field(
        default=30, ge=1, description="Shown as the retention hint in the trash; never auto-purges."
    )
    demo: bool = Field(default=True, description="Create the demo project on first start.")
    lang: Literal["zh", "en"] = Field(
        default="zh",
        description="The server's language for what it writes before anyone has chosen one: the "
        "demo project (its name, goal and lead) and the owner's name, made on first start. "
        "`./scripts/serve` sets it from the shell's locale (`LC_ALL`, `LC_MESSAGES`, `LANG`: "
        "Chinese for `zh_*`, `C` or none, else English) unless `ROOM_LANG` is set. Each person's "
        "page and digest follow their own choice.",
    )
    project_creators: tuple[str, ...] = Field(
        default=(),
        description="Handles of the people who may create projects (comma-separated in env); "
        "empty: anyone signed in. The server's owner always may; anyone else is refused "
        "(403 not_a_creator, audited).",
    )
    user_watch_secs: float = Field(
        default=0.25,
        gt=0,
        le=5,
        description="How often the server looks for people an operator changed beside it "
        "(`room users disable`/`enable`): a disabled person's open sockets close and the "
        "rosters change within this many seconds.",
    )
    digest_smtp_host: str | None = Field(
        default=None,
        description="SMTP server for the email digest of unread mentions "
        '(docs/protocol.md, "Notifications"); unset: no digest is sent (the default).',
    )
    digest_smtp_port: int = Field(default=25, ge=1, le=65535, description="The SMTP server's port.")
    digest_smtp_user: str | None = Field(
        default=None, description="SMTP login (with digest_smtp_password); unset: no login."
    )
    digest_smtp_password: str | None = Field(
        default=None, description="SMTP password; never logged or reported."
    )
    digest_smtp_starttls: bool = Field(
        default=False, description="Upgrade the SMTP connection with STARTTLS before sending."
    )
    digest_from: str = Field(
        default="project-room@localhost", description="The digest's From address."
    )
    digest_away_secs: float = Field(
        default=3600.0,
        ge=0,
        description="A person gets a digest of unread mentions once they have been away (no read, "
        "no message in any project) this long, and has an email address set.",
    )
    digest_every_secs: float = Field(
        default=300.0,
        gt=0,
        description="How often the server looks for people who are due a digest.",
    )
    credential_recheck_secs: float = Field(
        default=10.0,
        gt=0,
        description="How often open sockets are checked against their session or token: one "
        "revoked where the server does not hear it (`room member token`/`revoke` from the CLI) "
        "or a session past its expiry is closed within this many seconds; so are the MCP "
        "sessions (`/mcp`) of a revoked token.",
    )
    risk_scan_daily: bool = Field(
        default=False,
        description="Run the risk scan over every project once at start and then every 24 "
        "hours (besides on demand: the overview page, POST /api/risk-scan, `room risk`).",
    )
    max_concurrent_turns: int = Field(
        default=4, ge=1, description="Agent turns running at once on this server."
    )
    max_steps: int = Field(
        default=8, ge=1, le=100, description="Default step limit of one agent turn (per project)."
    )
    agent_turn_cap: int = Field(
        default=12,
        ge=1,
        description="Default loop brake: agent turns allowed since the last human message.",
    )
    token_budget: int | None = Field(
        default=None, ge=1, description="Default per-project token budget (none: unlimited)."
    )
    tool_calls_per_turn: int = Field(
        default=40,
        ge=1,
        le=1000,
        description="Default limit on an agent's tool calls in one turn; past it the loop brake "
        "stops the turn (per project).",
    )
    command_timeout_secs: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="Default wall-clock limit of one shell command of an agent (per project).",
    )
    command_output_bytes: int = Field(
        default=16 * 1024,
        ge=256,
        le=1024 * 1024,
        description="Default bytes of a command's output returned to the model: head and tail "
        "with a truncation marker (per project).",
    )
    command_secs_per_turn: float = Field(
        default=600.0,
        gt=0,
        le=86_400,
        description="Default total seconds an agent's commands may run in one turn; past it the "
        "loop brake stops the turn (per project).",
    )
    workspace_disk_mib: int = Field(
        default=10 * 1024,
        ge=1,
        le=16 * 1024 * 1024,
        description="Default disk budget, in MiB, of the folder an agent writes in (the "
        "workspace, or its task attempt's worktree); past it writes are refused (per project: "
        "`limits.workspace_disk_mib`).",
    )
    sandbox_tmp_bytes: int = Field(
        default=256 * 1024**2,
        ge=1024**2,
        le=64 * 1024**3,
        description="Size of each of the RAM-backed scratch folders (`/tmp`, `/dev/shm`) of an "
        'agent\'s command; a write past it fails with "No space left on device".',
    )
    allow_unsandboxed_commands: bool = Field(
        default=False,
        description="Let a project's owner run agents' commands without a sandbox where this "
        "server has none (the project's `unsandboxed` setting does nothing unless this is on).",
    )
    provider_idle_timeout_secs: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="Seconds a model provider's streamed answer may stay silent between two "
        "chunks (there is no total timeout: an answer that keeps arriving is received).",
    )
    provider_first_byte_timeout_secs: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="Seconds to wait for the first byte of a model provider's answer once the "
        "request was sent; past it the call fails (`provider_timeout`) and is never sent again "
        "(the provider may be running it).",
    )
    provider_connect_timeout_secs: float = Field(
        default=10.0, gt=0, le=600, description="Seconds to connect to a model provider."
    )
    provider_max_retries: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Retries of a model request the provider provably never ran: no connection "
        "was made, or it answered 429, 503 (529) or 408. Nothing else is sent twice: silence "
        "after the request was sent, another 5xx, a cut connection fail at once.",
    )
    context_tokens: int = Field(
        default=32_000,
        ge=500,
        description="Token budget of an agent's whole context: the system message, the project "
        "records, its checkpoint and own earlier turns, and the timeline (the new messages are "
        "always kept; timeline lines that do not fit are announced by one line).",
    )
    memory_budget_bytes: int = Field(
        default=64_000,
        ge=4_096,
        description="Most UTF-8 bytes of the project records section in an agent's context "
        "(a ceiling, not a quota; over it the section degrades as docs/memory.md says).",
    )
    memory_session_entries: int = Field(
        default=15,
        ge=1,
        le=200,
        description="Latest session-log entries in the project records section (halved while "
        "over the budget).",
    )
    memory_stale_days: int = Field(
        default=14,
        ge=0,
        description="Days after which the project summary is called stale when newer session "
        "entries exist (0: never).",
    )
    memory_inject: bool = Field(
        default=True,
        description="Give every request of an in-process agent the project records section (off: "
        "agents read memory only with memory_read and memory_search).",
    )
    memory_reminder_max: int = Field(
        default=3,
        ge=0,
        description="Most reminders to record a session per agent session (0: never reminded).",
    )
    memory_reminder_gap_secs: float = Field(
        default=600.0,
        ge=0,
        description="Least seconds between two such reminders.",
    )
    memory_bootstrap_when_empty: bool = Field(
        default=True,
        description="While the project summary is empty, the records section asks an agent that "
        "may write memory to learn the project and fill the summary in.",
    )
    stop_confirm_secs: float = Field(
        default=5.0,
        ge=0,
        description="How long a pause/archive/trash waits for running turns to confirm a stop.",
    )
    lock_wait_secs: float = Field(
        default=1.0, ge=0, description="How long a second server waits for the lock before exiting."
    )

    @property
    def origin(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = "localhost" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"

    @property
    def allowed_origins(self) -> frozenset[str]:
        origins = {self.origin, *(o.rstrip("/") for o in self.extra_origins)}
        # The same server is reachable as localhost and 127.0.0.1 on loopback.
        if self.host in ("127.0.0.1", "localhost", "0.0.0.0", "::") and not self.public_url:
            origins |= {f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}"}
        return frozenset(origins)

    @model_validator(mode="after")
    def _bus_needs_postgres(self) -> Settings:
        if self.bus_url is not None and self.database_url is None:
            raise ValueError(
                "bus_url (--bus, ROOM_BUS_URL) joins servers that share a PostgreSQL database: "
                "set database_url (--database, ROOM_DATABASE_URL) too (docs/cluster.md)"
            )
        return self

    @model_validator(mode="after")
    def _workspaces_apart_from_data(self) -> Settings:
        # Every folder in workspaces_dir may become a project's workspace (agents read and
        # write it): it must hold nothing of the data folder, nor the data folder it.
        if self.workspaces_dir is not None:
            shared = self.workspaces_dir.expanduser().resolve()
            data = self.data.expanduser().resolve()
            if shared == data or shared in data.parents or data in shared.parents:
                raise ValueError(
                    "workspaces_dir (ROOM_WORKSPACES_DIR) must be a folder apart from the data "
                    f"folder {data}: neither it, inside it nor around it (docs/cluster.md)"
                )
        return self

    @property
    def backend(self) -> str:
        """``sqlite`` (the data folder's room.sqlite) or ``postgresql`` (``database_url``)."""
        return "sqlite" if self.database_url is None else "postgresql"

    @property
    def db_path(self) -> Path:
        return self.data / "room.sqlite"

    @property
    def attachments_root(self) -> Path:
        """Where attachments' files are: ``attachments_dir``, else ``<data>/attachments``."""
        return self.data / "attachments" if self.attachments_dir is None else self.attachments_dir

    @property
    def lock_path(self) -> Path:
        return self.data / "room.lock"


def load_settings(
    overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    """Build settings from ``ROOM_*`` environment variables, then explicit overrides (flags)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for name, field in Settings.model_fields.items():
        raw = env.get(f"ROOM_{name.upper()}")
        if raw is None:
            continue
        if field.annotation == tuple[str, ...]:
            values[name] = tuple(part.strip() for part in raw.split(",") if part.strip())
        elif field.annotation is bool:
            values[name] = raw.strip().lower() in ("1", "true", "yes", "on")
        else:
            values[name] = raw
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = value
    return Settings.model_validate(values)
