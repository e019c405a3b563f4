"""records/'s narrow layout: each type's fields in typed slots, decoded back by type.

A record of every type with every one of its fields set goes through loading
(parse, the workers' narrowing, Spark's partitioned write) and back (the folders read
together and decoded): each field must come back as written, and every other field
null. A type whose folder lost a column it needs, or two types whose slots the reader
confuses, fail here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from spark_analysis import layout
from spark_analysis.cost import record_tally
from spark_analysis.load import load_traces
from spark_analysis.location import OutDir
from spark_analysis.parse import parse_text
from spark_analysis.schema import FIELDS, NORMALIZED_SCHEMA, Ev
from tests.spark.helpers import assert_df_equal

_TYPES = dict(FIELDS)


def _value(ev: str, name: str, i: int) -> object:
    """A value of ``name``'s type, distinct per type and field."""
    kind = _TYPES[name]
    if name == "attrs":
        return {"ev": ev, "n": i}
    if isinstance(kind, T.StringType):
        return f"{ev}.{name}"
    if isinstance(kind, T.LongType):
        return 1000 * i + len(name)
    if isinstance(kind, T.DoubleType):
        return i + 0.25
    return i % 2 == 0  # booleans: both values among the types


def _full_records() -> list[dict[str, object]]:
    """One record of each type with all its fields, and a hop record of each hop type
    as the tracer writes it (the parse's narrow path)."""
    out = []
    for i, (ev, fields) in enumerate(sorted(layout.LAYOUT.items())):
        record: dict[str, object] = {"ts": float(i), "node": "0a", "ev": ev, "run": "r"}
        record |= {"topic": "t", "msg_id": f"m{i}"}
        out.append(record | {name: _value(ev, name, i) for name in fields})
    hops = {
        Ev.FORWARD: {"to": "0b", "hop": 1},
        Ev.RECV: {"from": "0c", "hop": 2, "dup": True},
        Ev.DELIVER: {"sub": 3, "hop": 2, "seq": 7, "dup": False},
    }
    for i, (ev, fields) in enumerate(hops.items()):
        hop = {"ts": 50.0 + i, "node": "0b", "ev": ev, "topic": "t", "msg_id": "m"}
        out.append(hop | fields)
    return out


def _write_traces(folder: Path, records: list[dict[str, object]]) -> None:
    """Node 0b's hop records in a file of their own: parsed on their narrow schemas."""
    folder.mkdir()
    for node in {str(r["node"]) for r in records}:
        mine = [json.dumps(r) for r in records if r["node"] == node]
        (folder / f"{node}.jsonl").write_text("".join(line + "\n" for line in mine))


def test_the_layout_is_sound() -> None:
    """No two fields of one type share a slot, each slot keeps its fields' type, every
    field has a column, and every record type the analysis names has a layout."""
    assert layout.layout_errors() == []
    named = {v for k, v in vars(Ev).items() if not k.startswith("_")}
    assert named <= set(layout.LAYOUT)
    # The hop types fill most of what is written (ev is the folder's name).
    written = len(layout.STORED_SCHEMA) - 1
    assert written == 16
    for ev in (Ev.FORWARD, Ev.RECV, Ev.DELIVER):
        assert written - (len(layout.SHARED) + 2 + len(layout.LAYOUT[ev])) <= 7


def test_the_readme_shows_the_layout() -> None:
    """README.md's table of records/ (Outputs in DIR) is the one the workers write."""
    readme = (Path(layout.__file__).parent / "README.md").read_text()
    section = readme.split("## Outputs in DIR", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    header, *types = [
        [cell.strip().strip("`") for cell in row.strip("|").split("|")] for row in rows
    ]
    assert header == ["ev", *layout.SLOTS]
    shown = {ev: {name for name in cells if name} for ev, *cells in types}
    assert shown == {ev: set(fields) for ev, fields in layout.LAYOUT.items()}
    for _, *cells in types:
        slots = zip(cells, layout.SLOTS, strict=True)
        assert all(layout.FIELD_SLOT[name] == slot for name, slot in slots if name)


def test_narrowing_a_table_of_one_type_or_of_many_gives_the_same_rows() -> None:
    """The parse's hop parts are of one type, its other part and the line-by-line
    fallback of many: both ways of filling the slots agree."""
    text = "".join(json.dumps(r) + "\n" for r in _full_records())
    mixed, tally = parse_text(text)
    assert tally.bad == {}
    whole = layout.stored(mixed).to_pylist()
    one_by_one = []
    for ev in mixed.column("ev").unique().to_pylist():
        part = mixed.filter(pa.compute.equal(mixed.column("ev"), ev))
        one_by_one += layout.stored(part).to_pylist()
    key = lambda r: r["src_row"]  # noqa: E731
    assert sorted(whole, key=key) == sorted(one_by_one, key=key)
    assert layout.stored(mixed.slice(0, 0)).num_rows == 0


def test_every_type_keeps_its_fields_through_records(spark: SparkSession, tmp_path: Path) -> None:
    written = _full_records()
    # A field its type does not have is not kept (and not counted by the tally).
    written.append({"ts": 60.0, "node": "0c", "ev": Ev.FORWARD, "to": "0d", "reason": "x"})
    written.append({"ts": 61.0, "node": "0c", "ev": Ev.DROP, "reason": "ttl", "dup": True})
    written.append({"ts": 62.0, "node": "0c", "ev": "pong", "seq": 4})  # an unknown type
    traces = tmp_path / "traces"
    _write_traces(traces, written)
    loaded = load_traces(spark, str(traces), OutDir(spark, tmp_path / "out"))
    assert loaded.records.schema == T.StructType(
        [f for f in NORMALIZED_SCHEMA.fields if f.name != "ev"]
        + [T.StructField("ev", T.StringType())]
    )
    back = {r["ts"]: r.asDict() for r in loaded.records.collect()}
    assert len(back) == len(written)
    for record in written:
        got = back[float(record["ts"])]  # type: ignore[arg-type]
        kept = set(layout.SHARED) | {"ev"} | set(layout.LAYOUT.get(str(record["ev"]), ()))
        expected = {name: record.get(name) if name in kept else None for name, _ in FIELDS}
        if isinstance(expected["attrs"], dict):
            got["attrs"] = json.loads(got["attrs"])
        assert {name: got[name] for name, _ in FIELDS} == expected, record["ev"]
    # Each folder holds the narrow columns only, whatever its type.
    for folder in (tmp_path / "out" / "records").glob("ev=*"):
        for part in folder.glob("*.parquet"):
            names = pq.read_schema(part).names
            assert names == [f.name for f in layout.STORED_SCHEMA.fields if f.name != "ev"]
    # What loading tallied is what records/ holds: the drop's stray dup is not a dup.
    assert_df_equal(loaded.tally, record_tally(loaded.records), check_schema=True)
    drops = loaded.tally.filter("ev = 'drop' AND detail = 'ttl'").first()
    assert drops is not None and drops["dups"] == 0


def test_a_type_s_folder_read_alone_is_decoded_by_its_type(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A filter on ev reads one folder (the decoding is a projection Spark pushes the
    filter through) and the slots mean that type's fields."""
    traces = tmp_path / "traces"
    _write_traces(traces, _full_records())
    loaded = load_traces(spark, str(traces), OutDir(spark, tmp_path / "out"))
    recv = loaded.records.filter("ev = 'recv' AND node = '0b'")
    plan = recv._jdf.queryExecution().executedPlan().toString()
    assert "PartitionFilters: [isnotnull(ev" in plan and " = recv)]" in plan
    rows = recv.collect()
    assert [(r["from"], r["hop"], r["dup"], r["to"], r["durable"]) for r in rows] == [
        ("0c", 2, True, None, None)
    ]
