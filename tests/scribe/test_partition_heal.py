"""A partition heals: the root that kept a topic's key on its side is handed the events
the other side's root numbered meanwhile, and must send them down like its own."""

from __future__ import annotations

from scribe import ScribeConfig
from scribe.messages import RootHandover
from tests.scribe.helpers import MID, TOPIC, body, join, make, ref

CONFIG = ScribeConfig(heartbeat_interval=1.0, parent_timeout=3.5, missed_heartbeats=2)


def test_a_root_handed_events_it_did_not_number_sends_them_down_in_order() -> None:
    app, host = make(150, root=True, config=CONFIG)
    app.subscribe(0.0, TOPIC, "", 1)
    app.deliver(0.0, MID, join(101, ""), 1)
    app.publish(0.5, TOPIC, {}, msg_id="aa")
    assert [e.msg_id for _, e in host.delivered] == ["aa"]
    host.clear()
    # Cut off from 150, node 200 owned the key on its side and numbered two more.
    events = (body("aa", 1), body("bb", 2), body("cc", 3))
    app.deliver(9.0, MID, RootHandover(TOPIC, 3, ref(200), None, 0, events), 2)
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("bb", 2), ("cc", 3)]
    assert [(dest, ev.body.seq) for dest, ev in host.sent_copies()] == [("n101", 2),
                                                                         ("n101", 3)]
    # And numbers on after them.
    host.clear()
    app.publish(9.5, TOPIC, {}, msg_id="dd")
    assert [(e.msg_id, e.seq) for _, e in host.delivered] == [("dd", 4)]
