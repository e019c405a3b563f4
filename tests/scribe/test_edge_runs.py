"""Runs of plain copies down a tree edge (``scribe.events``), exact effects: a node
passes a run it got on to its children as runs, each copy handled as a single one would
be (in order, gaps pulled); a run is cut by bytes; a copy that is not plain, or does not
chain, leaves in its place on the edge."""

from __future__ import annotations

from overlay.core.limits import SizeLimits
from overlay.core.pubsub import NewEvent
from scribe import ScribeConfig
from scribe.messages import Event, Events, Pull
from scribe.wire_records import EventBody
from tests.scribe.helpers import MID, TOPIC, join, ref
from tests.scribe.test_ordering import ev, member
from tests.scribe.test_publish_burst import messages_down, root, sent_down


def run(first: int, last: int, prev: int | None) -> Events:
    """Copies ``first``..``last`` from node 200 as one run."""
    return Events(TOPIC, tuple(ev(seq, None).body for seq in range(first, last + 1)), 2,
                  ref(200), prev)


def test_a_run_is_handled_copy_by_copy_and_passed_on_down_each_edge_as_a_run() -> None:
    app, host = member(through=3)
    app.forward(0.5, MID, join(50, ""), ref(200))  # node 50 joins through it: its child
    host.clear()
    app.on_direct(1.0, "n200", run(4, 6, prev=3))
    assert [e.seq for _, e in host.delivered] == [4, 5, 6]
    assert [f["hop"] for k, f in host.traces if k == "deliver"] == [2, 2, 2]
    assert sent_down(host) == [("n50", "04", 4, 3), ("n50", "05", 5, 4), ("n50", "06", 6, 5)]
    assert messages_down(host) == [("n50", 3)]
    assert [k for k, _ in host.traces].count("recv") == 3
    assert [k for k, _ in host.traces].count("forward") == 3


def test_a_run_after_a_lost_copy_is_held_and_the_gap_pulled() -> None:
    app, host = member(through=3)
    app.on_direct(1.0, "n200", run(5, 6, prev=4))  # 4 was sent, and lost
    assert host.delivered == []
    assert host.sent_of(Pull) == [("n200", Pull(TOPIC, ref(101), 3))]


def test_a_run_down_an_edge_is_cut_by_bytes_at_its_edge_and_one_past() -> None:
    sizes = SizeLimits(1 << 16)
    empty = EventBody(TOPIC, "00", 1, {"x": 1}, b"", "0001", 0.5).cost()
    at_edge = sizes.batch_bytes // 2 - empty  # two such events fill a message exactly

    def burst(payload_bytes: int) -> list[tuple[str, int]]:
        app, host = root(ScribeConfig(sizes=sizes))
        app.publish_many(1.0, [NewEvent(TOPIC, {"x": 1}, bytes(payload_bytes), f"{i:02x}",
                                        0.5, False) for i in range(1, 4)])
        return messages_down(host)

    assert burst(at_edge) == [("n101", 2), ("n101", 1)]
    assert burst(at_edge + 1) == [("n101", 1), ("n101", 1), ("n101", 1)]


def test_a_copy_that_serves_a_group_leaves_after_the_run_held_for_its_edge() -> None:
    app, host = member(through=3)
    app.forward(0.5, MID, join(50, ""), ref(200))
    host.clear()
    with app.dissemination.edge_runs():
        runs = app.dissemination.runs
        assert runs is not None
        runs.send(ref(50), ev(4, prev=3))
        runs.send(ref(50), ev(5, prev=4))
        runs.send(ref(50), Event(ev(6, None).body, 2, ref(200), False, ("g",)))
        runs.send(ref(50), ev(7, prev=5))  # chains on 5, and waits for the end
    assert [(type(m).__name__, getattr(m, "bodies", None) and len(m.bodies))
            for _, m in host.sent] == [("Events", 2), ("Event", None), ("Event", None)]
