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

from spark_analysis.chunks import Piece, read_piece
from spark_analysis.lines import ARROW_SCHEMA
from spark_analysis.parse import Tally, parse_block

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


class _EvWriters:
    """One Parquet file per ``ev`` for the task, written under a hidden name first.

    A file appears under its final name only once complete, and the names depend on the
    task's pieces only, so a retried task replaces its earlier attempt's files.
    """

    def __init__(self, target: str, task: int) -> None:
        self.target = target
        self.name = f"part-{task:05d}.parquet"
        self.open: dict[str, tuple[pq.ParquetWriter, str, str]] = {}

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        # A filter per ev on dictionary codes: a third of the cost of sorting by ev.
        table = table.combine_chunks()
        ev = pc.dictionary_encode(table.column("ev")).chunk(0)
        rows = table.drop_columns(["ev"])
        for code, value in enumerate(ev.dictionary.to_pylist()):
            self._writer(value).write_table(rows.filter(pc.equal(ev.indices, code)))

    def _writer(self, ev: str | None) -> pq.ParquetWriter:
        d = partition_dir(ev)
        entry = self.open.get(d)
        if entry is None:
            folder = os.path.join(self.target, d)
            os.makedirs(folder, exist_ok=True)
            final = os.path.join(folder, self.name)
            temp = os.path.join(folder, f".{self.name}.{os.getpid()}.tmp")
            writer = pq.ParquetWriter(
                temp,
                FILE_SCHEMA,
                compression="snappy",
                use_dictionary=[n for n in FILE_SCHEMA.names if n not in NO_DICTIONARY],
                write_statistics=[n for n in FILE_SCHEMA.names if n not in NO_STATISTICS],
            )
            entry = self.open[d] = (writer, temp, final)
        return entry[0]

    def close(self) -> None:
        for writer, temp, final in self.open.values():
            writer.close()
            os.replace(temp, final)


def run_task(item: tuple[int, list[Piece]], target: str, run: str | None) -> TaskResult:
    """Parse the task's pieces and write their good records (of ``run`` only, if set)."""
    task, pieces = item
    result = TaskResult()
    writers = _EvWriters(target, task)
    pending: list[pa.Table] = []
    pending_bytes = 0

    def flush() -> None:
        nonlocal pending, pending_bytes
        if pending:
            table = pa.concat_tables(pending)
            if run is not None:
                table = table.filter(pc.equal(table.column("run"), run))
            result.records += table.num_rows
            writers.write(table)
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
