"""Loading: explicit schema, malformed lines counted by reason, order keys, run filter.

Most of it runs without Spark: a task's parse (Arrow, with a line-by-line fallback) is a
plain function; Spark's binaryFile source finds the files and hands each one whole.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from spark_analysis import load, parse
from spark_analysis.cost import record_tally
from spark_analysis.lines import parse_line
from spark_analysis.load import BAD_REASONS, LoadResult, load_traces, rank_of
from spark_analysis.location import OutDir
from spark_analysis.schema import LIVE_RANK
from tests.spark.helpers import assert_df_equal

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
TASK_BYTES = "spark.sql.files.maxPartitionBytes"
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
    # version is the integer the nodes write (TRACE_VERSION), not its text
    '{"ts": 1.0, "node": "0a", "ev": "node_up", "version": "1"}': "field of the wrong type",
    '{"ts": 1.0, "node": 5, "ev": "x"}': "node or ev not text",
    '{"ts": 1.0, "node": "0a", "ev": true}': "node or ev not text",
    '{"ts": 1.0, "node": "0a", "ev": "publish", "attrs": "{}"}': "attrs not an object",
    '{"ts": 1.0, "node": "0a", "ev": "publish", "attrs": [1]}': "attrs not an object",
    "{'ts': 1.0, 'node': '0a', 'ev': 'x'}": "not a JSON object",
    '{"ts": NaN, "node": "0a", "ev": "x"}': "not a JSON object",
    # Beyond Spark's reader, decided here: any field of a number, boolean or object
    # type given another JSON type is a wrong type, text fields included (Spark used to
    # keep a number's text); a line with none of ts, node and ev left is not a record.
    '{"ts": 1.0, "node": "0a", "ev": "x", "topic": 5}': "field of the wrong type",
    '{"ts": 1.0, "node": "0a", "ev": "x", "topic": {"a": 1}}': "field of the wrong type",
    '{"topic": 5}': "not a JSON object",
    '{"ts": 1.0, "node": "0a", "ev": "x", "hop": 18446744073709551615}': "field of the wrong type",
    '{"ts": 1e400, "node": "0a", "ev": "x"}': "ts not finite",
    '{"ts": 1.0, "node": "0a", "ev": "x"} {"ts": 2.0}': "not a JSON object",
    '{"ts": 1.0, "node": "0a", "ev": "x", "ms": Infinity}': "not a JSON object",
    # Arrow reads Inf as a number too, with or without a sign, in any double field
    '{"ts": 1.0, "node": "0a", "ev": "x", "ms": Inf}': "not a JSON object",
    '{"ts": 1.0, "node": "0a", "ev": "x", "expiry":-Inf}': "not a JSON object",
    '{"ts": Infinity, "node": "0a", "ev": "recv", "hop": 1}': "not a JSON object",
    '{"ts": -Inf, "node": "0a", "ev": "forward"}': "not a JSON object",
    '{"ts": 1.0, "node": "0a", "ev": "publish", "attrs": {"p": NaN}}': "not a JSON object",
    '{"ts": 1.0, "node": "0a", "ev": "x",}': "not a JSON object",
    "null": "not a JSON object",
    " \t ": "empty line",
    '{"ts": 1.0, "node": {"id": "0a"}, "ev": "x"}': "node or ev not text",
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


def _compact(record: dict[str, object]) -> str:
    return json.dumps(record, separators=(",", ":"))


# Good lines as the tracer writes them (compact), many: the block Arrow parses.
FILLER = [
    _compact({"ts": 10.0 + i, "node": "0f", "ev": "recv", "run": "r1", "hop": i, "dup": False})
    for i in range(200)
]


def _parse(lines: list[str]) -> tuple[list[dict[str, object]], parse.Tally]:
    table, tally = parse.parse_text("".join(line + "\n" for line in lines))
    return table.to_pylist(), tally


@pytest.mark.parametrize("line", list(BAD))
def test_each_malformed_line_gets_its_reason(line: str) -> None:
    assert parse_line(line.encode()) == (BAD[line], None)
    # Among good lines: the block is rejected, halved down to the bad line, and the
    # good lines around it are kept, numbered as the lines of the block.
    records, tally = _parse([*FILLER[:100], line, *FILLER[100:]])
    assert (tally.lines, tally.bad) == (201, {BAD[line]: 1})
    assert tally.samples[BAD[line]] == ("test", 100, line)
    assert [r["hop"] for r in records] == list(range(200))
    assert [r["src_row"] for r in records] == [*range(100), *range(101, 201)]


def test_reasons_are_the_known_ones() -> None:
    assert set(BAD.values()) == set(BAD_REASONS)


def test_invalid_utf8_is_not_json() -> None:
    # Arrow would keep the byte in its string column; the block goes line by line.
    line = b'{"ts":1.0,"node":"0\xffa","ev":"x"}'
    assert parse_line(line) == ("not a JSON object", None)
    tally = parse.Tally()
    got = parse.parse_block(line + b"\n" + "\n".join(FILLER).encode(), 1, "f", tally)
    assert (tally.lines, tally.bad) == (201, {"not a JSON object": 1})
    assert sum(t.num_rows for t in got) == 200


def test_arrow_and_line_by_line_give_the_same_records() -> None:
    lines = [_compact(g) for g in GOOD] + FILLER[:3]
    fast, tally = _parse(lines)
    assert tally.bad == {} and len(fast) == len(lines)
    for line, record in zip(lines, fast, strict=True):
        reason, by_line = parse_line(line.encode())
        assert reason is None and by_line is not None
        assert {k: v for k, v in record.items() if not k.startswith("src_")} == {
            name: by_line.get(name) for name in record if not name.startswith("src_")
        }


def test_hop_lines_parse_on_their_narrow_schema_and_others_on_the_full_one() -> None:
    lines = [_compact(g) for g in GOOD] + FILLER[:3]
    data = "".join(line + "\n" for line in lines).encode()
    parts = parse._by_type(data, len(lines))
    assert parts is not None
    # recv, then deliver lines, then publish and lookup, each with its line numbers
    assert [list(rows) for _, rows in parts] == [[3, 4, 5], [1], [0, 2]]
    assert [r["ev"] for r in parts[0][0].to_pylist()] == ["recv"] * 3
    deliver = parts[1][0].to_pylist()
    assert [r["ev"] for r in deliver] == ["deliver"]
    assert deliver[0]["sub"] == 1 and deliver[0]["attrs"] is None and deliver[0]["key"] is None
    assert all(part.schema == parse.per_line.FIELD_SCHEMA for part, _ in parts)
    assert [r["ev"] for r in parts[2][0].to_pylist()] == ["publish", "lookup"]
    # A bad line among the others: the block is bad as a whole, and is not read again.
    bad = b'{"ts":1.0,"node":"0a","ev":"publish","attrs":3}\n'
    assert parse._by_type(bad + data, len(lines) + 1) == []
    # Without a line break after the last line, that line is still read.
    assert parse._by_type(data[:-1], len(lines)) is not None
    # A hop line with a field its types do not carry: the block is parsed whole, and
    # the field kept (or an unknown one ignored) as there.
    for extra in ('"key":"k"', '"attrs":{"a":1}', '"other":[1]', '"sub":3'):
        odd = FILLER[0][:-1] + "," + extra + "}"
        block = "".join(line + "\n" for line in [odd, *lines]).encode()
        assert parse._by_type(block, len(lines) + 1) is None
        records, tally = _parse([odd, *lines])
        assert tally.bad == {} and [r["src_row"] for r in records] == list(range(len(lines) + 1))
    assert _parse(['{"ts":1.0,"node":"0a","ev":"recv","key":"k"}'])[0][0]["key"] == "k"


@pytest.mark.parametrize(
    "n", [0, 1, parse.SHARED_NULL_ROWS, parse.SHARED_NULL_ROWS + 1, parse.SHARED_NULL_ROWS]
)
def test_null_columns_of_any_length_and_type_survive_the_arrow_stream(n: int) -> None:
    # Slices of one shared array per type, which grows past its length (the edge and
    # one past it, then the edge again from the grown one).
    table = pa.table({f.name: parse.nulls(n, f.type) for f in parse.per_line.FIELD_SCHEMA})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    back = pa.ipc.open_stream(sink.getvalue()).read_all()
    assert back.schema == parse.per_line.FIELD_SCHEMA
    assert back.num_rows == n
    assert all(column.null_count == n for column in back.columns)


def test_constant_names_in_text_are_not_values() -> None:
    # NaN, Inf and Infinity as values are not JSON (BAD above); as text they are fine,
    # and such a block still parses fast, as a whole.
    texts = {"level": "Info", "x": "NaN", "y": "-Infinity", "z": "Inf; NaN"}
    line = _compact({**GOOD[0], "attrs": texts, "reason": "Inf"})
    lines = [line, *FILLER[:3]]
    data = "".join(x + "\n" for x in lines).encode()
    assert parse._fast(data, len(lines), parse._line_breaks(data)) is not None
    records, tally = _parse(lines)
    assert tally.bad == {} and json.loads(records[0]["attrs"]) == texts
    # After a comma in a text, the search takes it for a value: the block goes line by
    # line, which finds the line good.
    odd = {**texts, "z": "a,Inf"}
    lines[0] = _compact({**GOOD[0], "attrs": odd})
    data = "".join(x + "\n" for x in lines).encode()
    assert parse._fast(data, len(lines), parse._line_breaks(data)) is None
    records, tally = _parse(lines)
    assert tally.bad == {} and json.loads(records[0]["attrs"]) == odd and len(records) == 4


def test_attrs_text_keeps_json_types() -> None:
    records, _ = _parse([_compact(GOOD[0]), *FILLER[:3]])
    # bool stays bool, 1.0 stays a float: the filter evaluation depends on it
    assert records[0]["attrs"] == '{"flag":true,"n":1,"x":1.0,"s":"a"}'
    assert [r["attrs"] for r in records[1:]] == [None] * 3
    # an integer beyond 64 bits stays an integer; attrs on another record is kept
    other = '{"ts":1.0,"node":"0a","ev":"deliver","attrs":{"big":123456789012345678901}}'
    records, _ = _parse([*FILLER[:3], other])
    assert records[3]["attrs"] == '{"big":123456789012345678901}'


def test_rotation_rank_from_the_file_name() -> None:
    assert (rank_of("x.jsonl.2"), rank_of("x.jsonl"), rank_of("x.jsonl.99999999999")) == (
        2,
        LIVE_RANK,
        None,
    )
    assert rank_of("ftp://h/t/x.jsonl.7.gz") == 7 and rank_of("hdfs://nn/a.jsonl.3/x.jsonl") == (
        LIVE_RANK
    )


def _load(spark: SparkSession, traces: str, out: Path, run: str | None = None) -> LoadResult:
    return load_traces(spark, traces, OutDir(spark, out), run)


def test_loaded_records_keep_types_and_file_order(
    spark: SparkSession, trace_dir: Path, tmp_path: Path
) -> None:
    loaded = _load(spark, str(trace_dir), tmp_path / "out")
    rows = loaded.records.collect()
    pub = next(r for r in rows if r["ev"] == "publish")
    assert json.loads(pub["attrs"]) == GOOD[0]["attrs"]
    deliver = next(r for r in rows if r["ev"] == "deliver")
    assert (deliver["ts"], deliver["sub"], deliver["hop"], deliver["dup"]) == (2.0, 1, 2, False)
    lookup = next(r for r in rows if r["ev"] == "lookup")
    assert lookup["src_rank"] == 1  # deep/0b.jsonl.1: rotated, found recursively
    assert (pub["src_rank"], deliver["src_rank"]) == (LIVE_RANK, LIVE_RANK)
    # in 0a.jsonl the publish is the first line, the deliver the last
    assert (pub["src_row"], deliver["src_row"]) == (0, len(BAD) + 1)
    samples = {s["reason"]: s for s in loaded.bad_samples}
    # named under the trace path, the first of its reason in the file
    assert samples["empty line"] == {"file": "0a.jsonl", "line": "", "reason": "empty line"}
    first_wrong_type = next(line for line, why in BAD.items() if why == "field of the wrong type")
    assert samples["field of the wrong type"]["line"] == first_wrong_type


def test_load_counts_writes_parquet_and_filters_run(
    spark: SparkSession, trace_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    everything = _load(spark, str(trace_dir), out)
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
    # Every node that wrote a record, in name order, known without a Spark job.
    assert everything.nodes == tuple(sorted({r["node"] for r in everything.records.collect()}))
    one_run = _load(spark, str(trace_dir), out, run="r1")
    assert one_run.record_count == 2
    assert one_run.bad_lines == len(BAD)  # malformed lines have no trustworthy run
    assert sorted(r["ev"] for r in one_run.records.collect()) == ["deliver", "publish"]


def test_counts_of_files_in_different_tasks_add_up_and_keep_the_first_sample(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers' counts reach the driver through the write's accumulator: summed over
    the files, and per reason the sample of the first file (by name) and line, whichever
    task finished first."""
    d = tmp_path / "traces"
    good = json.dumps(GOOD[2])
    _write(d / "b.jsonl", ["", good, "[1]", good])
    _write(d / "a.jsonl", [good, "", "", good, good])
    _write(d / "c.jsonl", [good])
    assert spark.conf.get(TASK_BYTES, None) is None  # the user has not set it
    monkeypatch.setattr(load, "LOADING_TASK_BYTES", 1)  # a task per file
    loaded = _load(spark, str(d), tmp_path / "out")
    assert len(list((tmp_path / "out" / "records" / "ev=lookup").glob("*.parquet"))) == 3
    # loading's own size of a task was the session's only while it wrote the records
    assert spark.conf.get(TASK_BYTES, None) is None
    assert (loaded.lines, loaded.record_count, loaded.bad_lines) == (10, 6, 4)
    assert loaded.bad_by_reason == {"not a JSON object": 1, "empty line": 3}
    assert loaded.bad_samples == [
        {"file": "b.jsonl", "line": "[1]", "reason": "not a JSON object"},
        {"file": "a.jsonl", "line": "", "reason": "empty line"},
    ]
    assert loaded.records.count() == 6
    assert loaded.tally.groupBy().sum("n").first()[0] == 6


def test_loading_tasks_come_in_whole_waves_of_the_cores() -> None:
    """The bytes per task divide the files' weight (lengths and an open cost each) into
    the fewest whole waves of the cores whose tasks stay within the most."""
    task = load.balanced_task_bytes
    # one wave: the weight split between the cores
    assert task(100, 4, 5, slots=2, most=1000) == 60
    # exactly two tasks of the most fill one wave; a byte more takes a second wave
    assert task(2000, 0, 0, slots=2, most=1000) == 1000
    assert task(2001, 0, 0, slots=2, most=1000) == 501  # 2001 / 4, rounded up
    # the 10M-record bench traces: 256 files of 1,982,331,273 bytes and Spark's 4 MiB
    # open cost weigh 3,056,073,097: six waves of two tasks of 254,672,759 bytes (a
    # twelfth, rounded up), where 256 MiB a task made 12 tasks, the last of 115 MB
    assert task(1_982_331_273, 256, 4 << 20, slots=2, most=256 << 20) == 254_672_759
    # never a task of no bytes, whatever the files
    assert task(0, 0, 0, slots=2, most=1000) == 1
    assert task(5, 0, 0, slots=8, most=1) == 1


def test_spark_packs_loading_s_files_into_whole_waves(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nine files of equal size with three to a task at most: Spark's own packing made
    three tasks, an uneven last wave on two cores. Loading's size makes two waves of two
    tasks of two files and one task of the file left over, beside the last wave (a
    Parquet file per task that held a record of the type)."""
    d = tmp_path / "traces"
    line = json.dumps(GOOD[2])
    for i in range(9):
        _write(d / f"{i}.jsonl", [line])
    size = len(line) + 1
    assert spark.sparkContext.defaultParallelism == 2
    monkeypatch.setattr(load, "LOADING_TASK_BYTES", 3 * (size + 1))
    spark.conf.set("spark.sql.files.openCostInBytes", "1")
    try:
        loaded = _load(spark, str(d), tmp_path / "out")
    finally:
        spark.conf.unset("spark.sql.files.openCostInBytes")
    assert len(list((tmp_path / "out" / "records" / "ev=lookup").glob("*.parquet"))) == 5
    assert loaded.record_count == 9
    # the same files at Spark's packing for that most: three tasks
    spark.conf.set(TASK_BYTES, str(3 * (size + 1)))
    spark.conf.set("spark.sql.files.openCostInBytes", "1")
    try:
        _load(spark, str(d), tmp_path / "out2")
    finally:
        spark.conf.unset(TASK_BYTES)
        spark.conf.unset("spark.sql.files.openCostInBytes")
    assert len(list((tmp_path / "out2" / "records" / "ev=lookup").glob("*.parquet"))) == 3


def test_a_task_size_the_user_set_is_kept_while_loading(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A ``spark.sql.files.maxPartitionBytes`` the user set explicitly packs the files
    into tasks, not loading's own :data:`load.LOADING_TASK_BYTES` (which puts these
    three small files in fewer tasks), and stays set: one byte, a task (and a Parquet
    file) per trace file."""
    d = tmp_path / "traces"
    for name in ("a", "b", "c"):
        _write(d / f"{name}.jsonl", [json.dumps(GOOD[2])])
    spark.conf.set(TASK_BYTES, "1")
    try:
        loaded = _load(spark, str(d), tmp_path / "out")
        assert spark.conf.get(TASK_BYTES, None) == "1"
    finally:
        spark.conf.unset(TASK_BYTES)
    assert len(list((tmp_path / "out" / "records" / "ev=lookup").glob("*.parquet"))) == 3
    assert loaded.record_count == 3


def test_spark_finds_the_files_hidden_globbed_and_compressed(
    spark: SparkSession, trace_dir: Path, tmp_path: Path
) -> None:
    """What Spark's file source decides: hidden files skipped, only *.jsonl* names, a
    glob taken as one, a gzipped rotated file read decompressed."""
    _write(trace_dir / ".0d.jsonl", [json.dumps(GOOD[2])])  # an editor's temporary
    _write(trace_dir / "_tmp" / "0e.jsonl", [json.dumps(GOOD[2])])  # a writer's
    rotated = json.dumps({**GOOD[2], "node": "0g"}) + "\n"
    (trace_dir / "0g.jsonl.1.gz").write_bytes(gzip.compress(rotated.encode()))
    loaded = _load(spark, str(trace_dir), tmp_path / "out")
    nodes = sorted(r["node"] for r in loaded.records.collect())
    assert nodes == ["0a", "0a", "0b", "0g"]
    gz = next(r for r in loaded.records.collect() if r["node"] == "0g")
    assert gz["src_rank"] == 1
    only_top = _load(spark, str(trace_dir / "*.jsonl"), tmp_path / "out2")
    assert (only_top.lines, only_top.record_count) == (len(GOOD) - 1 + len(BAD), len(GOOD) - 1)


def test_an_empty_ev_is_a_record_in_spark_s_default_partition(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An empty ev is text, so the line is a record. The workers tell Spark that ev is
    never null (the write then copies no record to turn an empty one into null); Spark
    still writes it under its default partition and reads it back as null."""
    d = tmp_path / "traces"
    _write(d / "0a.jsonl", [_compact({"ts": 1.0, "node": "0a", "ev": ""}), json.dumps(GOOD[2])])
    loaded = _load(spark, str(d), tmp_path / "out")
    assert (loaded.record_count, loaded.bad_lines) == (2, 0)
    assert {r["ts"]: r["ev"] for r in loaded.records.collect()} == {1.0: None, 3.5: "lookup"}
    assert sorted(p.name for p in (tmp_path / "out" / "records").glob("ev=*")) == [
        "ev=__HIVE_DEFAULT_PARTITION__",
        "ev=lookup",
    ]


def test_a_folder_without_trace_files_gives_no_records(spark: SparkSession, tmp_path: Path) -> None:
    _write(tmp_path / "traces" / "notes.txt", ["{}"])
    loaded = _load(spark, str(tmp_path / "traces"), tmp_path / "out")
    assert (loaded.lines, loaded.record_count, loaded.bad_lines) == (0, 0, 0)
    assert loaded.records.count() == 0


def test_the_tally_counted_while_loading_is_record_tally_of_the_records(
    spark: SparkSession, trace_dir: Path, tmp_path: Path
) -> None:
    """Per file in the workers, summed in the driver: the same rows as Spark's tally of
    the loaded records (counts, dups, latest ts per node, topic, type and detail), with
    one node's records split over two files and another run's records left out."""
    def rec(ts: float, ev: str, run: str = "r1", **fields: object) -> str:
        return json.dumps({"ts": ts, "node": "0c", "ev": ev, "run": run, **fields})

    recv = {"topic": "t", "msg_id": "m1", "from": "0a", "hop": 1}
    _write(
        trace_dir / "0c.jsonl.1",
        [
            rec(1.0, "recv", **recv, dup=False),
            rec(2.0, "recv", **recv, dup=True),
            rec(2.5, "recv", **recv),  # dup absent: not a duplicate
            rec(3.0, "repair", topic="t", kind="rejoin"),
            rec(4.0, "drop", topic="t", reason="ttl"),
            rec(4.5, "drop", topic="t", reason="ttl", run="r2"),
            rec(5.0, "lookup", key="ff", hops=2, ok=True),  # no topic
        ],
    )
    _write(
        trace_dir / "0c.jsonl",
        [
            rec(6.0, "recv", **recv, dup=True),
            rec(7.0, "repair", topic="t", kind="parent"),
            rec(8.0, "drop", topic="t", reason="ttl"),
            rec(9.0, "drop", topic="u", reason="queue"),
            rec(9.5, "recv", **recv, dup=True, run="r2"),
        ],
    )
    for run in (None, "r1"):
        loaded = _load(spark, str(trace_dir), tmp_path / f"out-{run}", run)
        expected = record_tally(loaded.records)
        assert_df_equal(loaded.tally, expected, check_schema=True)
        rows = {(r["node"], r["topic"], r["ev"], r["detail"]): r for r in loaded.tally.collect()}
        c_recv = rows[("0c", "t", "recv", None)]
        assert (c_recv["n"], c_recv["dups"]) == ((5, 3) if run is None else (4, 2))
        c_ttl = rows[("0c", "t", "drop", "ttl")]
        assert (c_ttl["n"], c_ttl["last_ts"]) == ((3, 8.0) if run is None else (2, 8.0))
        assert rows[("0c", None, "lookup", None)]["n"] == 1
        assert {d for (_, _, ev, d) in rows if ev == "repair"} == {"rejoin", "parent"}
