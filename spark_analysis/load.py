"""Reading trace files: lines -> typed records, malformed lines counted, Parquet by ``ev``.

The driver plans which bytes of which files each task reads (:mod:`chunks`); Spark runs
the tasks, each parsing its lines with Arrow and writing Parquet (:mod:`load_task`);
Spark then reads the records back from that Parquet for the analysis. Each task also
counts the records it writes per (node, topic, ev, detail) into ``DIR/tally``, which
the per-node and per-topic counts sum instead of reading every record again, and
writes which nodes each event reached into ``DIR/reach``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_analysis.chunks import TRACE_GLOB, list_trace_files, plan_tasks
from spark_analysis.load_task import REACH_DIR, TALLY_DIR, TaskResult, run_task
from spark_analysis.parse import Tally
from spark_analysis.schema import NORMALIZED_SCHEMA, REACH_SCHEMA, TALLY_SCHEMA

__all__ = [
    "BAD_REASONS",
    "TRACE_GLOB",
    "LoadResult",
    "load_traces",
    "of_type",
    "read_reached",
    "read_records",
    "read_tally",
]

BAD_REASONS = (
    "not a JSON object",
    "field of the wrong type",
    "empty line",
    "missing ts, node or ev",
    "ts not finite",
    "node or ev not text",
    "attrs not an object",
)


@dataclass
class LoadResult:
    """What loading found: the records (read back from Parquet) and the line counts."""

    records: DataFrame
    # cost.record_tally of the records: (node, topic, ev, detail, n, dups, last_ts)
    record_tally: DataFrame
    # (msg_id, node) of the recv and deliver records, distinct within each task
    reached: DataFrame
    lines: int
    bad_lines: int
    record_count: int
    bad_samples: list[dict[str, str]] = field(default_factory=list)
    bad_by_reason: dict[str, int] = field(default_factory=dict)


def load_traces(
    spark: SparkSession, path: str, out_dir: str | Path, run: str | None = None
) -> LoadResult:
    """Parse every trace line once, write good records as Parquet by ``ev``, read back.

    Each task returns its counts with its files, so the text is read once; later steps
    read only the ``ev`` partitions they need.
    """
    target = Path(out_dir) / "records"
    tally_target, reach_target = Path(out_dir) / TALLY_DIR, Path(out_dir) / REACH_DIR
    for folder in (target, tally_target, reach_target):
        shutil.rmtree(folder, ignore_errors=True)
    target.mkdir(parents=True)
    tasks = plan_tasks(list_trace_files(path), spark.sparkContext.defaultParallelism)
    results: list[TaskResult] = []
    if tasks:
        work = spark.sparkContext.parallelize(list(enumerate(tasks)), len(tasks))
        task = partial(run_task, target=str(target), run=run, side_target=str(out_dir))
        results = work.map(task).collect()
    tally = Tally()
    for result in results:
        tally.merge(result.tally)
    by_reason = {name: tally.bad[name] for name in BAD_REASONS if tally.bad.get(name)}
    samples = [
        {"file": tally.samples[name][0], "line": tally.samples[name][3], "reason": name}
        for name in by_reason
    ]
    return LoadResult(
        records=read_records(spark, str(target)),
        record_tally=read_tally(spark, str(tally_target)),
        reached=read_reached(spark, str(reach_target)),
        lines=tally.lines,
        bad_lines=sum(by_reason.values()),
        record_count=sum(r.records for r in results),
        bad_samples=samples,
        bad_by_reason=by_reason,
    )


def read_records(spark: SparkSession, parquet_dir: str) -> DataFrame:
    """The normalized records written by :func:`load_traces` (ev comes back last)."""
    return _parts(spark, parquet_dir, "ev=*", NORMALIZED_SCHEMA)


def read_tally(spark: SparkSession, tally_dir: str) -> DataFrame:
    """The tasks' tallies summed: one row per (node, topic, ev, detail)."""
    parts = _parts(spark, tally_dir, "*.parquet", TALLY_SCHEMA)
    return parts.groupBy("node", "topic", "ev", "detail").agg(
        F.sum("n").alias("n"), F.sum("dups").alias("dups"), F.max("last_ts").alias("last_ts")
    )


def read_reached(spark: SparkSession, reach_dir: str) -> DataFrame:
    """The tasks' (msg_id, node) pairs of recv and deliver records (a pair may repeat
    across tasks; :func:`gossip.event_reach` counts distinct nodes)."""
    return _parts(spark, reach_dir, "*.parquet", REACH_SCHEMA)


def _parts(spark: SparkSession, folder: str, pattern: str, schema: T.StructType) -> DataFrame:
    """The Parquet under ``folder`` read with ``schema``, or no rows when nothing there
    matches ``pattern`` (Spark refuses to read a folder without files)."""
    if not any(Path(folder).glob(pattern)):
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(folder)


def of_type(records: DataFrame, ev: str) -> DataFrame:
    """Records of one type; on Parquet this reads only that partition."""
    return records.filter(F.col("ev") == ev)
