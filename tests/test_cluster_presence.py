"""room.infra.bus.ClusterPresence without a bus server: the sets other nodes say, merged with
this node's own connections; a node's new set replaces its last; a node unheard for
PEER_LAPSE_SECS drops out; the callback hears exactly the people whose merged presence changed.
The two-node test with real sockets is tests/test_cluster_share.py."""

from __future__ import annotations

import time

from room.actions.relay import Relay
from room.infra.bus import PEER_LAPSE_SECS, Bus, ClusterPresence
from room.infra.outbox import Outbox
from room.rules.leases import Home, home_of


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def presence(clock: Clock | None = None) -> tuple[ClusterPresence, list[set[int]]]:
    bus = Bus("nats://127.0.0.1:1", "self", "c0ffee")  # never connected
    found = ClusterPresence(bus, clock or Clock())
    told: list[set[int]] = []
    found.on_people = told.append
    found.on_agents = told.append
    return found, told


def test_a_person_another_node_says_is_present_until_it_says_otherwise() -> None:
    here, told = presence()
    assert not here.person_present(7)
    here.bus.on_peer("b", {"k": "hb", "n": "b", "p": [7, 8]})
    assert here.person_present(7) and here.person_present(8)
    assert not here.person_online(7)  # not connected to this node
    assert told == [{7, 8}]
    here.bus.on_peer("b", {"k": "hb", "n": "b", "p": [8]})  # the whole set: 7 left B
    assert not here.person_present(7) and here.person_present(8)
    assert told[-1] == {7}
    here.bus.on_peer("b", {"k": "hb", "n": "b", "p": [8]})  # a heartbeat, nothing new
    assert len(told) == 2


def test_a_person_on_two_nodes_stays_present_while_either_has_them() -> None:
    here, told = presence()
    outbox = Outbox.__new__(Outbox)  # only its identity is used by the presence sets
    here.attach_person(5, outbox)
    here.bus.on_peer("b", {"k": "hb", "n": "b", "p": [5, 6]})
    assert told == [{6}]  # 5 was present already: no change to announce
    here.bus.on_peer("c", {"k": "hb", "n": "c", "p": [6]})
    assert told == [{6}]
    here.bus.on_peer("b", {"k": "hb", "n": "b", "p": []})
    assert here.person_present(5) and here.person_present(6)  # here, and on C
    assert told == [{6}]
    here.local_agents = lambda: ([31], [32])
    assert here.bus.beat() == {"p": [5], "a": [31], "r": [32]}  # what this node's beat says


def test_a_node_unheard_past_the_lapse_drops_out() -> None:
    clock = Clock()
    here, told = presence(clock)
    here.bus.on_peer("b", {"k": "hb", "n": "b", "p": [1, 2]})
    here.bus.on_peer("c", {"k": "hb", "n": "c", "p": [2]})
    clock.now += PEER_LAPSE_SECS / 2
    here.expire()
    assert here.person_present(1) and len(told) == 1
    here.bus.on_peer("c", {"k": "hb", "n": "c", "p": [2]})  # C goes on beating, B does not
    clock.now += PEER_LAPSE_SECS / 2
    here.expire()  # B's set is PEER_LAPSE_SECS old now; C's half that
    assert not here.person_present(1) and here.person_present(2)  # 2 is still on C
    assert told[-1] == {1}
    clock.now += PEER_LAPSE_SECS
    here.expire()
    assert not here.person_present(2) and told[-1] == {2}


def test_a_heartbeat_without_a_set_changes_nothing() -> None:
    here, told = presence()
    here.bus.on_peer("b", {"k": "hb", "n": "b", "p": [3]})
    here.bus.on_peer("b", {"k": "hb", "n": "b"})  # an older node: says no set
    assert here.person_present(3) and told == [{3}]


def test_an_agents_socket_or_turn_on_another_node_counts_until_it_lapses() -> None:
    clock = Clock()
    here, told = presence(clock)
    here.bus.on_peer("b", {"k": "hb", "n": "b", "p": [], "a": [40], "r": [41]})
    assert here.agent_connected_elsewhere(40) and not here.agent_running_elsewhere(40)
    assert here.agent_running_elsewhere(41) and not here.agent_connected_elsewhere(41)
    assert told == [{40, 41}]
    here.bus.on_peer("b", {"k": "hb", "n": "b", "p": [], "a": [40, 41], "r": []})
    assert here.agent_connected_elsewhere(41) and not here.agent_running_elsewhere(41)
    assert told[-1] == {41}  # its turn ended, its socket opened: its presence changed
    clock.now += PEER_LAPSE_SECS
    here.expire()
    assert not here.agent_connected_elsewhere(40) and told[-1] == {40, 41}


def test_a_node_cannot_tell_who_is_up_until_its_bus_has_been_up_three_heartbeats() -> None:
    """Right after its bus came (back) up a node has heard nobody yet: taking that silence for
    "down" marked a live home's deliveries ``home_node_offline`` (room.agents.leasing). It
    cannot tell (``live_nodes`` None: the home is taken to be up) until PEER_LAPSE_SECS passed."""
    bus = Bus("nats://127.0.0.1:1", "self", "c0ffee")  # never connected
    relay = Relay(None, None, bus=bus)  # type: ignore[arg-type]

    def knows() -> bool:
        return bus.peers_known

    assert not knows() and relay.live_nodes() is None  # down
    bus._up, bus._up_since = True, time.monotonic()  # as _reconnected does
    assert not knows() and relay.live_nodes() is None  # just back: nobody heard yet
    assert home_of("home", "self", relay.live_nodes()) is Home.ELSEWHERE
    bus._up_since -= PEER_LAPSE_SECS
    assert knows() and relay.live_nodes() == []  # now the silence means down
    assert home_of("home", "self", relay.live_nodes()) is Home.OFFLINE
    bus._peers["home"] = time.monotonic()  # its heartbeat
    assert relay.live_nodes() == ["home"]
    assert home_of("home", "self", relay.live_nodes()) is Home.ELSEWHERE
