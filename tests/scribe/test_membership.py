"""Joining, adopting, leaving, digests and the children bound: exact effects on one node."""

from __future__ import annotations

import pytest

from matching import FilterSyntaxError, Summary
from overlay.core.pubsub import DuplicateSubscriptionError, UnknownSubscriptionError
from scribe import ScribeConfig
from scribe.messages import DigestUpdate, Event, Join, JoinAck, Leave
from scribe.summaries import Digest
from tests.scribe.helpers import MID, TOPIC, attach, digest, join, make, ref


def test_subscribe_routes_a_join_toward_the_topic_key_in_its_own_name() -> None:
    app, host = make(100)
    app.subscribe(0.0, TOPIC, "price > 5", 1)
    [(key, msg)] = host.routed
    assert key == MID and isinstance(msg, Join)
    assert msg.joiner == ref(100) and msg.redirects == 0
    assert Summary.from_wire(msg.digest.plain).filters == {"price > 5"}
    assert host.traces == [("subscribe", {"topic": TOPIC, "sub": 1, "filter": "price > 5",
                                          "expiry": None, "group": None})]


def test_subscribe_at_the_responsible_node_makes_it_the_root() -> None:
    app, host = make(100, root=True)
    app.subscribe(0.0, TOPIC, "", 1)
    assert host.routed == [] and host.sent == []
    assert host.traces[-2:] == [("tree", {"topic": TOPIC, "parent": None, "role": "root"}),
                                ("subscribed", {"topic": TOPIC, "sub": 1})]


def test_a_second_subscription_on_the_topic_sends_no_second_join() -> None:
    app, host = make(100)
    app.subscribe(0.0, TOPIC, "a = 1", 1)
    app.subscribe(0.1, TOPIC, "b = 1", 2)
    assert len(host.routed) == 1


def test_bad_subscriptions_are_refused_with_typed_errors() -> None:
    app, _ = make(100)
    with pytest.raises(FilterSyntaxError):
        app.subscribe(0.0, TOPIC, "price >", 1)
    app.subscribe(0.0, TOPIC, "", 1)
    with pytest.raises(DuplicateSubscriptionError):
        app.subscribe(0.0, TOPIC, "", 1)
    with pytest.raises(UnknownSubscriptionError):
        app.unsubscribe(0.0, 9)
    with pytest.raises(ValueError):
        app.subscribe(0.0, TOPIC, "", 2, expiry=-1)
    with pytest.raises(ValueError):
        app.subscribe(0.0, "", "", 3)


def test_a_join_passing_a_node_outside_the_tree_makes_it_a_forwarder() -> None:
    app, host = make(200)
    out = app.forward(1.0, MID, join(100, "x > 1"), ref(300))
    assert isinstance(out, Join) and out.joiner == ref(200)
    assert Summary.from_wire(out.digest.plain).filters == {"x > 1"}
    assert host.sent == [("n100", JoinAck(TOPIC, ref(200), ()))]
    assert host.trace_kinds() == ["child"]
    assert host.traces[0][1] == {"topic": TOPIC, "child": "0064", "op": "add"}


def test_a_join_reaching_a_tree_node_is_adopted_and_stopped() -> None:
    app, host = make(200)
    app.subscribe(0.0, TOPIC, "x > 1", 1)
    attach(app, host, parent=300, path=(300,))
    assert app.forward(1.0, MID, join(100, "y = 2"), ref(300)) is None
    assert host.sent_of(JoinAck) == [("n100", JoinAck(TOPIC, ref(200), (300, 200)))]
    # The subtree now also wants y = 2: the parent hears of it.
    [(dest, update)] = host.sent_of(DigestUpdate)
    assert dest == "n300"
    assert Summary.from_wire(update.digest.plain).filters == {"x > 1", "y = 2"}
    host.clear()
    # The same child joining again changes nothing the parent needs to know.
    assert app.forward(2.0, MID, join(100, "y = 2"), ref(300)) is None
    assert host.sent_of(DigestUpdate) == []


def test_a_covered_filter_does_not_change_the_digest_sent_upward() -> None:
    app, host = make(200)
    app.subscribe(0.0, TOPIC, "", 1)  # the empty filter covers every other
    attach(app, host, parent=300, path=(300,))
    app.forward(1.0, MID, join(100, "y = 2"), ref(300))
    assert host.sent_of(DigestUpdate) == []


def test_a_join_from_an_ancestor_passes_on_instead_of_closing_a_loop() -> None:
    app, host = make(200)
    app.subscribe(0.0, TOPIC, "", 1)
    attach(app, host, parent=300, path=(400, 300))
    msg = join(400)
    assert app.forward(1.0, MID, msg, ref(500)) is msg
    assert host.sent == [] and host.traces == []


def test_the_join_ack_sets_the_parent_and_writes_the_tree_record() -> None:
    app, host = make(200)
    app.subscribe(0.0, TOPIC, "", 1)
    host.clear()
    app.on_direct(0.5, "n300", JoinAck(TOPIC, ref(300), (300,)))
    assert host.traces == [("tree", {"topic": TOPIC, "parent": "012c", "role": "member"})]
    assert app.status() == {TOPIC: {"role": "member", "parent": "012c", "depth": 1,
                                    "children": 0}}


def test_an_ack_whose_path_holds_this_node_is_refused() -> None:
    app, host = make(200)
    app.subscribe(0.0, TOPIC, "", 1)
    host.clear()
    app.on_direct(0.5, "n300", JoinAck(TOPIC, ref(300), (400, 200, 300)))
    assert host.sent == [("n300", Leave(TOPIC, ref(200)))]
    assert host.traces == []


def test_a_second_adopter_is_released() -> None:
    app, host = make(200)
    app.subscribe(0.0, TOPIC, "", 1)
    attach(app, host, parent=300, path=(300,))
    app.on_direct(0.5, "n301", JoinAck(TOPIC, ref(301), (301,)))
    assert host.sent == [("n301", Leave(TOPIC, ref(200)))]
    assert app.status()[TOPIC]["parent"] == "012c"


def test_last_unsubscribe_without_children_leaves_the_tree() -> None:
    app, host = make(200)
    app.subscribe(0.0, TOPIC, "", 1)
    attach(app, host, parent=300, path=(300,))
    app.unsubscribe(1.0, 1)
    assert host.sent == [("n300", Leave(TOPIC, ref(200)))]
    assert host.traces == [
        ("unsubscribe", {"topic": TOPIC, "sub": 1, "reason": "client"}),
        ("tree_leave", {"topic": TOPIC})]
    assert app.status() == {}


def test_a_member_with_children_stays_as_forwarder_after_its_last_unsubscribe() -> None:
    app, host = make(200)
    app.subscribe(0.0, TOPIC, "a = 1", 1)
    attach(app, host, parent=300, path=(300,))
    app.forward(1.0, MID, join(100, "b = 1"), ref(300))
    host.clear()
    app.unsubscribe(2.0, 1)
    assert ("tree", {"topic": TOPIC, "parent": "012c", "role": "forwarder"}) in host.traces
    [(_, update)] = host.sent_of(DigestUpdate)
    assert Summary.from_wire(update.digest.plain).filters == {"b = 1"}
    # The last child leaving prunes the branch.
    host.clear()
    app.on_direct(3.0, "n100", Leave(TOPIC, ref(100)))
    assert host.sent == [("n300", Leave(TOPIC, ref(200)))]
    assert host.trace_kinds() == ["child", "tree_leave"]


def test_a_full_node_pushes_the_join_down_to_a_child() -> None:
    app, host = make(200, root=True, config=ScribeConfig(max_children=2))
    app.subscribe(0.0, TOPIC, "", 1)
    for child in (101, 102):
        app.deliver(0.1, MID, join(child), 1)
    host.clear()
    app.deliver(0.2, MID, join(103), 1)
    [(dest, pushed)] = host.sent
    assert dest in ("n101", "n102")
    assert pushed.joiner == ref(103) and pushed.redirects == 1
    assert host.traces == []
    assert app.status()[TOPIC]["children"] == 2


def test_a_join_pushed_down_too_often_is_adopted_over_the_bound() -> None:
    app, host = make(200, root=True, config=ScribeConfig(max_children=1, max_redirects=2))
    app.subscribe(0.0, TOPIC, "", 1)
    app.deliver(0.1, MID, join(101), 1)
    host.clear()
    app.on_direct(0.2, "n300", join(103, redirects=2))
    assert host.sent_of(JoinAck) == [("n103", JoinAck(TOPIC, ref(200), (200,), 0))]
    assert app.status()[TOPIC]["children"] == 2


def test_a_pushed_join_is_adopted_by_the_child_that_has_room() -> None:
    app, host = make(101, config=ScribeConfig(max_children=2))
    app.subscribe(0.0, TOPIC, "", 1)
    attach(app, host, parent=200, path=(200,))
    app.on_direct(0.2, "n200", join(103, redirects=1))
    assert host.sent_of(JoinAck) == [("n103", JoinAck(TOPIC, ref(101), (200, 101)))]


def test_a_digest_update_from_a_child_travels_up_only_when_the_total_changes() -> None:
    app, host = make(200)
    app.subscribe(0.0, TOPIC, "a = 1", 1)
    attach(app, host, parent=300, path=(300,))
    app.forward(1.0, MID, join(100, "b = 1"), ref(300))
    host.clear()
    app.on_direct(2.0, "n100", DigestUpdate(TOPIC, ref(100), digest("c = 1"), 2))
    [(dest, update)] = host.sent_of(DigestUpdate)
    assert dest == "n300"
    assert Digest.from_wire(update.digest, 64).plain.filters == {"a = 1", "c = 1"}
    host.clear()
    app.on_direct(2.5, "n100", DigestUpdate(TOPIC, ref(100), digest("c = 1"), 3))
    assert host.sent == []


def test_an_older_digest_arriving_late_does_not_replace_a_newer_one() -> None:
    app, host = make(200, root=True)
    app.subscribe(0.0, TOPIC, "", 1)
    app.deliver(0.1, MID, join(100, "b = 1", version=1), 1)
    app.on_direct(0.2, "n100", DigestUpdate(TOPIC, ref(100), digest("c = 1"), 3))
    app.deliver(0.3, MID, join(100, "d = 1", version=2), 1)  # a retried JOIN, routed slowly
    host.clear()
    app.publish(1.0, TOPIC, {"c": 1}, msg_id="aa")
    assert [dest for dest, _ in host.sent_of(Event)] == ["n100"]
