from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from overlay.core import Timers
from overlay.core.tracing import NodeTracer


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


def test_tracer_writes_ordered_fields_and_rotates(tmp_path: Path) -> None:
    tracer = NodeTracer(tmp_path, "00ff", run="r7", max_bytes=300, buffer_bytes=1)
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


def test_tracer_buffers_until_flush(tmp_path: Path) -> None:
    tracer = NodeTracer(tmp_path, "01", buffer_bytes=1 << 20)
    tracer.write(1.0, "node_up", {"addr": "h:1", "mode": "structured", "version": 1})
    assert not (tmp_path / "01.jsonl").exists()
    tracer.flush()
    assert json.loads((tmp_path / "01.jsonl").read_text())["ev"] == "node_up"
    tracer.write(2.0, "node_down", {"reason": "stop", "bad": float("nan")})
    tracer.close()
    last = json.loads((tmp_path / "01.jsonl").read_text().splitlines()[-1])
    assert last == {"ts": 2.0, "node": "01", "ev": "node_down", "reason": "stop", "bad": None}


def test_tracer_renders_as_json_dumps_did(tmp_path: Path) -> None:
    """The trace line format is fixed: the renderer's bytes are those of
    ``json.dumps(record, separators=(",", ":"))`` (ASCII, repr floats), bytes as hex,
    sets sorted, tuples as lists, key order kept."""
    fields: dict[str, Any] = {
        "topic": "caf\u00e9/\u2603 \"q\" \\ \n", "msg_id": "00ff", "attrs": {"b": 1.5, "a": True},
        "raw": b"\x00\xfe", "kids": {"z", "a"}, "frozen": frozenset({3, 1}), "pair": (1, "x"),
        "big": 1 << 70, "small": 1e-05, "neg": -0.0, "none": None, "nested": [{"k": [1.25e300]}],
    }
    tracer = NodeTracer(tmp_path, "0a", run="r1", buffer_bytes=1 << 20)
    tracer.write(1732365000.123456, "publish", fields)
    tracer.close()
    line = (tmp_path / "0a.jsonl").read_text()
    expected = {"ts": 1732365000.123456, "node": "0a", "ev": "publish", "run": "r1", **fields,
                "raw": "00fe", "kids": ["a", "z"], "frozen": [1, 3], "pair": [1, "x"]}
    assert line == json.dumps(expected, separators=(",", ":")) + "\n"
