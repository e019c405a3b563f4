"""Reading trace files through Spark: lines -> typed records, malformed lines counted,
Parquet by ``ev``.

Spark's ``binaryFile`` source finds the files: any URI Hadoop has a file system for,
globs, folders read recursively, hidden files (``_x``, ``.x``) skipped, names matched
against ``*.jsonl*``; it packs them into tasks as its file sources do. Each file comes
to a Python worker whole (``mapInArrow``), read by one sequential pass, which is all
a file system that cannot seek (``ftp://``) offers, and parsed there with Arrow
(:mod:`parse`). The good records go back to Spark in records/' narrow columns
(:mod:`layout`), and Spark writes them as Parquet partitioned by ``ev``; what each file
counted besides (lines, bad lines, records and their tally) goes to the driver in an
accumulator of that write (:class:`Counted`).
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.accumulators import Accumulator, AccumulatorParam
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from spark_analysis.layout import READ_SCHEMA, STORED_SCHEMA, TYPES_OF, decoded, stored
from spark_analysis.location import OutDir, glob_free_prefix, qualified, relative_name
from spark_analysis.parse import Tally, nulls, parse_block
from spark_analysis.schema import LIVE_RANK, TALLY_DETAIL, TALLY_KEYS

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
# The records as the workers hand them to Spark and records/ holds them: a narrow
# schema each type fills (layout.STORED_SCHEMA), in which ev, the partition column, is
# never null (a line without it is malformed). Saying so spares a projection: for a
# nullable text partition column Spark copies every record once more before the sort,
# to turn an empty ev into null (the default partition, where an empty ev goes anyway).
# 10M records, loading alone (local[2]): 72.6 and 72.6 CPU s against 76.9 and 79.5, the
# tasks' threads 35.1-35.4 s against 39.4-40.3.
PARSED_SCHEMA = STORED_SCHEMA

# Trace files go to a loading task whole, packed by Spark up to this many bytes a task
# (its default is 128 MB): each task writes a Parquet file for every record type it
# holds, and every file costs its writer's set-up, footer and commit (and a chmod
# process where Hadoop has no native library). 10M records (230 files of 8-12 MB,
# local[2]), loading alone: 24 tasks and 344 files at 128 MB, 67.4 against 72.6 CPU s
# at 256 MB (11 tasks, 178 files; the tasks' threads 32.1 against 35.4 s); 384 and
# 512 MB (8 and 6 tasks) no better (67.0, 67.3), with a larger sort per task. A
# spark.sql.files.maxPartitionBytes the user set (session, builder, --conf) wins.
LOADING_TASK_BYTES = 256 << 20


def balanced_task_bytes(total_bytes: int, files: int, open_cost: int, slots: int, most: int) -> int:
    """Bytes per loading task: at most ``most``, and the tasks in whole waves of
    ``slots`` (the executors' cores), so that no core waits at the end of loading while
    the last task of an uneven wave runs alone.

    Spark weighs a file as its length plus ``open_cost`` and packs the files, largest
    first, into tasks of up to this many bytes (next fit). The weight is divided into
    the fewest whole waves whose tasks stay within ``most``; next fit leaves each task a
    little under the size, and the slack makes one small task more, which runs beside
    the last wave. 10M records (256 files, local[2]): at 256 MB, 12 tasks, the last of
    115 MB, and a core idle 1.2-2.4 s at the end of loading (Spark's event log, two
    runs); at this size (243 MB), 12 tasks of 236-247 MB and one of 25 MB, idle 0-0.1 s.
    """
    weight = total_bytes + files * open_cost
    waves = max(1, -(-weight // (slots * most)))
    return max(1, -(-weight // (waves * slots)))


def _loading_task_bytes(spark: SparkSession, files: DataFrame) -> str:
    """:func:`balanced_task_bytes` of the files Spark listed for ``files`` (its
    relation's size and file list: no second listing)."""
    size = int(files._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
    conf = spark._jsparkSession.sessionState().conf()
    slots = spark.sparkContext.defaultParallelism
    count = len(files.inputFiles())
    task = balanced_task_bytes(size, count, conf.filesOpenCostInBytes(), slots, LOADING_TASK_BYTES)
    return str(task)


@contextmanager
def _session_default(spark: SparkSession, key: str, value: Callable[[], str]) -> Iterator[None]:
    """The session's ``key`` at ``value()`` while the block runs, unless the user set it
    (in the session, the builder or ``--conf``): then the user's value stays."""
    if spark.conf.get(key, None) is not None:  # None: never set, Spark's default holds
        yield
        return
    spark.conf.set(key, value())
    try:
        yield
    finally:
        spark.conf.unset(key)


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
    # The record types the tally counted (every type among ``records``): a metric step
    # whose types are all absent has nothing to read, and runs no Spark job.
    record_types: frozenset[str] = frozenset()
    # Every node that wrote a record (the tally's), in name order: known in the driver,
    # so gossip reach numbers the nodes without a Spark job.
    nodes: tuple[str, ...] = ()


def partial_tally(records: pa.Table) -> pa.Table:
    """``cost.record_tally`` of some records in Arrow: (node, topic, ev, detail, n,
    dups, last_ts). Tallies of parts of the records sum (n, dups) and take the latest
    (last_ts) to the tally of the whole (:func:`merged_tally`)."""
    ev = records.column("ev")
    detail = nulls(records.num_rows, pa.string())
    for kind, name in TALLY_DETAIL.items():
        detail = pc.if_else(pc.equal(ev, kind), records.column(name), detail)
    # records/ keeps dup only where its type has one (layout.LAYOUT), and the tally
    # counts what records/ holds
    dup_types = pa.array(TYPES_OF["dup"], pa.string())
    dup = pc.and_kleene(records.column("dup"), pc.is_in(ev, value_set=dup_types))
    dup = pc.fill_null(dup, False).cast(pa.int64())
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


@dataclass
class Counted:
    """What the workers counted besides the records: every line (a :class:`Tally`:
    lines, bad lines by reason, the first of each), the records sent to Spark, and each
    file's record tally (:func:`partial_tally`, as Arrow IPC bytes).

    It reaches the driver in an accumulator of the write (:class:`CountedParam`), not as
    rows of their own in the records' stream: those rows made every record carry six
    more null columns through Arrow, and Spark copy each record once more around the
    observation that summed them. Spark applies a task's accumulator updates once, when
    the task of the write's one stage succeeds.
    """

    lines: Tally = field(default_factory=Tally)
    records: int = 0
    record_tallies: list[bytes] = field(default_factory=list)

    def merge(self, other: Counted) -> None:
        self.lines.merge(other.lines)
        self.records += other.records
        self.record_tallies.extend(other.record_tallies)


class CountedParam(AccumulatorParam[Counted]):
    def zero(self, value: Counted) -> Counted:
        return Counted()

    def addInPlace(self, value1: Counted, value2: Counted) -> Counted:
        value1.merge(value2)
        return value1


def parse_files(
    batches: Iterator[pa.RecordBatch], root: str, run: str | None, counted: Accumulator[Counted]
) -> Iterator[pa.RecordBatch]:
    """mapInArrow: (path, content) of whole trace files -> records; what each file
    counted is added to ``counted``.

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
            file = Counted()
            tallies = []
            for table in parse_block(data, rank_of(path), name, file.lines):
                if run is not None:
                    table = table.filter(pc.equal(table.column("run"), run))
                if table.num_rows:
                    file.records += table.num_rows
                    tallies.append(partial_tally(table))
                    yield from stored(table).to_batches()
            del data
            if tallies:
                file.record_tallies.append(_ipc_bytes(merged_tally(tallies)))
            counted.add(file)


def load_traces(spark: SparkSession, path: str, out: OutDir, run: str | None = None) -> LoadResult:
    """Parse every trace line once, write good records (of ``run`` only, if set) as
    Parquet by ``ev`` under ``out``/records, and read them back."""
    target = out.path("records")
    root = qualified(spark, glob_free_prefix(path))
    listed = (
        spark.read.format("binaryFile")
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", TRACE_GLOB)
        .load(path)
    )
    counted = spark.sparkContext.accumulator(Counted(), CountedParam())
    records = listed.select("path", "content").mapInArrow(
        partial(parse_files, root=root, run=run, counted=counted), PARSED_SCHEMA
    )
    # Spark sorts each task's records by ev before this write: its partitioned writer
    # has one file open at a time per task, so each partition's rows must come
    # together. Its concurrent writers (a file open per ev, no sort) cost more CPU in
    # three rounds of measurement (spark_analysis/README.md); the sort stays.
    task_bytes = partial(_loading_task_bytes, spark, listed)
    with _session_default(spark, "spark.sql.files.maxPartitionBytes", task_bytes):
        records.write.mode("overwrite").partitionBy("ev").options(
            **RECORDS_WRITE_OPTIONS
        ).parquet(target)
    found = counted.value
    by_reason = {r: found.lines.bad[r] for r in BAD_REASONS if found.lines.bad.get(r)}
    samples = found.lines.samples
    tally = merged_tally([_from_ipc(data) for data in found.record_tallies])
    return LoadResult(
        records=read_records(spark, target),
        # A few rows per node, topic and record type: made in the driver, no Spark job.
        tally=spark.createDataFrame(tally, schema=RECORD_TALLY_SCHEMA),
        lines=found.lines.lines,
        bad_lines=sum(by_reason.values()),
        record_count=found.records,
        bad_samples=[
            {"file": samples[r][0], "line": samples[r][2], "reason": r} for r in by_reason
        ],
        bad_by_reason=by_reason,
        record_types=frozenset(tally.column("ev").unique().to_pylist()),
        nodes=tuple(sorted(n for n in tally.column("node").unique().to_pylist() if n is not None)),
    )


def read_records(spark: SparkSession, parquet_dir: str) -> DataFrame:
    """The normalized records written by :func:`load_traces` (ev comes back last): the
    folders' narrow columns read with their explicit schema and decoded by type
    (:mod:`layout`)."""
    return decoded(spark.read.schema(READ_SCHEMA).parquet(parquet_dir))


def of_type(records: DataFrame, ev: str) -> DataFrame:
    """Records of one type; on Parquet this reads only that partition."""
    return records.filter(F.col("ev") == ev)
