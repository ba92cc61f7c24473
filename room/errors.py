"""The error tree of Project Room.

Every error the server raises on purpose derives from :class:`RoomError` and carries a stable,
machine-readable ``code`` (sent to clients as ``{"type": "error", "code": ..., "message": ...}``
or as the JSON body of an HTTP error) and a human ``message``.

::

    RoomError
    ├── BadRequestError            400  invalid input (frame, body, parameter)
    │   ├── PayloadTooLargeError   413  a body past its endpoint's limit (declared or streamed)
    │   ├── FrameError                  a WebSocket frame that failed validation
    │   ├── ForgedAuthorError           a frame or body that tries to name its own author
    │   ├── TxnConflictError            same client_txn_id, different content
    │   ├── MentionsUnresolvedError     draft has unresolved mention diagnostics
    │   ├── BadQueryError               a search query with nothing to look for (room.rules.searchtext)
    │   ├── PackError                   a project pack that cannot be imported (room.rules.packs)
    │   └── WorkspacePathError          a workspace path broke a rule (room.infra.evidence); has a hint
    │       ├── EvidenceError               … cited as artifact evidence (room.infra.evidence)
    │       └── FileToolError               … or given to a file tool, which may refuse (room.infra.files)
    ├── AuthError                  401  no valid session, token or login link
    ├── ForbiddenError             403  authenticated, but not allowed (role, CSRF, origin)
    ├── NotFoundError              404  no such project, member, message …
    ├── ConflictError              409  the current state does not allow this
    │   └── LeaseLostError              a turn's write after its node lost the project's lease
    ├── RateLimitedError           429  too many sends; carries ``retry_after_ms``
    ├── BusyError                  503  the server is at a bound of its own; carries ``retry_after_ms``
    ├── BackupError                400  a backup that cannot be restored, or a restore's target not empty
    ├── StorageError               500  the database refused (integrity, disk)
    │   ├── DatabaseUnavailableError 503 PostgreSQL cannot be reached, or the link was lost
    │   ├── LockHeldError               another server holds the data folder (names its pid)
    │   └── SchemaTooNewError           the database was written by a newer Project Room
    ├── SandboxError               500  the command runner could not run a command as asked
    │   ├── SandboxUnavailableError 503 no isolation here (no bubblewrap, namespaces refused)
    │   ├── SandboxPathError       400  a working or writable folder is missing or not a folder
    │   └── SandboxSpawnError           the runner itself failed to start (not the command)
    └── ProviderError              502  a model provider failed; ``kind`` says how
        ├── ProviderAuthError           credentials missing or refused
        ├── ProviderRateLimitError      429 after retries
        ├── ProviderTimeoutError        no answer in time
        ├── ProviderServerError         5xx after retries, or an unreadable answer
        └── ProviderRequestError        the provider rejected the request (4xx)

Exceptions carry data, not formatting: ``details`` is a JSON-serialisable mapping that clients may
show (for example the offending plan items, or the holder pid of a lock).
"""

from __future__ import annotations

from typing import Any, ClassVar


class RoomError(Exception):
    """Base of every deliberate error. ``code`` is stable; ``message`` is for people."""

    code: ClassVar[str] = "error"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code  # type: ignore[misc]
        self.details: dict[str, Any] = details

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            data["details"] = self.details
        return data


class BadRequestError(RoomError):
    code = "bad_request"
    http_status = 400


class PayloadTooLargeError(BadRequestError):
    code = "too_large"
    http_status = 413


class FrameError(BadRequestError):
    code = "bad_frame"


class ForgedAuthorError(BadRequestError):
    code = "forged_author"


class TxnConflictError(BadRequestError):
    code = "txn_conflict"


class MentionsUnresolvedError(BadRequestError):
    code = "mentions_unresolved"


class BadQueryError(BadRequestError):
    """A search query that cannot be searched for; ``reason`` says why (``empty``, ``too_long``,
    ``too_many_terms``, ``only_exclusions``)."""

    code = "bad_query"

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message, reason=reason)
        self.reason = reason


class PackError(BadRequestError):
    """A project pack was refused; ``reason`` says why (``bad_kind``, ``pack_too_new``,
    ``missing_part``, ``bad_row`` …, docs/packs.md), ``part`` and ``line`` where, when known.
    Nothing of a refused pack is kept."""

    code = "bad_pack"

    def __init__(self, reason: str, message: str, **details: Any) -> None:
        super().__init__(message, reason=reason, **details)
        self.reason = reason


class WorkspacePathError(BadRequestError):
    """A path inside a project's workspace was refused. ``code`` names the rule that refused it;
    ``details`` carry the ``path`` (cut to 200 characters) and a ``hint`` saying what to do, which
    is what a model reads to try again. The resolver (:mod:`room.infra.fsroot`, opened through
    :func:`room.infra.evidence.open_workspace`) raises whichever subclass its caller names, so one
    set of path rules serves every caller."""

    code = "bad_workspace_path"

    def __init__(self, code: str, path: str, hint: str, message: str, **details: Any) -> None:
        super().__init__(
            f"{message}：{path[:200]}", code=code, path=path[:200], hint=hint, **details
        )


class FileToolError(WorkspacePathError):
    """A file tool (:mod:`room.infra.files`) refused; ``code`` is one of
    ``room.infra.files.FILE_CODES``."""

    code = "file_tool_error"


class AuthError(RoomError):
    code = "unauthenticated"
    http_status = 401


class ForbiddenError(RoomError):
    code = "forbidden"
    http_status = 403


class NotFoundError(RoomError):
    code = "not_found"
    http_status = 404


class ConflictError(RoomError):
    code = "conflict"
    http_status = 409


class LeaseLostError(ConflictError):
    """The fence refused a turn's write: another node adopted the project's lease
    (room.store.leases, docs/cluster.md "Agents across nodes")."""

    code = "lease_lost"


class RateLimitedError(RoomError):
    code = "rate_limited"
    http_status = 429

    def __init__(self, message: str, *, retry_after_ms: int) -> None:
        super().__init__(message, retry_after_ms=retry_after_ms)
        self.retry_after_ms = retry_after_ms


class BusyError(RoomError):
    """The server is at a bound of its own (not the caller's rate): try again later."""

    code = "busy"
    http_status = 503

    def __init__(self, message: str, *, code: str | None = None, retry_after_ms: int) -> None:
        super().__init__(message, code=code, retry_after_ms=retry_after_ms)
        self.retry_after_ms = retry_after_ms


class BackupError(RoomError):
    """A backup refused by ``room restore`` (its ``code`` says why: ``archive_checksum``,
    ``archive_version`` …) or a target folder that is not empty (``target_not_empty``);
    nothing was written (room.actions.backup)."""

    code = "backup_refused"
    http_status = 400


class StorageError(RoomError):
    code = "storage_error"
    http_status = 500


class DatabaseUnavailableError(StorageError):
    """PostgreSQL cannot be reached, or the connection was lost mid-write: nothing (or perhaps
    the write) was saved; try again (a send with the same ``client_txn_id``). 503: a load
    balancer may send the request to another node."""

    code = "database_unavailable"
    http_status = 503


class LockHeldError(StorageError):
    code = "lock_held"

    def __init__(self, message: str, *, pid: int | None) -> None:
        super().__init__(message, pid=pid)
        self.pid = pid


class SchemaTooNewError(StorageError):
    code = "schema_too_new"


class SandboxError(RoomError):
    """The command runner (``room.infra.sandbox``) could not run a command as asked.

    A command that runs and fails is not an error: its exit code is in the result."""

    code = "sandbox_error"
    http_status = 500


class SandboxUnavailableError(SandboxError):
    """No isolation is available and running without it was not allowed; ``reason`` says why."""

    code = "sandbox_unavailable"
    http_status = 503

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message, reason=reason)
        self.reason = reason


class SandboxPathError(SandboxError):
    code = "sandbox_bad_path"
    http_status = 400


class SandboxSpawnError(SandboxError):
    code = "sandbox_spawn_failed"


class ProviderError(RoomError):
    """A model provider failed. ``kind`` is one of the subclass codes below."""

    code = "provider_error"
    http_status = 502

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        retryable: bool = False,
        **details: Any,
    ) -> None:
        super().__init__(message, provider=provider, status=status, **details)
        self.provider = provider
        self.status = status
        self.retryable = retryable


class ProviderAuthError(ProviderError):
    code = "provider_auth"


class ProviderRateLimitError(ProviderError):
    code = "provider_rate_limited"


class ProviderTimeoutError(ProviderError):
    code = "provider_timeout"


class ProviderServerError(ProviderError):
    code = "provider_server_error"


class ProviderRequestError(ProviderError):
    code = "provider_request_rejected"
