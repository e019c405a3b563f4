"""A core step's deliveries to one subscription come in one ``Deliver`` effect, in
order, at the place of the first (overlay.core.effects.Deliver): a burst's run costs the
driver and the API one hand-over per subscription."""

from __future__ import annotations

import random

from chord.config import ChordConfig
from chord.node import ChordNode
from overlay.core.effects import Deliver, Trace
from overlay.core.protocol import CoreBase
from overlay.core.pubsub import DeliveredEvent, NewEvent
from scribe import ScribeApp, ScribeConfig


def delivered(msg_id: str) -> DeliveredEvent:
    return DeliveredEvent("t", msg_id, None, {}, b"", "ab", 0.0, 0)


def test_a_steps_deliveries_to_one_subscription_are_one_effect_at_the_first_place() -> None:
    core = CoreBase("a:1")
    e1, e2, e3, e4 = (delivered(m) for m in ("01", "02", "03", "04"))
    core.deliver(1, e1)
    core.trace("x")
    core.deliver(2, e2)
    core.deliver(1, e3)
    assert core.drain_effects() == [Deliver(1, [e1, e3]), Trace("x", {}), Deliver(2, [e2])]
    core.deliver(1, e4)  # the next step: an effect of its own
    assert core.drain_effects() == [Deliver(1, [e4])]


def test_a_burst_at_the_root_reaches_each_subscription_in_one_effect() -> None:
    node = ChordNode("127.0.0.1:7000", random.Random(1), ChordConfig())
    app = ScribeApp(node, ScribeConfig())
    node.app = app
    node.create(0.0)
    app.subscribe(0.0, "t", "x > 1", 1)
    app.subscribe(0.0, "t", "", 2)
    node.drain_effects()
    burst = [NewEvent("t", {"x": x}, b"p", f"{x:02x}", 0.5, False) for x in (1, 2, 3)]
    assert app.publish_many(1.0, burst) == ["01", "02", "03"]
    effects = node.drain_effects()
    deliveries = [(e.sub, [(ev.msg_id, ev.seq) for ev in e.events])
                  for e in effects if isinstance(e, Deliver)]
    # Subscription 2 takes the first event, so its effect comes first.
    assert deliveries == [(2, [("01", 1), ("02", 2), ("03", 3)]),
                          (1, [("02", 2), ("03", 3)])]
    # Each delivery still has its one trace record.
    records = [(e.fields["sub"], e.fields["msg_id"]) for e in effects
               if isinstance(e, Trace) and e.ev == "deliver"]
    assert sorted(records) == [(1, "02"), (1, "03"), (2, "01"), (2, "02"), (2, "03")]
