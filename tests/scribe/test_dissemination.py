"""Publishing, numbering at the root, filtered forwarding and delivery: exact effects."""

from __future__ import annotations

import pytest

from matching import Index, parse
from overlay.core.pubsub import DeliveredEvent
from scribe import ScribeConfig
from scribe.dissemination import EventMemory, HandledEvent
from scribe.messages import Event, JoinAck, Leave
from scribe.publish_messages import Publish, PublishAck
from scribe.subscriptions import Subscription, TopicSubscriptions
from scribe.wire_records import EventBody
from tests.scribe.helpers import MID, TOPIC, attach, body, join, make, ref


def root_with_children(config: ScribeConfig | None = None):
    """Root 200 with a local subscription (x > 5) and children 101 (y = 1), 102 (x < 3)."""
    app, host = make(200, root=True, config=config)
    app.subscribe(0.0, TOPIC, "x > 5", 1)
    app.deliver(0.1, MID, join(101, "y = 1"), 1)
    app.deliver(0.1, MID, join(102, "x < 3"), 1)
    host.clear()
    return app, host


def test_the_root_numbers_a_local_publish_and_sends_it_only_where_it_may_match() -> None:
    app, host = root_with_children()
    msg_id = app.publish(1.0, TOPIC, {"x": 9, "y": 1}, b"hi", msg_id="ab", ts=0.5)
    assert msg_id == "ab"
    assert host.notices == [("published", {"topic": TOPIC, "msg_id": "ab", "seq": 1})]
    assert host.delivered == [(1, DeliveredEvent(TOPIC, "ab", 1, {"x": 9, "y": 1}, b"hi",
                                                 "00c8", 0.5, 0))]
    [(dest, ev)] = host.sent
    assert dest == "n101" and isinstance(ev, Event)
    assert (ev.hop, ev.plain, ev.groups, ev.sender, ev.body.seq) == (1, True, (), ref(200), 1)
    assert host.traces == [
        ("publish", {"topic": TOPIC, "msg_id": "ab", "attrs": {"x": 9, "y": 1}, "size": 2}),
        # No successors to copy it to (a one-node ring): acknowledged at once.
        ("publish_ack", {"topic": TOPIC, "msg_id": "ab", "seq": 1}),
        ("deliver", {"topic": TOPIC, "msg_id": "ab", "sub": 1, "hop": 0, "seq": 1,
                     "dup": False}),
        ("forward", {"topic": TOPIC, "msg_id": "ab", "to": "0065", "hop": 1})]
    app.publish(2.0, TOPIC, {"x": 1}, msg_id="cd")
    assert [ev.body.seq for _, ev in host.sent_of(Event)][-1] == 2
    assert [dest for dest, _ in host.sent_of(Event)] == ["n101", "n102"]


def test_only_a_reliable_publish_is_answered_by_a_published_notice() -> None:
    app, host = root_with_children()
    app.publish(1.0, TOPIC, {"x": 9, "y": 1}, msg_id="ab", reliable=False)
    assert host.notices == []
    assert [ev for ev, _ in host.traces] == ["publish", "deliver", "forward"]
    app.publish(2.0, TOPIC, {"x": 9, "y": 1}, msg_id="cd", reliable=True)
    assert host.notices == [("published", {"topic": TOPIC, "msg_id": "cd", "seq": 2})]
    assert [ev.body.seq for _, ev in host.sent_of(Event)] == [1, 2]


def test_without_summaries_events_go_down_every_edge_but_filters_still_hold() -> None:
    app, host = root_with_children(ScribeConfig(summaries=False))
    app.publish(1.0, TOPIC, {"x": 4}, msg_id="ab")
    assert [dest for dest, _ in host.sent_of(Event)] == ["n101", "n102"]
    assert host.delivered == []


def test_a_generated_msg_id_is_hex_from_the_hosts_rng() -> None:
    app, _ = make(100)
    first = app.publish(0.0, TOPIC, {})
    second = app.publish(0.0, TOPIC, {})
    assert len(first) == 32 and int(first, 16) >= 0 and first != second


def test_bad_publishes_are_refused() -> None:
    app, _ = make(100)
    with pytest.raises(ValueError):
        app.publish(0.0, TOPIC, {"x": [1]})  # type: ignore[dict-item]  # deliberately not an attribute value: the refusal is under test
    with pytest.raises(ValueError):
        app.publish(0.0, TOPIC, {}, msg_id="not hex")


def test_the_publisher_caches_the_root_and_falls_back_to_routing_when_it_is_gone() -> None:
    app, host = make(100)
    app.publish(0.0, TOPIC, {}, msg_id="01")
    [(key, routed)] = host.routed
    assert key == MID and isinstance(routed, Publish) and routed.origin == ref(100)
    app.on_direct(0.2, "n200", PublishAck(TOPIC, "01", 1, ref(200)))
    assert host.notices == [("published", {"topic": TOPIC, "msg_id": "01", "seq": 1})]
    host.clear()
    app.publish(1.0, TOPIC, {}, msg_id="02")
    [(dest, direct)] = host.sent
    assert dest == "n200" and host.routed == []
    app.on_unreachable(2.0, "n200", direct)
    assert host.routed == [(MID, direct)]
    host.clear()
    app.publish(3.0, TOPIC, {}, msg_id="03")
    assert len(host.routed) == 1 and host.sent == []


def test_the_root_acknowledges_a_routed_publish_to_its_origin() -> None:
    app, host = root_with_children()
    app.deliver(1.0, MID, Publish(body("0f", seq=None, x=1), ref(100)), 3)
    assert host.sent_of(PublishAck) == [("n100", PublishAck(TOPIC, "0f", 1, ref(200)))]


def test_a_direct_unreliable_publish_is_not_acknowledged_its_origin_knows_the_root() -> None:
    app, host = root_with_children()
    app.on_direct(1.0, "n100", Publish(body("0f", seq=None, x=1), ref(100), reliable=False))
    assert host.sent_of(PublishAck) == []
    assert [ev.body.seq for _, ev in host.sent_of(Event)] == [1]  # numbered and sent down
    app.on_direct(2.0, "n100", Publish(body("1f", seq=None, x=1), ref(100), reliable=True))
    app.deliver(3.0, MID, Publish(body("2f", seq=None, x=1), ref(100), reliable=False), 3)
    assert host.sent_of(PublishAck) == [("n100", PublishAck(TOPIC, "1f", 2, ref(200))),
                                        ("n100", PublishAck(TOPIC, "2f", 3, ref(200)))]


def test_a_cached_root_that_lost_the_key_routes_the_event_on() -> None:
    app, host = make(200)
    msg = Publish(body("0f", seq=None), ref(100))
    app.on_direct(1.0, "n100", msg)
    assert host.routed == [(MID, msg)]


def member_below(node_id: int = 101):
    """Node 101 at depth 2 (root 300, parent 200), subscribed to x > 5, with child 50
    wanting y = 1."""
    app, host = make(node_id)
    app.subscribe(0.0, TOPIC, "x > 5", 7)
    attach(app, host, parent=200, path=(300, 200))
    app.forward(0.1, MID, join(50, "y = 1"), ref(200))
    host.clear()
    return app, host


def test_a_member_delivers_at_its_depth_and_forwards_one_hop_further() -> None:
    app, host = member_below()
    app.on_direct(1.0, "n200", Event(body("aa", x=9, y=1), 2, ref(200), True, ()))
    assert host.traces[0] == ("recv", {"topic": TOPIC, "msg_id": "aa", "from": "00c8",
                                       "hop": 2, "dup": False})
    assert host.delivered[0][1].hop == 2
    [(dest, ev)] = host.sent
    assert dest == "n50" and ev.hop == 3
    host.clear()
    # A second copy (e.g. after a tree change) is counted as such and goes no further.
    app.on_direct(1.5, "n200", Event(body("aa", x=9, y=1), 2, ref(200), True, ()))
    assert host.traces == [("recv", {"topic": TOPIC, "msg_id": "aa", "from": "00c8",
                                     "hop": 2, "dup": True})]
    assert host.delivered == [] and host.sent == []


def test_an_event_from_a_node_that_is_not_the_parent_prunes_that_stale_edge() -> None:
    app, host = member_below()
    app.on_direct(1.0, "n999", Event(body("aa", x=9), 2, ref(999), True, ()))
    assert ("n999", Leave(TOPIC, ref(101))) in host.sent
    assert len(host.delivered) == 1  # the event itself is still good


def test_an_event_for_a_tree_this_node_left_is_dropped() -> None:
    app, host = make(101)
    app.on_direct(1.0, "n200", Event(body("aa"), 2, ref(200), True, ()))
    assert host.sent == [("n200", Leave(TOPIC, ref(101)))]
    assert host.traces[-1] == ("drop", {"topic": TOPIC, "msg_id": "aa", "reason": "no_route"})


def test_the_same_client_chosen_msg_id_on_two_topics_is_two_events() -> None:
    app, host = make(101)
    app.subscribe(0.0, TOPIC, "", 1)
    app.subscribe(0.0, "u", "", 2)
    app.on_direct(0.1, "n200", JoinAck(TOPIC, ref(200), (200,)))
    app.on_direct(0.1, "n200", JoinAck("u", ref(200), (200,)))
    other = EventBody("u", "ab", 1, {}, b"", "0001", 1.0)
    app.on_direct(1.0, "n200", Event(body("ab"), 1, ref(200), True, ()))
    app.on_direct(1.0, "n200", Event(other, 1, ref(200), True, ()))
    assert [sub for sub, _ in host.delivered] == [1, 2]


def test_event_memory_forgets_by_age_and_past_its_size_bound() -> None:
    memory = EventMemory(keep=10.0, max_events=3)
    bodies = [EventBody(TOPIC, f"{i:02x}", i + 1, {}, b"", "0001", 0.0) for i in range(5)]
    for i, made in enumerate(bodies[:3]):
        memory.remember(float(i), HandledEvent(made, 1))
    assert [memory.get(TOPIC, b.msg_id) is not None for b in bodies] == [True] * 3 + [False] * 2
    memory.remember(3.0, HandledEvent(bodies[3], 1))  # a fourth: the oldest goes
    assert memory.get(TOPIC, "00") is None and memory.get(TOPIC, "03") is not None
    assert len(memory) == 3
    memory.forget_old(12.0)  # remembered at 1.0 and 2.0: 10 s old or more, forgotten
    assert [memory.get(TOPIC, b.msg_id) is not None for b in bodies[1:4]] == [False, False, True]


def test_plain_subscriptions_that_all_match_everything_are_found_without_matching() -> None:
    def sub(sub_id: int, text: str) -> Subscription:
        return Subscription(sub_id, TOPIC, text, parse(text), None, None)

    subs = TopicSubscriptions()
    assert list(subs.matching_plain({"x": 1})) == []
    everyone = [sub(3, ""), sub(1, "TRUE")]
    for s in everyone:
        subs.add(s)
    assert [s.sub_id for s in subs.matching_plain({"x": 1})] == [1, 3]  # handle order
    picky = sub(2, "x > 5")
    subs.add(picky)
    assert [s.sub_id for s in subs.matching_plain({"x": 1})] == [1, 3]
    assert [s.sub_id for s in subs.matching_plain({"x": 9})] == [1, 2, 3]
    subs.remove(picky)
    subs.add(sub(4, ""))
    assert [s.sub_id for s in subs.matching_plain({"x": 9})] == [1, 3, 4]
    subs.remove(everyone[0])
    assert [s.sub_id for s in subs.matching_plain({})] == [1, 4]


def test_events_matched_ahead_are_answered_as_one_by_one_until_a_change(calls) -> None:
    def sub(sub_id: int, text: str) -> Subscription:
        return Subscription(sub_id, TOPIC, text, parse(text), None, None)

    subs = TopicSubscriptions()
    for sub_id, text in enumerate(["x > 5", "x < 3 OR y = 'a'", "y = 'a'", "x = 4"]):
        subs.add(sub(sub_id, text))
    events = [{"x": 9}, {"x": 1, "y": "a"}, {"x": 4}, {"y": "b"}]
    alone = [[s.sub_id for s in subs.matching_plain(e)] for e in events]
    assert alone == [[0], [1, 2], [3], []]
    alone_calls = calls(Index, "match")
    with subs.ahead(events):
        assert [[s.sub_id for s in subs.matching_plain(e)] for e in events] == alone
        assert alone_calls == []  # answered from the batch
        assert [s.sub_id for s in subs.matching_plain({"x": 9})] == [0]  # not ahead
        subs.add(sub(7, "x > 0"))  # matches found ahead are no longer used
        assert [[s.sub_id for s in subs.matching_plain(e)] for e in events] == [
            [0, 7], [1, 2, 7], [3, 7], []]
    assert [[s.sub_id for s in subs.matching_plain(e)] for e in events] == [
        [0, 7], [1, 2, 7], [3, 7], []]
