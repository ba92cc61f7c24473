"""The lease under which a node runs a project's agent turns, and where those turns may run
(docs/cluster.md, "Agents across nodes"; DESIGN.md §9). Pure: the time is given.

A project has at most one lease row: the node holding it (``holder``), its fencing ``token`` and
when it lapses (``expires_at``). A node *takes* a project's lease when there is none, *renews*
its own (the token stays), and *adopts* another node's only once that one has lapsed (the token
goes up by one). Every write a turn makes carries the token it was opened under and is refused
when the row holds another: a node that was paused or cut off past its lease cannot write after
another node adopted it, whatever its clock says.

Turns run on the project's home node only (its workspace is on that node's disk). When the home
node is not heard from, the project's agent deliveries wait (``home_node_offline``) until it
comes back or an operator moves the home.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class Lease:
    """A project's lease as the database holds it."""

    holder: str
    token: int
    expires_at: float


class Claim(StrEnum):
    """What a node's claim on a project's lease does."""

    TAKE = "take"  # no lease yet: a new one, token 1
    RENEW = "renew"  # the node's own (lapsed or not, nobody adopted it): same token, later expiry
    ADOPT = "adopt"  # another node's, lapsed: this node's now, token + 1
    REFUSED = "refused"  # another node's, still running


def claim(lease: Lease | None, node: str, now: float) -> Claim:
    """What ``node`` claiming the project's ``lease`` at ``now`` does. A lease expires at
    ``expires_at`` exactly (a lease of 0 s is never held)."""
    if lease is None:
        return Claim.TAKE
    if lease.holder == node:
        return Claim.RENEW
    if now >= lease.expires_at:
        return Claim.ADOPT
    return Claim.REFUSED


def next_token(lease: Lease | None, outcome: Claim) -> int:
    """The token after the claim: 1 for a new lease, one more on adoption, unchanged on renewal.
    A refused claim has none."""
    if outcome is Claim.REFUSED:
        raise ValueError("a refused claim takes no token")
    if lease is None:
        return 1
    return lease.token + 1 if outcome is Claim.ADOPT else lease.token


def fenced(lease: Lease | None, token: int) -> bool:
    """True when a write carrying ``token`` may go ahead: the lease still holds that token
    (expired or not — nobody adopted it, so nobody else writes)."""
    return lease is not None and lease.token == token


def renew_due(expires_at: float, now: float, lease_secs: float) -> bool:
    """Renew once a third of the lease is spent: two renewals may fail before it lapses."""
    return expires_at - now <= lease_secs * 2 / 3


class Home(StrEnum):
    """Where a project's turns run, seen from one node."""

    HERE = "here"  # this node is the project's home (or the project names none yet)
    ELSEWHERE = "elsewhere"  # another node is home and is heard from: its turns run there
    OFFLINE = "offline"  # another node is home and is not heard from: the turns wait


def home_of(home_node: str | None, node: str, live: Collection[str] | None) -> Home:
    """Where a project whose home is ``home_node`` runs its turns, seen from ``node``.
    ``live``: the other nodes heard from lately, or None when this node cannot tell (no bus):
    the home is then taken to be up (its turns run there as soon as it is woken)."""
    if home_node is None or home_node == node:
        return Home.HERE
    if live is None or home_node in live:
        return Home.ELSEWHERE
    return Home.OFFLINE
