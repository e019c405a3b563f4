"""Selective routing in the GossipNode core, exactly: messages in, effects out.

A node ``a:1`` is linked to neighbours by ``Link`` messages, told what lies beyond them
by ``Interest`` adverts, and given events; the tests check which adverts and event
copies it sends, and to whom.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from matching import Summary
from overlay.core.effects import Send
from overlay.core.framing import decode_map, encode_map
from overlay.core.messages import MessageError, decode_message, encode_message
from overlay.gossip.config import (
    FloodConfig,
    GossipConfig,
    GossipConfigError,
    PbcastConfig,
    SelectiveConfig,
    StrategyConfig,
)
from overlay.gossip.messages import (
    Digest,
    Event,
    EventBody,
    Interest,
    Link,
    Named,
    TopicInterest,
)
from overlay.gossip.node import GossipNode, node_hex

DELAY = 0.05  # advert_delay
S1, S2, S3 = node_hex("s1:1"), node_hex("s2:1"), node_hex("s3:1")


def make(neighbours: list[str], strategy: StrategyConfig | None = None,
         **selective: Any) -> GossipNode:
    config = GossipConfig(strategy=strategy or FloodConfig(ttl=8),
                          selective=SelectiveConfig(advert_delay=DELAY, **selective))
    node = GossipNode("a:1", random.Random(1), config)
    node.start(0.0, [])
    for peer in neighbours:
        node.on_message(0.0, peer, Link())
    node.drain_effects()
    return node


def summary(*filters: str) -> dict[str, Any]:
    return Summary.of(filters).to_wire()


def advert(*named: tuple[str, int, str], layers: tuple[dict[str, Any], ...] = (),
           topic: str = "t", ask: bool = False) -> Interest:
    entries = tuple(Named(sub, hops, summary(text)) for sub, hops, text in named)
    return Interest({topic: TopicInterest(entries, layers)}, ask)


def hear(node: GossipNode, now: float, **adverts: Interest) -> None:
    for peer, msg in adverts.items():
        node.on_message(now, f"{peer}:1", msg)


def sent(node: GossipNode, kind: type = Event) -> dict[str, Any]:
    return {e.dest: e.msg for e in node.drain_effects()
            if isinstance(e, Send) and isinstance(e.msg, kind)}


def flush(node: GossipNode, now: float) -> dict[str, Interest]:
    """Let the batched adverts go out; what each neighbour got."""
    node.drain_effects()
    node.on_timer(now + DELAY)
    return sent(node, Interest)


def entries(msg: Interest, topic: str = "t") -> list[tuple[str, int]]:
    return [(n.node, n.hops) for n in msg.topics[topic].named]


def event(hop: int, msg_id: str = "ab", ttl: int = 8) -> Event:
    return Event(EventBody("t", msg_id, {"x": 5}, b"", "ff", 1.0), hop, ttl)


# -- adverts -------------------------------------------------------------------------------


def test_adverts_are_distance_vectors_with_split_horizon() -> None:
    node = make(["b:1", "c:1"])
    node.subscribe(0.0, "t", "x > 3", 1)
    out = flush(node, 0.0)
    me = node.node_hex
    assert {p: entries(m) for p, m in out.items()} == {"b:1": [(me, 0)], "c:1": [(me, 0)]}
    assert out["b:1"].topics["t"].named[0].summary == summary("x > 3")
    assert all(m.ask for m in out.values())  # nothing heard from them yet

    hear(node, 1.0, b=advert((S1, 2, "x > 1"), (node_hex("b:1"), 0, "y = 1")))
    out = flush(node, 1.0)
    # Only c hears of what lies beyond b, one hop further; b gets nothing new.
    assert list(out) == ["c:1"]
    assert entries(out["c:1"]) == [(me, 0), (node_hex("b:1"), 1), (S1, 3)]
    assert out["c:1"].ask  # c has still said nothing
    hear(node, 2.0, c=advert())
    assert flush(node, 2.0) == {}  # nothing new for anyone, and nothing asked


def test_fewest_hops_win_and_entries_past_the_radius_are_dropped() -> None:
    node = make(["b:1", "c:1", "d:1"], radius=4)
    hear(node, 0.0, b=advert((S1, 2, "x > 1"), (S2, 3, "x > 1")),
         c=advert((S1, 1, "x > 1")))
    out = flush(node, 0.0)
    assert entries(out["d:1"]) == [(S1, 2)]  # S2 would be 4 hops away: past radius 4
    assert entries(out["b:1"]) == [(S1, 2)]  # through c
    assert entries(out["c:1"]) == [(S1, 3)]  # through b


def test_subscribers_past_max_named_go_into_anonymous_layers() -> None:
    node = make(["b:1", "c:1"], max_named=1)
    hear(node, 0.0, b=advert((S1, 0, "x > 1"), (S2, 2, "x < 0"),
                             layers=({}, summary("y = 2"))))
    msg = flush(node, 0.0)["c:1"]
    assert entries(msg) == [(S1, 1)]
    layers = msg.topics["t"].layers
    assert layers[:2] == ({}, {})
    assert Summary.from_wire(layers[2]) == Summary.of(["y = 2"])
    assert Summary.from_wire(layers[3]) == Summary.of(["x < 0"])


def test_a_lost_link_takes_its_entries_away_and_a_new_one_asks_for_everything() -> None:
    node = make(["b:1", "c:1"])
    hear(node, 0.0, b=advert((S1, 0, "x > 1")), c=advert())
    assert entries(flush(node, 0.0)["c:1"]) == [(S1, 1)]
    node.on_unreachable(1.0, "b:1", event(1))
    assert flush(node, 1.0)["c:1"].topics == {}
    # A peer asking (it has nothing of ours) gets the whole advert again, unchanged or not.
    hear(node, 2.0, c=advert(ask=True))
    assert "c:1" in flush(node, 2.0)


def test_adverts_are_sent_again_after_the_refresh_interval() -> None:
    node = make(["b:1"], refresh_interval=5.0)
    hear(node, 0.0, b=advert())
    flush(node, 0.0)
    assert flush(node, 1.0) == {}
    resent = []
    for tenth in range(11, 70):
        node.on_timer(tenth / 10)
        resent += [tenth / 10 for dest in sent(node, Interest)]
    assert len(resent) == 1 and 5.0 < resent[0] < 6.2


# -- routing events --------------------------------------------------------------------------


def test_a_published_event_goes_only_toward_the_nearest_interested_neighbour() -> None:
    node = make(["b:1", "c:1", "d:1"])
    hear(node, 0.0, b=advert((S1, 1, "x > 3")), c=advert((S1, 2, "x > 3")),
         d=advert((S2, 0, "x < 0")))
    node.drain_effects()
    node.publish(1.0, "t", {"x": 5}, msg_id="ab")
    out = sent(node)
    assert list(out) == ["b:1"]
    assert (out["b:1"].hop, out["b:1"].ttl, out["b:1"].guided) == (1, 8, True)
    node.publish(1.0, "t", {"x": 2}, msg_id="cd")  # nobody's filter matches
    assert sent(node) == {}


def test_paths_toward_several_subscribers_are_shared() -> None:
    node = make(["b:1", "c:1", "d:1"])
    hear(node, 0.0, b=advert((S1, 1, "")), c=advert((S1, 1, ""), (S2, 1, "")),
         d=advert((S2, 1, ""), (S3, 3, "")))
    node.drain_effects()
    node.publish(1.0, "t", {"x": 5}, msg_id="ab")
    assert sorted(sent(node)) == ["c:1", "d:1"]  # S1 and S2 both through c; S3 only via d
    node2 = make(["b:1", "c:1"], paths=2)
    hear(node2, 0.0, b=advert((S1, 1, "")), c=advert((S1, 1, "")))
    node2.drain_effects()
    node2.publish(1.0, "t", {}, msg_id="ab")
    assert sorted(sent(node2)) == ["b:1", "c:1"]


@pytest.mark.parametrize(("hops_back", "forwarded"), [(1, False), (2, False), (3, True)])
def test_a_relay_carries_an_event_on_only_when_on_its_senders_way(
        hops_back: int, forwarded: bool) -> None:
    # S1 is 1 hop beyond c (so 2 from here); the sender b is hops_back beyond b.
    node = make(["b:1", "c:1"])
    hear(node, 0.0, b=advert((S1, hops_back, "")), c=advert((S1, 1, "")))
    node.on_message(1.0, "b:1", event(3))
    assert list(sent(node)) == (["c:1"] if forwarded else [])


def test_a_sender_that_does_not_know_the_subscriber_counts_as_farther() -> None:
    node = make(["b:1", "c:1"])
    hear(node, 0.0, b=advert(), c=advert((S1, 0, "")))
    node.on_message(1.0, "b:1", event(2))
    assert list(sent(node)) == ["c:1"]


def test_the_hop_limit_bounds_how_far_routes_are_followed() -> None:
    node = make(["b:1", "c:1", "d:1"])
    hear(node, 0.0, b=advert(), c=advert((S1, 1, "")), d=advert((S2, 0, "")))
    node.on_message(1.0, "b:1", event(7))  # copies go out at hop 8 = ttl: no hop after
    assert list(sent(node)) == ["d:1"]


def test_anonymous_layers_are_followed_within_the_hop_budget() -> None:
    node = make(["b:1", "c:1"])
    hear(node, 0.0, b=advert(), c=advert(layers=({}, {}, summary("x > 3"))))
    node.on_message(1.0, "b:1", event(5))  # copies at hop 6: 2 more hops allowed
    assert list(sent(node)) == ["c:1"]
    node.on_message(1.0, "b:1", event(6, msg_id="cd"))
    assert sent(node) == {}  # copies at hop 7: the interest 2 hops beyond c is too far


def test_neighbours_without_an_advert_and_budgets_past_the_radius_get_everything() -> None:
    node = make(["b:1", "c:1", "d:1"])
    hear(node, 0.0, b=advert(), c=advert())  # d has said nothing yet
    node.on_message(1.0, "b:1", event(1))
    assert list(sent(node)) == ["d:1"]
    short = make(["b:1", "c:1", "d:1"], radius=3)
    hear(short, 0.0, b=advert(), c=advert(), d=advert())
    short.on_message(1.0, "b:1", event(4))  # 3 more hops after the neighbour: unknown
    assert sorted(sent(short)) == ["c:1", "d:1"]
    short.on_message(1.0, "b:1", event(5, msg_id="cd"))
    assert sent(short) == {}  # 2 more hops: within what the adverts tell, nobody


def test_pbcast_sends_its_first_phase_along_every_route_and_digests_only_along_them() -> None:
    node = make(["b:1", "c:1", "d:1", "e:1"], strategy=PbcastConfig(fanout=1))
    hear(node, 0.0, b=advert((S1, 0, "")), c=advert((S2, 2, "")), d=advert(), e=advert())
    node.drain_effects()
    node.publish(1.0, "t", {"x": 5}, msg_id="ab")
    assert sorted(sent(node)) == ["b:1", "c:1"]  # both routes, fanout 1 notwithstanding
    for dest, offered in (("c:1", {"t": ("ab",)}), ("d:1", {})):
        node.repair.send_digest(2.0, dest, push=True, pull=True)
        assert sent(node, Digest)[dest].ids == offered


# -- configuration and wire ------------------------------------------------------------------


def test_interest_adverts_survive_the_wire_and_malformed_ones_are_refused() -> None:
    msg = advert((S1, 3, "x > 1"), layers=({}, summary("y = 2")), ask=True)
    assert decode_message(decode_map(encode_map(encode_message(msg)))) == msg
    for bad in ({"node": "XYZ", "hops": 1, "summary": {}},
                {"node": S1, "hops": 16, "summary": {}},
                {"node": S1, "hops": 1, "summary": {"f": ["x >"]}}):
        wire = encode_message(msg)
        wire["topics"]["t"]["named"] = [bad]
        with pytest.raises(MessageError):
            decode_message(wire)


def test_selective_settings_are_checked() -> None:
    for bad in ({"radius": 17}, {"paths": 0}, {"max_named": -1}, {"refresh_interval": 0}):
        with pytest.raises(GossipConfigError):
            SelectiveConfig(**bad)
