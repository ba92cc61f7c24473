"""Connecting the actions to the services (the app's lifespan and tests call :func:`install`
once)."""

from __future__ import annotations

from functools import partial

from room.actions import decisions, effects
from room.services import Services


def install(core: Services) -> None:
    """Committed effects go to the one dispatcher; the hooks on stored messages are registered
    by the code that owns them."""
    core.db.effects = partial(effects.apply, core)
    decisions.register(core)
