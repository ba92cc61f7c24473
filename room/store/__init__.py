"""SQLite storage: schema and migrations, the single writer with group commit, and queries.

Modules here hold SQL and nothing else: they take a connection and return rows or records. Only
``room.actions`` calls the write functions, from inside a writer job.
"""

from room.store.db import Appends, Database, Tx, run_write
from room.store.lock import DataLock

__all__ = ["Appends", "DataLock", "Database", "Tx", "run_write"]
