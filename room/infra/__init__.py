"""The I/O adapters: everything that touches sockets, files, processes or the clock, apart from
SQLite (``room.store``) and the model providers (``room.providers``).

The live fan-out and its transport (``hub``, ``transport``, ``bodies``), content-addressed
attachment files (``blobs``), workspaces on disk (``fsroot``, the descriptor-relative resolver
under ``evidence``, ``filewalk`` and ``files``; ``diskuse``), git and its worktrees (``git``,
``worktrees``), the command sandbox (``sandbox``) and the operator's files (``boot``). They
know nothing of the store or the actions: callers hand them paths, descriptors and sockets.
"""
