"""The trace checker applies TRACES.md's definitions to hand-written traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from overlay.sim.scenarios.trace_check import TraceCheck


def write(trace_dir: Path, node: str, *records: tuple[float, str, dict[str, Any]]) -> None:
    with open(trace_dir / f"{node}.jsonl", "a") as fh:
        for ts, ev, fields in records:
            fh.write(json.dumps({"ts": ts, "node": node, "ev": ev, **fields}) + "\n")


def sub(sub_id: int, text: str, group: str | None = None) -> dict[str, Any]:
    return {"topic": "t", "sub": sub_id, "filter": text, "expiry": None, "group": group}


def deliver(sub_id: int, msg_id: str = "m1", dup: bool = False) -> dict[str, Any]:
    return {"topic": "t", "msg_id": msg_id, "sub": sub_id, "hop": 1, "seq": 1, "dup": dup}


def make_traces(trace_dir: Path) -> None:
    write(trace_dir, "aa",
          (0.0, "subscribe", sub(1, "")),
          (0.0, "subscribe", sub(2, "x > 5")),
          (0.0, "subscribe", sub(3, "", "g")),
          (0.0, "subscribe", sub(4, "")),
          (0.5, "unsubscribe", {"topic": "t", "sub": 4, "reason": "client"}),
          (0.1, "tree", {"topic": "t", "parent": "cc", "role": "member"}),
          (1.1, "deliver", deliver(1)),
          (1.2, "deliver", deliver(1)),
          (1.2, "deliver", deliver(2)),
          (1.3, "deliver", deliver(3)))
    write(trace_dir, "bb",
          (0.0, "subscribe", sub(1, "", "g")),
          (0.1, "tree", {"topic": "t", "parent": "aa", "role": "member"}),
          (1.4, "deliver", deliver(1)),
          # Subscribed after m1 was published, and given it by a replay: not false.
          (1.5, "subscribe", sub(5, "")),
          (1.6, "deliver", {**deliver(5), "replay": True}),
          (1.7, "unsubscribe", {"topic": "t", "sub": 5, "reason": "client"}),
          (2.0, "tree_leave", {"topic": "t"}))
    write(trace_dir, "cc",
          (0.1, "tree", {"topic": "t", "parent": None, "role": "root"}),
          (1.0, "publish", {"topic": "t", "msg_id": "m1", "attrs": {"x": 1}, "size": 0}),
          (1.0, "forward", {"topic": "t", "msg_id": "m1", "to": "aa", "hop": 1}),
          (3.0, "publish", {"topic": "t", "msg_id": "m2", "attrs": {"x": 9}, "size": 0}))
    write(trace_dir, "dd", (0.1, "tree", {"topic": "t", "parent": "ee", "role": "member"}))


def test_delivery_figures_follow_the_definitions(tmp_path: Path) -> None:
    make_traces(tmp_path)
    check = TraceCheck(tmp_path)
    first = check.delivery(before=2.0)
    assert first == {"events": 1, "expected": 1, "delivered": 1, "group_services": 1,
                     "groups_served": 1, "delivery_ratio": 1.0, "false_deliveries": 1,
                     "duplicates": 1, "group_extra": 1, "replayed": 1}
    # m2 matches sub 1 and sub 2 of aa and the group; nothing was delivered.
    second = check.delivery(after=2.0)
    assert (second["expected"], second["group_services"], second["delivery_ratio"]) == (
        2, 1, 0.0)
    assert check.cost(before=2.0) == {"forwards": 1, "deliveries": 5,
                                      "forwards_per_delivery": 0.2}


def test_trees_take_each_nodes_latest_record_and_count_detached_members(tmp_path: Path) -> None:
    make_traces(tmp_path)
    check = TraceCheck(tmp_path)
    before_leave = check.trees(at=1.5)
    assert (before_leave["tree_nodes"], before_leave["detached"],
            before_leave["tree_depth_max"]) == (4, 1, 2)
    after = check.trees()
    assert (after["tree_nodes"], after["detached"], after["tree_depth_mean"],
            after["roots_per_topic_max"]) == (3, 1, 0.5, 1)


def test_live_only_ends_subscriptions_at_node_down(tmp_path: Path) -> None:
    make_traces(tmp_path)
    write(tmp_path, "aa", (2.5, "node_down", {"reason": "crash"}))
    assert TraceCheck(tmp_path).delivery(after=2.0)["expected"] == 2
    live = TraceCheck(tmp_path, live_only=True).delivery(after=2.0)
    assert (live["expected"], live["group_services"]) == (0, 1)  # bb's member remains


def test_reliability_expects_events_published_once_a_subscription_is_in_effect(
        tmp_path: Path) -> None:
    write(tmp_path, "aa",
          (0.0, "subscribe", sub(1, "")),
          (1.5, "subscribed", {"topic": "t", "sub": 1}),
          (0.0, "subscribe", sub(2, "")),  # never in effect: expects nothing
          (2.5, "deliver", {**deliver(1, "m2"), "seq": 2}))
    write(tmp_path, "cc",
          (1.0, "publish", {"topic": "t", "msg_id": "m1", "attrs": {}, "size": 0}),
          (1.1, "publish_ack", {"topic": "t", "msg_id": "m1", "seq": 1}),
          (2.0, "publish", {"topic": "t", "msg_id": "m2", "attrs": {}, "size": 0}),
          (2.1, "publish_ack", {"topic": "t", "msg_id": "m2", "seq": 2}),
          (3.0, "publish", {"topic": "t", "msg_id": "m3", "attrs": {}, "size": 0}),
          (3.1, "publish_ack", {"topic": "t", "msg_id": "m3", "seq": 3}))
    assert TraceCheck(tmp_path).reliability() == {
        "published": 3, "acknowledged": 3, "expected": 2, "lost": 1, "duplicated": 0,
        "out_of_order": 0, "never_in_effect": 1}
