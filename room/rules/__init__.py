"""The rules: the pure part of the server (docs/architecture.md, "Layers").

Mention resolution, the lifecycle and delivery state machines, tasks, plans and research, model
route resolution, wire frames, effects, memory records and their section of each turn,
rendering, search text, the pack format, the portfolio, and the entities read from the store.
Nothing here does I/O or reads a clock (``now`` is passed in): a forbidden-imports contract in
``pyproject.toml`` keeps ``os``, ``sqlite3``, ``asyncio``, ``time`` and the rest out, and every
module is tested without a server.
"""
