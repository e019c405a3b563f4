"""Replay, exact effects: the root answers with what it retains that matches; the
subscription gets those first, then the live events held meanwhile, none twice."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scribe import ScribeApp, ScribeConfig
from scribe.messages import Fill, JoinAck, ReplayFill, ReplayRequest
from tests.scribe.fakekbr import RecordingHost
from tests.scribe.helpers import MID, TOPIC, make, ref
from tests.scribe.test_ordering import delivered_seqs, ev

CONFIG = ScribeConfig(replicas=0, heartbeat_interval=1.0, parent_timeout=3.5)


def test_the_root_answers_with_the_last_n_matching_or_those_since_a_seq() -> None:
    app, host = make(200, root=True, config=CONFIG)
    for i, x in enumerate((9, 1, 7, 8, 2)):
        app.publish(1.0 + i, TOPIC, {"x": x}, msg_id=f"{i:02x}")
    host.clear()
    app.deliver(6.0, MID, ReplayRequest(TOPIC, ref(101), 4, "x > 5", 2, None), 3)
    app.deliver(6.0, MID, ReplayRequest(TOPIC, ref(101), 5, "x > 5", None, 2), 3)
    [(_, last), (_, since)] = host.sent_of(ReplayFill)
    assert (last.sub, [b.seq for b in last.events], last.through) == (4, [3, 4], 5)
    assert (since.sub, [b.seq for b in since.events]) == (5, [3, 4])


def test_a_replaying_subscription_gets_the_replay_first_then_held_live_events() -> None:
    app, host = make(101, config=CONFIG)
    app.subscribe(0.0, TOPIC, "x > 5", 7, replay_last=3)
    app.on_direct(0.1, "n200", JoinAck(TOPIC, ref(200), (300, 200), 5))
    app.on_direct(0.2, "n300", Fill(TOPIC, ref(300), 5, 5, (), routed=True))
    app.on_direct(0.2, "n200", Fill(TOPIC, ref(200), 5, 5, ()))
    # Not asked before the subscription is in effect: the root's answer could end before
    # the first live event that reaches it, and what lies between would be lost.
    assert not [m for _, m in host.routed if isinstance(m, ReplayRequest)]
    # A live event whose sender says the path to the root holds this node's digest.
    app.on_direct(0.3, "n200", replace(ev(6, prev=5), settled=True, digest_version=99))
    [(key, request)] = [(k, m) for k, m in host.routed if isinstance(m, ReplayRequest)]
    assert key == MID and (request.sub, request.last, request.filter) == (7, 3, "x > 5")
    assert delivered_seqs(host) == []  # held while the replay is awaited
    old = tuple(ev(seq, None).body for seq in (2, 4, 6))
    app.on_direct(0.4, "n300", ReplayFill(TOPIC, 7, ref(300), 6, old))
    assert delivered_seqs(host) == [2, 4, 6]  # 6 came both ways: once
    app.on_direct(0.5, "n200", ev(7, prev=6))
    assert delivered_seqs(host) == [2, 4, 6, 7]
    # The records say which deliveries the replay brought (they may predate the
    # subscription: no false deliveries).
    records = [(f["seq"], f.get("replay", False)) for kind, f in host.traces
               if kind == "deliver"]
    assert records == [(2, True), (4, True), (6, True), (7, False)]


def replaying_member() -> tuple[ScribeApp, RecordingHost]:
    """Node 101 subscribed with a replay, joined under 200 at position 5, caught up."""
    app, host = make(101, config=ScribeConfig(heartbeat_interval=1.0, parent_timeout=3.5,
                                              publish_give_up=6.0))
    app.subscribe(0.0, TOPIC, "", 7, replay_since=1)
    app.on_direct(0.1, "n200", JoinAck(TOPIC, ref(200), (300, 200), 5))
    app.on_direct(0.2, "n300", Fill(TOPIC, ref(300), 5, 5, (), routed=True))
    app.on_direct(0.2, "n200", Fill(TOPIC, ref(200), 5, 5, ()))
    return app, host


def test_an_unanswered_replay_is_asked_again_then_given_up() -> None:
    app, host = replaying_member()
    app.on_direct(0.3, "n200", replace(ev(6, prev=5), settled=True, digest_version=99))
    for now in range(1, 7):
        app.on_timer(float(now))
    asked = [m for _, m in host.routed if isinstance(m, ReplayRequest)]
    assert len(asked) >= 3
    assert delivered_seqs(host) == [6]  # given up: the live events flow on


def test_replay_is_refused_for_a_group_or_with_both_forms() -> None:
    app, _ = make(101, config=CONFIG)
    with pytest.raises(ValueError):
        app.subscribe(0.0, TOPIC, "", 1, group="g", replay_last=2)
    with pytest.raises(ValueError):
        app.subscribe(0.0, TOPIC, "", 2, replay_last=2, replay_since=3)
    with pytest.raises(ValueError):
        ReplayRequest(TOPIC, ref(1), 1, "", None, None)


def test_a_subscription_never_in_effect_gets_its_live_events_after_the_give_up() -> None:
    app, host = replaying_member()
    app.on_direct(0.3, "n200", ev(6, prev=5))  # the path never says it is settled
    for now in range(1, 6):
        app.on_timer(float(now))
    assert delivered_seqs(host) == []
    app.on_timer(6.0)
    assert delivered_seqs(host) == [6]
    assert not [m for _, m in host.routed if isinstance(m, ReplayRequest)]
