"""Anycast groups: one matching member per group, local first, closest first, hand-back."""

from __future__ import annotations

from scribe.messages import AnycastBack, DigestUpdate, Event
from scribe.summaries import Digest
from tests.scribe.helpers import MID, TOPIC, attach, body, join, make, ref


def test_a_local_member_is_served_first_and_members_take_turns() -> None:
    app, host = make(200, root=True)
    app.subscribe(0.0, TOPIC, "", 1, group="g")
    app.subscribe(0.0, TOPIC, "x > 5", 2, group="g")
    app.deliver(0.1, MID, join(101, groups={"g": ([""], 0)}), 1)
    host.clear()
    for i in range(4):
        app.publish(1.0 + i, TOPIC, {"x": 9}, msg_id=f"0{i}")
    assert [sub for sub, _ in host.delivered] == [1, 2, 1, 2]
    assert host.sent_of(Event) == []  # the group was served here; nothing else wants it
    host.clear()
    app.publish(9.0, TOPIC, {"x": 1}, msg_id="10")
    assert [sub for sub, _ in host.delivered] == [1]  # only member 1 matches x = 1


def test_the_group_goes_to_the_closest_matching_child_only() -> None:
    app, host = make(200, root=True)
    app.subscribe(0.0, TOPIC, "", 1)  # a plain subscriber at the root
    app.deliver(0.1, MID, join(101, groups={"g": (["x > 5"], 2)}), 1)
    app.deliver(0.1, MID, join(102, groups={"g": (["x > 5"], 0)}), 1)
    app.deliver(0.1, MID, join(103, groups={"g": (["x < 0"], 0)}), 1)
    host.clear()
    app.publish(1.0, TOPIC, {"x": 9}, msg_id="aa")
    [(dest, ev)] = host.sent_of(Event)
    assert dest == "n102" and ev.groups == ("g",) and ev.plain is False
    # 102 had nobody after all: the next closest candidate is asked.
    host.clear()
    app.on_direct(1.2, "n102", AnycastBack(TOPIC, "aa", ("g",), ref(102)))
    [(dest, ev)] = host.sent_of(Event)
    assert dest == "n101" and ev.groups == ("g",) and ev.hop == 1
    # Nobody left: at the root the search ends without a receiver.
    host.clear()
    app.on_direct(1.4, "n101", AnycastBack(TOPIC, "aa", ("g",), ref(101)))
    assert host.sent == [] and host.delivered == []


def test_one_copy_per_child_carries_plain_delivery_and_group_duty_together() -> None:
    app, host = make(200, root=True)
    app.deliver(0.1, MID, join(101, "", groups={"g": ([""], 1)}), 1)
    host.clear()
    app.publish(1.0, TOPIC, {}, msg_id="aa")
    [(dest, ev)] = host.sent_of(Event)
    assert (dest, ev.plain, ev.groups) == ("n101", True, ("g",))


def test_a_subtree_without_a_matching_member_hands_the_group_back() -> None:
    app, host = make(101)
    app.subscribe(0.0, TOPIC, "x < 0", 1, group="g")
    attach(app, host, parent=200, path=(200,))
    app.on_direct(1.0, "n200", Event(body("aa", x=9), 1, ref(200), False, ("g",)))
    assert host.sent == [("n200", AnycastBack(TOPIC, "aa", ("g",), ref(101)))]
    assert host.delivered == []


def test_a_child_that_cannot_be_reached_passes_its_group_duty_to_the_next() -> None:
    app, host = make(200, root=True)
    app.deliver(0.1, MID, join(101, groups={"g": ([""], 0)}), 1)
    app.deliver(0.1, MID, join(102, groups={"g": ([""], 1)}), 1)
    host.clear()
    app.publish(1.0, TOPIC, {}, msg_id="aa")
    [(_, first)] = host.sent_of(Event)
    host.clear()
    app.on_unreachable(2.0, "n101", first)
    [(dest, ev)] = host.sent_of(Event)
    assert dest == "n102" and ev.groups == ("g",)
    assert ("child", {"topic": TOPIC, "child": "0065", "op": "remove"}) in host.traces


def test_group_membership_travels_up_with_the_distance_to_the_nearest_member() -> None:
    app, host = make(101)
    app.subscribe(0.0, TOPIC, "a = 1", 1, group="g")
    attach(app, host, parent=200, path=(200,))
    app.forward(0.5, MID, join(50, groups={"g": (["b = 1"], 0), "h": (["c = 1"], 2)}),
                ref(200))
    [(dest, update)] = host.sent_of(DigestUpdate)
    assert dest == "n200"
    digest = Digest.from_wire(update.digest, 64)
    assert digest.groups["g"].distance == 0 and digest.groups["h"].distance == 3
    assert digest.groups["g"].summary.filters == {"a = 1", "b = 1"}
    assert digest.plain.filters == frozenset()
