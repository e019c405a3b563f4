"""A member that attaches to a durable consumer while its root still gathers (the
consumer's copies and the log may be on their way after a takeover) waits; if it leaves,
or its lease runs out, before the gathering ends, the consumer never had it attached.
Exact: inputs in, effects out. (Found when a fix under trial lengthened takeovers'
gathering in the simulator: ``ConsumerError`` escaped the root's tick.)"""

from __future__ import annotations

from scribe.consumer_messages import ConsumerAttach, ConsumerDetach
from scribe.consumer_root import LEASE_INTERVALS
from scribe.consumer_values import ConsumerConfig
from tests.scribe.helpers import MID, TOPIC, make, ref
from tests.scribe.test_partition_merge import CONFIG

SETTINGS = tuple(ConsumerConfig(ack=True).to_wire())


def gathering_root() -> tuple[object, object]:
    """Node 150 owns the key; its key range changed a moment ago (a takeover), so a new
    consumer gathers before it serves."""
    app, _ = make(150, root=True, config=CONFIG)
    app.state.pred_changed_at = 1.0
    app.deliver(2.0, MID, ConsumerAttach(TOPIC, "workers", ref(3), 7, SETTINGS, ""), 1)
    (hosted,) = app.consumers.hosted.values()
    assert hosted.waiting and hosted.gathering_until > 2.0
    return app, hosted


def test_a_member_that_leaves_while_it_waits_is_forgotten() -> None:
    app, hosted = gathering_root()
    app.on_direct(2.1, "n3", ConsumerDetach(TOPIC, "workers", ref(3), 7))
    assert not hosted.waiting and not hosted.leases
    app.on_timer(hosted.gathering_until + 0.1)  # the consumer resumes with no member
    assert app.consumers.hosted[(TOPIC, "workers")].consumer.progress().ack_floor == 0


def test_a_member_whose_lease_runs_out_while_it_waits_is_forgotten() -> None:
    app, hosted = gathering_root()
    lease_end = 2.0 + LEASE_INTERVALS * CONFIG.heartbeat_interval
    hosted.gathering_until = lease_end + 1.0  # a recovery that runs past the lease
    app.on_timer(lease_end + 0.01)
    assert not hosted.waiting and not hosted.leases
