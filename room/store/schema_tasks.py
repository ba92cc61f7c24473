"""Plans, tasks, acceptance evidence and decisions (issue 5): their tables, for the purge."""

# Tables holding project rows, children first (the lifecycle purge deletes in this order).
TASK_TABLES: tuple[str, ...] = ()
