"""Loading: explicit schema, malformed lines counted by reason, order keys, run filter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_analysis.load import load_traces, parse_lines, read_lines
from spark_analysis.schema import LIVE_RANK

pytestmark = pytest.mark.spark

GOOD = [
    {
        "ts": 1.0,
        "node": "0a",
        "ev": "publish",
        "run": "r1",
        "topic": "t",
        "msg_id": "m1",
        "attrs": {"flag": True, "n": 1, "x": 1.0, "s": "a"},
        "size": 3,
    },
    {
        "ts": 2,
        "node": "0a",
        "ev": "deliver",
        "run": "r1",
        "topic": "t",
        "msg_id": "m1",
        "sub": 1,
        "hop": 2,
        "seq": None,
        "dup": False,
    },
    {
        "ts": 3.5,
        "node": "0b",
        "ev": "lookup",
        "run": "r2",
        "key": "ff",
        "hops": 3,
        "ok": True,
        "ms": 2.5,
    },
]
BAD = {
    "not json": "not a JSON object",
    "[1, 2]": "not a JSON object",
    "7": "not a JSON object",
    '{"ts": 1.0, "node": "0a"': "not a JSON object",
    "": "empty line",
    '{"node": "0a", "ev": "x"}': "missing ts, node or ev",
    '{"ts": 1.0, "ev": "x"}': "missing ts, node or ev",
    '{"ts": "soon", "node": "0a", "ev": "x"}': "field of the wrong type",
    '{"ts": 1.0, "node": "0a", "ev": "deliver", "hop": "two"}': "field of the wrong type",
    '{"ts": 1.0, "node": "0a", "ev": "deliver", "hop": 2.5}': "field of the wrong type",
    '{"ts": 1.0, "node": "0a", "ev": "recv", "dup": 1}': "field of the wrong type",
    '{"ts": 1.0, "node": 5, "ev": "x"}': "node or ev not text",
    '{"ts": 1.0, "node": "0a", "ev": true}': "node or ev not text",
    '{"ts": 1.0, "node": "0a", "ev": "publish", "attrs": "{}"}': "attrs not an object",
    '{"ts": 1.0, "node": "0a", "ev": "publish", "attrs": [1]}': "attrs not an object",
    "{'ts': 1.0, 'node': '0a', 'ev': 'x'}": "not a JSON object",
    '{"ts": NaN, "node": "0a", "ev": "x"}': "not a JSON object",
}


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    d = tmp_path / "traces"
    _write(d / "0a.jsonl", [json.dumps(GOOD[0]), *BAD, json.dumps(GOOD[1])])
    _write(d / "deep" / "0b.jsonl.1", [json.dumps(GOOD[2])])
    _write(d / "notes.txt", ['{"ts": 1, "node": "0c", "ev": "x"}'])  # not a trace file
    return d


def test_each_malformed_line_gets_its_reason(spark: SparkSession, trace_dir: Path) -> None:
    parsed = parse_lines(read_lines(spark, str(trace_dir)))
    got = {r["value"]: r["bad_reason"] for r in parsed.collect()}
    assert set(got) == {*BAD, *(json.dumps(g) for g in GOOD)}
    for line, reason in BAD.items():
        assert got[line] == reason, line
    for good in GOOD:
        assert got[json.dumps(good)] is None


def test_typed_fields_and_attrs_text_keep_json_types(spark: SparkSession, trace_dir: Path) -> None:
    parsed = parse_lines(read_lines(spark, str(trace_dir))).filter(F.col("bad_reason").isNull())
    pub = parsed.filter(F.col("ev") == "publish").first()
    assert pub is not None
    # bool stays bool, 1.0 stays a float: the filter evaluation depends on it
    assert json.loads(pub["attrs"]) == GOOD[0]["attrs"]
    assert [type(v) for v in json.loads(pub["attrs"]).values()] == [bool, int, float, str]
    deliver = parsed.filter(F.col("ev") == "deliver").first()
    assert deliver is not None
    assert (deliver["ts"], deliver["sub"], deliver["hop"], deliver["dup"]) == (2.0, 1, 2, False)


def test_source_order_columns(spark: SparkSession, trace_dir: Path) -> None:
    lines = read_lines(spark, str(trace_dir)).collect()
    by_file: dict[str, list[int]] = {}
    for r in lines:
        by_file.setdefault(r["src_file"], []).append(r["src_row"])
        expected_rank = 1 if r["src_file"].endswith(".jsonl.1") else LIVE_RANK
        assert r["src_rank"] == expected_rank
    live = next(f for f in by_file if f.endswith("0a.jsonl"))
    values = [
        r["value"] for r in sorted(lines, key=lambda r: r["src_row"]) if r["src_file"] == live
    ]
    assert values[0] == json.dumps(GOOD[0]) and values[-1] == json.dumps(GOOD[1])


def test_load_counts_writes_parquet_and_filters_run(
    spark: SparkSession, trace_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    everything = load_traces(spark, str(trace_dir), out)
    assert (everything.lines, everything.bad_lines, everything.record_count) == (
        len(GOOD) + len(BAD),
        len(BAD),
        len(GOOD),
    )
    assert sorted(p.name for p in (out / "records").glob("ev=*")) == [
        "ev=deliver",
        "ev=lookup",
        "ev=publish",
    ]
    assert sum(everything.bad_by_reason.values()) == len(BAD)
    assert {s["reason"] for s in everything.bad_samples} == set(BAD.values())
    one_run = load_traces(spark, str(trace_dir), out, run="r1")
    assert one_run.record_count == 2
    assert one_run.bad_lines == len(BAD)  # malformed lines have no trustworthy run
    assert sorted(r["ev"] for r in one_run.records.collect()) == ["deliver", "publish"]
