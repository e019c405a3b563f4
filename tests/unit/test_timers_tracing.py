from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from overlay.core import Timers
from overlay.core.tracing import NodeTracer, TraceItem, render, render_lines


def test_timers_fire_in_order_and_reschedule_replaces() -> None:
    timers = Timers()
    timers.set("a", 5.0)
    timers.set("b", 3.0)
    timers.set("a", 1.0)  # moved earlier
    timers.set("c", 9.0)
    timers.cancel("c")
    assert timers.next_deadline() == 1.0
    assert timers.pop_due(4.0) == ["a", "b"]
    assert timers.next_deadline() is None
    assert timers.pop_due(100.0) == []


@pytest.mark.parametrize("keep_open", [False, True])
def test_tracer_writes_ordered_fields_and_rotates(tmp_path: Path, keep_open: bool) -> None:
    tracer = NodeTracer(tmp_path, "00ff", run="r7", max_bytes=300, buffer_bytes=1,
                        keep_open=keep_open)
    for i in range(10):
        tracer.write(float(i), "lookup", {"key": "ab", "hops": i, "ok": True, "ms": 1.5})
    tracer.close()
    files = sorted(tmp_path.iterdir())
    assert len(files) > 1
    assert all(f.name.startswith("00ff.jsonl") for f in files)
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert sorted(r["hops"] for r in records) == list(range(10))
    first = (tmp_path / "00ff.jsonl.1").read_text().splitlines()[0]
    assert first.startswith('{"ts":0.0,"node":"00ff","ev":"lookup","run":"r7","key":"ab"')


@pytest.mark.parametrize("keep_open", [False, True])
def test_tracer_buffers_until_flush(tmp_path: Path, keep_open: bool) -> None:
    tracer = NodeTracer(tmp_path, "01", buffer_bytes=1 << 20, keep_open=keep_open)
    tracer.write(1.0, "node_up", {"addr": "h:1", "mode": "structured", "version": 1})
    assert not (tmp_path / "01.jsonl").exists()
    tracer.flush()
    assert json.loads((tmp_path / "01.jsonl").read_text())["ev"] == "node_up"
    tracer.write(2.0, "node_down", {"reason": "stop", "bad": float("nan")})
    tracer.close()
    last = json.loads((tmp_path / "01.jsonl").read_text().splitlines()[-1])
    assert last == {"ts": 2.0, "node": "01", "ev": "node_down", "reason": "stop", "bad": None}


def test_tracer_line_format(tmp_path: Path) -> None:
    """A trace line is one compact JSON object in UTF-8, keys in the record's order
    (ts, node, ev, run, then the fields), bytes as hex, sets sorted, tuples as lists,
    NaN and infinities (nested too) as null; ints beyond 64 bits survive exactly."""
    fields: dict[str, Any] = {
        "topic": "caf\u00e9/\u2603 \"q\" \\ \n", "msg_id": "00ff", "attrs": {"b": 1.5, "a": True},
        "raw": b"\x00\xfe", "kids": {"z", "a"}, "frozen": frozenset({3, 1}), "pair": (1, "x"),
        "big": 1 << 70, "small": 1e-05, "neg": -0.0, "none": None, "nested": [{"k": [1.25e300]}],
        "inf": [float("inf")],
    }
    tracer = NodeTracer(tmp_path, "0a", run="r1", buffer_bytes=1 << 20)
    tracer.write(1732365000.123456, "publish", fields)
    tracer.write_all([(1.5, "deliver", {"topic": "caf\u00e9", "seq": 1, "bad": float("nan")}),
                      (2.5, "deliver", {"seq": 2, "nested": {"x": float("-inf")}})])
    tracer.close()
    data = (tmp_path / "0a.jsonl").read_bytes()
    lines = data.decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 4
    expected = {"ts": 1732365000.123456, "node": "0a", "ev": "publish", "run": "r1", **fields,
                "raw": "00fe", "kids": ["a", "z"], "frozen": [1, 3], "pair": [1, "x"],
                "inf": [None]}
    first = json.loads(lines[0])
    assert first == expected and list(first) == list(expected)
    assert json.dumps(first["neg"]) == "-0.0"
    assert json.loads(lines[1]) == {"ts": 1.5, "node": "0a", "ev": "deliver", "run": "r1",
                                    "topic": "caf\u00e9", "seq": 1, "bad": None}
    assert json.loads(lines[2])["nested"] == {"x": None}
    # Compact: the only spaces are those inside the topic text.
    assert lines[1].count(" ") == 0 and lines[0].count(" ") == fields["topic"].count(" ")
    assert '"topic":"caf\u00e9"' in lines[1]  # UTF-8 text, not a \\u escape


def test_lines_are_the_merged_records_rendered(tmp_path: Path) -> None:
    """Heads shared per (ts, ev), fields rendered alone: byte for byte the line of the
    whole record rendered at once, for empty fields, a shared and a new time stamp, with
    and without a run, and when orjson refuses the fields (an int past 64 bits)."""
    items: list[TraceItem] = [
        (1.5, "publish", {"topic": "t", "attrs": {}, "size": 3}),
        (1.5, "deliver", {"topic": "t", "raw": b"\x01", "kids": {"b", "a"}}),
        (1.5, "publish", {}),
        (float("nan"), "node_down", {"reason": "stop"}),
        (2.0, "deliver", {"seq": 2, "nested": {"x": float("inf")}}),
    ]
    for run in (None, "r1"):
        tagged = {} if run is None else {"run": run}
        whole = [render({"ts": ts, "node": "0a", "ev": ev, **tagged, **fields})
                 for ts, ev, fields in items]
        assert render_lines("0a", run, items) == b"\n".join(whole)
        refused = [*items, (3.0, "publish", {"big": 1 << 70})]
        whole.append(render({"ts": 3.0, "node": "0a", "ev": "publish", **tagged, "big": 1 << 70}))
        assert render_lines("0a", run, refused) == b"\n".join(whole)
    assert json.loads(render_lines("0a", None, items[2:3])) == {
        "ts": 1.5, "node": "0a", "ev": "publish"}
