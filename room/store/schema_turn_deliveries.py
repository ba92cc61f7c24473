"""0034: the deliveries a turn took are found by an index (``deliveries.turn_id``).

A turn that ends without completing (failed, stopped, braked), a restart's or a lease
adoption's settling of a turn left running, and a cleared brake resuming the turns it cut
short each read the deliveries the turn took (:func:`room.store.deliveries.of_turn`). Without
an index that was a scan of the whole ledger inside the writer's transaction: every write of
the server waited behind it, longer as the ledger grew (a million deliveries: tens of
milliseconds per such turn). A partial index: only rows a turn took name one, and a delivery
still waiting names none.
"""

from __future__ import annotations

TURN_DELIVERIES = """
CREATE INDEX deliveries_turn ON deliveries(turn_id) WHERE turn_id IS NOT NULL
"""

TURN_DELIVERIES_PG = TURN_DELIVERIES
