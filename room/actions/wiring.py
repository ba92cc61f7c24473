"""Connecting the actions to a core (the app's lifespan and tests call :func:`install` once)."""

from __future__ import annotations

from functools import partial

from room.actions import decisions, effects
from room.core import Core


def install(core: Core) -> None:
    """Committed effects go to the one dispatcher; the hooks on stored messages are registered
    by the code that owns them."""
    core.db.effects = partial(effects.apply, core)
    decisions.register(core)
