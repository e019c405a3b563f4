"""Reading trace files through Spark: lines -> typed records, malformed lines counted,
Parquet by ``ev``.

Spark's ``binaryFile`` source finds the files: any URI Hadoop has a file system for,
globs, folders read recursively, hidden files (``_x``, ``.x``) skipped, names matched
against ``*.jsonl*``; it packs them into tasks as its file sources do. Each file comes
to a Python worker whole (``mapInArrow``), read by one sequential pass, which is all
a file system that cannot seek (``ftp://``) offers, and parsed there with Arrow
(:mod:`parse`). The good records go back to Spark, which writes them as Parquet
partitioned by ``ev``; each file's line tally rides in the same stream as rows of
their own (``ev`` null), summed by an :class:`~pyspark.sql.Observation` of that write.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from spark_analysis.location import OutDir, glob_free_prefix, qualified, relative_name
from spark_analysis.parse import Tally, nulls, parse_block
from spark_analysis.schema import LIVE_RANK, NORMALIZED_SCHEMA, TALLY_DETAIL, TALLY_KEYS

__all__ = [
    "BAD_REASONS",
    "TRACE_GLOB",
    "LoadResult",
    "load_traces",
    "of_type",
    "partial_tally",
    "rank_of",
    "read_records",
]

TRACE_GLOB = "*.jsonl*"  # TRACES.md: readers take every *.jsonl* file
BAD_REASONS = (
    "not a JSON object",
    "field of the wrong type",
    "empty line",
    "missing ts, node or ev",
    "ts not finite",
    "node or ev not text",
    "attrs not an object",
)
_ROTATED = re.compile(r"\.jsonl\.(\d+)")
_INT_MAX = 2**31 - 1

# A task's output: the records, and per file one row of line counts (``lines``) and
# the file's record tally (``record_tally``, see partial_tally) and one per reason a
# line was bad (count and first sample); those rows have ``ev`` null.
TALLY_FIELDS = [
    T.StructField("lines", T.LongType()),
    T.StructField("record_tally", T.BinaryType()),
    T.StructField("bad_reason", T.StringType()),
    T.StructField("bad_count", T.LongType()),
    T.StructField("bad_file", T.StringType()),
    T.StructField("bad_line", T.StringType()),
]
PARSED_SCHEMA = T.StructType([*NORMALIZED_SCHEMA.fields, *TALLY_FIELDS])
_PARSED_ARROW = to_arrow_schema(PARSED_SCHEMA)
_RECORD_ARROW = to_arrow_schema(NORMALIZED_SCHEMA)
_TALLY_ARROW = pa.schema([_PARSED_ARROW.field(f.name) for f in TALLY_FIELDS])
# cost.record_tally's output: (node, topic, ev, detail, n, dups, last_ts).
RECORD_TALLY_SCHEMA = T.StructType(
    [
        *(T.StructField(name, T.StringType()) for name in TALLY_KEYS),
        T.StructField("n", T.LongType()),
        T.StructField("dups", T.LongType()),
        T.StructField("last_ts", T.DoubleType()),
    ]
)
_RECORD_TALLY_ARROW = to_arrow_schema(RECORD_TALLY_SCHEMA)
# Parquet options of records/ (Hadoop settings of parquet-mr, passed per write). Plain
# encoding, no dictionaries: the dictionaries' hash lookups were a sixth of the loading
# tasks' CPU (JFR samples, 10M records), and ts and src_row, unique per record, fall back
# to plain anyway. 10M records, loading alone (local[2]): tasks 46.7 against 53.0 CPU s,
# loading 91.4 against 99.6 CPU s; records/ grows from 137 to 237 MB.
RECORDS_WRITE_OPTIONS = {"parquet.enable.dictionary": "false"}


def rank_of(name: str) -> int | None:
    """Rotation rank: ``x.jsonl.3`` -> 3, the live ``x.jsonl`` -> LIVE_RANK (newest)."""
    m = _ROTATED.search(name.rsplit("/", 1)[-1])
    if m is None:
        return LIVE_RANK
    n = int(m.group(1))
    return n if n <= _INT_MAX else None  # as an overflowing integer cast gives


@dataclass
class LoadResult:
    """What loading found: the records (read back from Parquet), their tally
    (``cost.record_tally`` of them, counted while parsing) and the line counts."""

    records: DataFrame
    tally: DataFrame
    lines: int
    bad_lines: int
    record_count: int
    bad_samples: list[dict[str, str]] = field(default_factory=list)
    bad_by_reason: dict[str, int] = field(default_factory=dict)


def partial_tally(records: pa.Table) -> pa.Table:
    """``cost.record_tally`` of some records in Arrow: (node, topic, ev, detail, n,
    dups, last_ts). Tallies of parts of the records sum (n, dups) and take the latest
    (last_ts) to the tally of the whole (:func:`merged_tally`)."""
    ev = records.column("ev")
    detail = nulls(records.num_rows, pa.string())
    for kind, name in TALLY_DETAIL.items():
        detail = pc.if_else(pc.equal(ev, kind), records.column(name), detail)
    dup = pc.fill_null(records.column("dup"), False).cast(pa.int64())
    keyed = pa.table(
        {
            "node": records.column("node"),
            "topic": records.column("topic"),
            "ev": ev,
            "detail": detail,
            "dup": dup,
            "ts": records.column("ts"),
        }
    )
    counted = keyed.group_by(list(TALLY_KEYS), use_threads=False).aggregate(
        [([], "count_all"), ("dup", "sum"), ("ts", "max")]
    )
    return _tally_table(counted, "count_all", "dup_sum", "ts_max")


def _tally_table(counted: pa.Table, n: str, dups: str, last_ts: str) -> pa.Table:
    columns = [counted.column(name) for name in TALLY_KEYS]
    columns += [counted.column(n), counted.column(dups), counted.column(last_ts)]
    return pa.Table.from_arrays(
        [c.cast(f.type) for c, f in zip(columns, _RECORD_TALLY_ARROW, strict=True)],
        schema=_RECORD_TALLY_ARROW,
    )


def merged_tally(parts: list[pa.Table]) -> pa.Table:
    """One tally from tallies of disjoint parts of the records."""
    if not parts:
        return _RECORD_TALLY_ARROW.empty_table()
    merged = pa.concat_tables(parts).group_by(list(TALLY_KEYS), use_threads=False)
    summed = merged.aggregate([("n", "sum"), ("dups", "sum"), ("last_ts", "max")])
    return _tally_table(summed, "n_sum", "dups_sum", "last_ts_max")


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


def _with_tally_columns(table: pa.Table) -> pa.Table:
    n = table.num_rows
    for f in _TALLY_ARROW:
        table = table.append_column(f, nulls(n, f.type))
    return table


def _tally_rows(tally: Tally, file: str, records: pa.Table) -> pa.Table:
    """The file's line count and record tally (``records``, as Arrow IPC bytes), and one
    row per reason with its count and first sample."""
    reasons = [r for r in BAD_REASONS if tally.bad.get(r)]
    columns: dict[str, list[Any]] = {
        "lines": [tally.lines] + [None] * len(reasons),
        "record_tally": [_ipc_bytes(records)] + [None] * len(reasons),
        "bad_reason": [None, *reasons],
        "bad_count": [None] + [tally.bad[r] for r in reasons],
        "bad_file": [None] + [file] * len(reasons),
        "bad_line": [None] + [tally.samples[r][2] for r in reasons],
    }
    n = len(reasons) + 1
    rows = {f.name: nulls(n, f.type) for f in _RECORD_ARROW}
    rows["src_row"] = pa.array([None] + [tally.samples[r][1] for r in reasons], pa.int64())
    for name, values in columns.items():
        rows[name] = pa.array(values, _TALLY_ARROW.field(name).type)
    return pa.table(rows, schema=_PARSED_ARROW)


def parse_files(
    batches: Iterator[pa.RecordBatch], root: str, run: str | None
) -> Iterator[pa.RecordBatch]:
    """mapInArrow: (path, content) of whole trace files -> records and tally rows.

    Records of another run than ``run`` (when set) are dropped here, before they cost
    a row in Spark; their lines are still counted.
    """
    for batch in batches:
        paths = batch.column("path").to_pylist()
        contents = batch.column("content")
        for i, path in enumerate(paths):
            data: bytes = contents[i].as_py() or b""
            if path.endswith(".gz"):  # as Hadoop's codecs would; rotated files may be
                data = gzip.decompress(data)
            name = relative_name(path, root)
            tally, counted = Tally(), []
            for table in parse_block(data, rank_of(path), name, tally):
                if run is not None:
                    table = table.filter(pc.equal(table.column("run"), run))
                if table.num_rows:
                    counted.append(partial_tally(table))
                    yield from _with_tally_columns(table).to_batches()
            del data
            yield from _tally_rows(tally, name, merged_tally(counted)).to_batches()


def load_traces(spark: SparkSession, path: str, out: OutDir, run: str | None = None) -> LoadResult:
    """Parse every trace line once, write good records (of ``run`` only, if set) as
    Parquet by ``ev`` under ``out``/records, and read them back."""
    target = out.path("records")
    root = qualified(spark, glob_free_prefix(path))
    files = (
        spark.read.format("binaryFile")
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", TRACE_GLOB)
        .load(path)
        .select("path", "content")
    )
    parsed = files.mapInArrow(partial(parse_files, root=root, run=run), PARSED_SCHEMA)
    observed = Observation("trace lines")
    bad = F.struct("bad_reason", "bad_count", "bad_file", "src_row", "bad_line")
    parsed = parsed.observe(
        observed,
        F.coalesce(F.sum("lines"), F.lit(0)).alias("lines"),
        F.count_if(F.col("ev").isNotNull()).alias("records"),
        F.collect_list(F.when(F.col("bad_reason").isNotNull(), bad)).alias("bad"),
        F.collect_list("record_tally").alias("record_tallies"),
    )
    records = parsed.filter(F.col("ev").isNotNull()).select(*NORMALIZED_SCHEMA.names)
    records.write.mode("overwrite").partitionBy("ev").options(**RECORDS_WRITE_OPTIONS).parquet(
        target
    )
    counts = observed.get
    by_reason: dict[str, int] = {}
    samples: dict[str, tuple[str, int, str]] = {}
    for row in counts["bad"]:
        reason = row["bad_reason"]
        by_reason[reason] = by_reason.get(reason, 0) + int(row["bad_count"])
        sample = (row["bad_file"], int(row["src_row"]), row["bad_line"])
        if reason not in samples or sample[:2] < samples[reason][:2]:
            samples[reason] = sample
    reasons = [name for name in BAD_REASONS if name in by_reason]
    tally = merged_tally([_from_ipc(data) for data in counts["record_tallies"]])
    return LoadResult(
        records=read_records(spark, target),
        # A few rows per node, topic and record type: made in the driver, no Spark job.
        tally=spark.createDataFrame(tally, schema=RECORD_TALLY_SCHEMA),
        lines=int(counts["lines"]),
        bad_lines=sum(by_reason.values()),
        record_count=int(counts["records"]),
        bad_samples=[{"file": samples[r][0], "line": samples[r][2], "reason": r} for r in reasons],
        bad_by_reason={r: by_reason[r] for r in reasons},
    )


def read_records(spark: SparkSession, parquet_dir: str) -> DataFrame:
    """The normalized records written by :func:`load_traces` (ev comes back last)."""
    return spark.read.schema(NORMALIZED_SCHEMA).parquet(parquet_dir)


def of_type(records: DataFrame, ev: str) -> DataFrame:
    """Records of one type; on Parquet this reads only that partition."""
    return records.filter(F.col("ev") == ev)
