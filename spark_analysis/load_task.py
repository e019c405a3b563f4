"""One loading task: read its pieces of trace files, parse them, write Parquet by ``ev``.

Runs in a Spark Python worker. The parse and the write are in the task (not in Spark
SQL) because Spark's from_json, its row conversion and its Parquet writer were over
half of an analysis run; Arrow parses a block of lines and pyarrow writes its columns
without a row per record. Spark still distributes the work: one task per group of
pieces, run wherever the cluster has a core (the output directory must be shared, as
for any Spark file write).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import to_arrow_schema

from spark_analysis import schema
from spark_analysis.chunks import Piece, read_piece
from spark_analysis.lines import ARROW_SCHEMA
from spark_analysis.parse import Tally, parse_block
from spark_analysis.schema import Ev

# Columns whose values are nearly all distinct: a Parquet dictionary for them is built
# and then abandoned, which costs time and saves nothing.
NO_DICTIONARY = ("ts", "attrs", "msg_id", "key", "ms", "src_row", "src_block")
# Min/max of long, near-unique texts: no step filters on them by value.
NO_STATISTICS = ("attrs", "msg_id", "key")
# Parsed input held before it is written out as a row group of each ev's file.
FLUSH_BYTES = 64 << 20
# Spark's names for a partition directory: the null value, and the characters escaped.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
_ESCAPED = {*map(chr, range(1, 32)), *"\"#%'*/:=?\\\x7f{[]^"}

FILE_SCHEMA = pa.schema([f for f in ARROW_SCHEMA if f.name != "ev"])
# cost.record_tally's table: every record counted per (node, topic, ev, detail), with
# those whose ``dup`` is true and the latest ``ts``. Each task sums its part as it
# writes the records, so that no later step reads the hop records (nine tenths of a
# trace) again for counts.
TALLY_DIR = "tally"
TALLY_SCHEMA: pa.Schema = to_arrow_schema(schema.TALLY_SCHEMA)
# The distinct (msg_id, node) of the recv and deliver records: which nodes each event
# reached (gossip coverage), a third of those records' rows and two of their columns.
REACH_DIR = "reach"
REACH_EVS = (Ev.RECV, Ev.DELIVER)
REACH_SCHEMA: pa.Schema = to_arrow_schema(schema.REACH_SCHEMA)
# A repair's kind and a drop's reason are the detail its count is kept by.
DETAIL_FIELD = {Ev.REPAIR: "kind", Ev.DROP: "reason"}


def partition_dir(ev: str | None) -> str:
    """``ev=<value>`` as Spark's partitioned writer names it (and its reader decodes)."""
    if not ev:
        return f"ev={NULL_PARTITION}"
    return "ev=" + "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in ev)


@dataclass
class TaskResult:
    """What one task found: its line tally and how many records it wrote."""

    tally: Tally = field(default_factory=Tally)
    records: int = 0


def tally_of(ev: str | None, rows: pa.Table) -> pa.Table:
    """``rows`` (records of one ``ev``) counted per node, topic and detail."""
    n = rows.num_rows
    field = DETAIL_FIELD.get(ev or "")
    keyed = pa.table(
        {
            "node": rows.column("node"),
            "topic": rows.column("topic"),
            "detail": rows.column(field) if field else pa.nulls(n, pa.string()),
            "dup": rows.column("dup"),
            "ts": rows.column("ts"),
        }
    )
    counted = keyed.group_by(["node", "topic", "detail"]).aggregate(
        [([], "count_all"), ("dup", "sum"), ("ts", "max")]
    )
    return _tally_table(
        counted, ev, counted.column("count_all"), counted.column("dup_sum"), counted["ts_max"]
    )


def _tally_table(
    counted: pa.Table, ev: str | None, n: pa.Array, dups: pa.Array, last_ts: pa.Array
) -> pa.Table:
    rows = counted.num_rows
    return pa.table(
        [
            counted.column("node"),
            counted.column("topic"),
            counted.column("ev") if ev is None else pa.repeat(pa.scalar(ev, pa.string()), rows),
            counted.column("detail"),
            pc.cast(n, pa.int64()),
            pc.cast(pc.fill_null(dups, 0), pa.int64()),
            last_ts,
        ],
        schema=TALLY_SCHEMA,
    )


def reach_of(rows: pa.Table) -> pa.Table:
    """The distinct (msg_id, node) of ``rows`` with a msg_id."""
    pairs = rows.select(REACH_SCHEMA.names)
    pairs = pairs.filter(pc.is_valid(pairs.column("msg_id")))
    return pairs.group_by(REACH_SCHEMA.names).aggregate([]).cast(REACH_SCHEMA)


def merged_tally(parts: list[pa.Table]) -> pa.Table:
    """Partial tallies summed per (node, topic, ev, detail)."""
    if not parts:
        return TALLY_SCHEMA.empty_table()
    summed = (
        pa.concat_tables(parts)
        .group_by(["node", "topic", "ev", "detail"])
        .aggregate([("n", "sum"), ("dups", "sum"), ("last_ts", "max")])
    )
    return _tally_table(
        summed, None, summed["n_sum"], summed["dups_sum"], summed["last_ts_max"]
    )


class _EvWriters:
    """One Parquet file per ``ev`` for the task, written under a hidden name first,
    and the task's tally and reach (one file each).

    A file appears under its final name only once complete, and the names depend on the
    task's pieces only, so a retried task replaces its earlier attempt's files.
    """

    def __init__(self, target: str, task: int, side_target: str | None = None) -> None:
        self.target = target
        self.side_target = side_target
        self.name = f"part-{task:05d}.parquet"
        self.open: dict[str, tuple[pq.ParquetWriter, str, str]] = {}
        self.tallies: list[pa.Table] = []
        self.reached: list[pa.Table] = []

    def write(self, tables: list[pa.Table]) -> None:
        """Write ``tables`` (parsed records) into the files of their ``ev``.

        The parse gives most tables one ``ev`` each (a hop type's lines); the others
        are split by a filter per ev on dictionary codes.
        """
        by_ev: dict[str | None, list[pa.Table]] = {}
        for table in tables:
            if table.num_rows == 0:
                continue
            ev = pc.dictionary_encode(table.column("ev").combine_chunks())
            rows = table.drop_columns(["ev"])
            values = ev.dictionary.to_pylist()
            if len(values) == 1:
                by_ev.setdefault(values[0], []).append(rows)
                continue
            for code, value in enumerate(values):
                by_ev.setdefault(value, []).append(rows.filter(pc.equal(ev.indices, code)))
        for value, parts in by_ev.items():
            part = pa.concat_tables(parts)
            self._writer(value).write_table(part)
            self.tallies.append(tally_of(value, part))
            if value in REACH_EVS:
                self.reached.append(reach_of(part))

    def _writer(self, ev: str | None) -> pq.ParquetWriter:
        d = partition_dir(ev)
        entry = self.open.get(d)
        if entry is None:
            folder = os.path.join(self.target, d)
            os.makedirs(folder, exist_ok=True)
            final = os.path.join(folder, self.name)
            writer = pq.ParquetWriter(
                _temp_name(final),
                FILE_SCHEMA,
                compression="snappy",
                use_dictionary=[n for n in FILE_SCHEMA.names if n not in NO_DICTIONARY],
                write_statistics=[n for n in FILE_SCHEMA.names if n not in NO_STATISTICS],
            )
            entry = self.open[d] = (writer, _temp_name(final), final)
        return entry[0]

    def close(self) -> None:
        for writer, temp, final in self.open.values():
            writer.close()
            os.replace(temp, final)
        if self.side_target is not None:
            reached = pa.concat_tables([REACH_SCHEMA.empty_table(), *self.reached])
            reached = reached.group_by(REACH_SCHEMA.names).aggregate([]).cast(REACH_SCHEMA)
            for folder, table in (
                (TALLY_DIR, merged_tally(self.tallies)),
                (REACH_DIR, reached),
            ):
                final = os.path.join(self.side_target, folder, self.name)
                os.makedirs(os.path.dirname(final), exist_ok=True)
                pq.write_table(table, _temp_name(final))
                os.replace(_temp_name(final), final)


def _temp_name(final: str) -> str:
    folder, name = os.path.split(final)
    return os.path.join(folder, f".{name}.{os.getpid()}.tmp")


def run_task(
    item: tuple[int, list[Piece]], target: str, run: str | None, side_target: str | None = None
) -> TaskResult:
    """Parse the task's pieces and write their good records (of ``run`` only, if set),
    and, when ``side_target`` is given, their tally and reach under it."""
    task, pieces = item
    result = TaskResult()
    writers = _EvWriters(target, task, side_target)
    pending: list[pa.Table] = []
    pending_bytes = 0

    def flush() -> None:
        nonlocal pending, pending_bytes
        tables = pending
        if run is not None:
            tables = [t.filter(pc.equal(t.column("run"), run)) for t in tables]
        result.records += sum(t.num_rows for t in tables)
        writers.write(tables)
        pending, pending_bytes = [], 0

    for piece in pieces:
        data = read_piece(piece)
        pending += parse_block(data, piece.rank, piece.start, piece.file, result.tally)
        pending_bytes += len(data)
        del data
        if pending_bytes >= FLUSH_BYTES:
            flush()
    flush()
    writers.close()
    return result


def task_files(target: str) -> list[Path]:
    """The Parquet files written under ``target`` (for tests)."""
    return sorted(Path(target).glob("ev=*/*.parquet"))
