"""The database's cluster id (room.store.schema_cluster): what a node names its bus subjects
with (room.infra.bus; docs/cluster.md, "Subjects")."""

from __future__ import annotations

import re

from room.errors import StorageError
from room.store.dialect import Connection

# One token of a NATS subject, as the migration draws it (16 hex digits) or an operator sets it:
# no ``.`` (a token more), no ``*`` or ``>`` (a wildcard: another cluster's subjects too).
_TOKEN = re.compile(r"[0-9A-Za-z_-]{1,64}")


def cluster_id(conn: Connection) -> str:
    """The id the migration ``0031_cluster_id`` drew for this database. StorageError when the
    row is missing or was set by hand to what cannot be one token of a subject."""
    row = conn.execute("SELECT cluster FROM cluster_identity WHERE id = 1").fetchone()
    if row is None:
        raise StorageError(
            "the database's cluster id is missing (cluster_identity has no row; "
            "docs/cluster.md, Subjects)"
        )
    found = str(row[0])
    if not _TOKEN.fullmatch(found):
        raise StorageError(
            f"the database's cluster id {found!r} cannot name bus subjects: 1 to 64 letters, "
            "digits, '-' or '_' (docs/cluster.md, Subjects)",
            cluster=found,
        )
    return found
