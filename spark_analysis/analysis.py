"""The whole analysis: load, compute every metric, write tables, summary and report."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_analysis import cost, delivery, expected, gossip, latency, trees
from spark_analysis.load import LoadResult, load_traces
from spark_analysis.stats import rows_by_scope
from spark_analysis.summary import Collected, build_summary, write_summary

STEPS = (
    "reading traces",
    "tree depths",
    "expected receivers",
    "deliveries",
    "latency",
    "cost",
    "gossip",
    "report",
)


class Progress:
    """One line on stderr, rewritten per step, only when stderr is a terminal."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.started = time.monotonic()
        self.step = 0

    def __call__(self, name: str) -> None:
        self.step += 1
        if self.enabled:
            elapsed = time.monotonic() - self.started
            line = f"[{self.step}/{len(STEPS)}] {name} ({elapsed:.0f}s)"
            self.stream.write(f"\r\033[K{line}")
            self.stream.flush()

    def done(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()


@dataclass
class AnalysisResult:
    summary: dict[str, Any]
    out_dir: Path
    summary_path: Path
    report_path: Path | None
    seconds: float
    series: dict[str, Any] = field(default_factory=dict)


def _first_row(df: DataFrame) -> dict[str, Any]:
    rows = df.collect()
    return rows[0].asDict() if rows else {}


def _write_table(df: DataFrame, out_dir: Path, name: str) -> None:
    df.coalesce(1).write.mode("overwrite").parquet(str(out_dir / "tables" / name))


def run_analysis(
    spark: SparkSession,
    traces: str,
    out_dir: str | Path,
    run: str | None = None,
    progress: Callable[[str], None] | None = None,
    report: bool = True,
) -> AnalysisResult:
    """Analyze the traces under ``traces`` and write everything into ``out_dir``."""
    started = time.monotonic()
    step = progress or (lambda _name: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    step(STEPS[0])
    loaded: LoadResult = load_traces(spark, traces, out, run)
    records = loaded.records

    step(STEPS[1])
    depths = trees.tree_depths(trees.tree_members(records)).persist(StorageLevel.MEMORY_AND_DISK)
    _write_table(depths, out, "tree_depths")
    depth_hist = rows_by_scope(trees.depth_histogram(depths))

    step(STEPS[2])
    pubs = expected.publishes(records).persist(StorageLevel.MEMORY_AND_DISK)
    subs = expected.check_filters(expected.subscriptions(records)).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    sub_counts = _first_row(
        subs.agg(
            F.count(F.lit(1)).alias("subscriptions"),
            F.count_if(F.col("filter_error").isNotNull()).alias("bad_filters"),
        )
    )
    matched = expected.expected_receivers(pubs, subs).persist(StorageLevel.MEMORY_AND_DISK)
    match_errors = matched.filter(F.col("match_error").isNotNull()).count()
    expected_rows = matched.filter(F.col("match_error").isNull())

    step(STEPS[3])
    outcomes = delivery.delivery_outcomes(expected_rows, delivery.delivery_keys(records)).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    deliveries = rows_by_scope(delivery.delivery_counts(outcomes))
    matched.unpersist()
    reach = rows_by_scope(delivery.reach_shares(delivery.per_event(outcomes)))
    hops_hist = rows_by_scope(delivery.hop_histogram(outcomes))
    published = rows_by_scope(delivery.published_counts(pubs))

    step(STEPS[4])
    lat = rows_by_scope(latency.latency_percentiles(outcomes))

    step(STEPS[5])
    tally = loaded.record_tally.persist(StorageLevel.MEMORY_AND_DISK)
    stress_df = cost.node_stress(records, tally).persist(StorageLevel.MEMORY_AND_DISK)
    _write_table(stress_df, out, "node_stress")
    stress = _first_row(cost.stress_stats(stress_df))
    lookup_hist = [r.asDict() for r in cost.lookup_histogram(cost.lookups(records)).collect()]

    step(STEPS[6])
    counts = rows_by_scope(gossip.record_counts(records, tally))
    coverage = rows_by_scope(
        gossip.coverage_stats(gossip.event_reach(records, pubs, stress_df.select("node")))
    )

    collected = Collected(
        records=loaded.record_count,
        lines=loaded.lines,
        bad_lines=loaded.bad_lines,
        run=run,
        published=published,
        deliveries=deliveries,
        latency=lat,
        depth_hist=depth_hist,
        hops_hist=hops_hist,
        counts=counts,
        reach=reach,
        coverage=coverage,
        lookup_hist=lookup_hist,
        stress=stress,
        bad_filters=int(sub_counts.get("bad_filters") or 0),
        subscriptions=int(sub_counts.get("subscriptions") or 0),
        match_errors=int(match_errors),
        bad_samples=loaded.bad_samples,
        bad_by_reason=loaded.bad_by_reason,
    )
    summary = build_summary(collected)
    summary_path = out / "summary.json"
    write_summary(summary, summary_path)

    series: dict[str, Any] = {
        "latency_cdf": {
            scope: sorted((r["permille"], r["latency_ms"]) for r in rows)
            for scope, rows in lat.items()
        },
        "node_stress": [r.asDict() for r in stress_df.select("forwards", "children").collect()],
        "lookup_hops": lookup_hist,
    }
    for df in (depths, pubs, subs, outcomes, tally, stress_df):
        df.unpersist()

    report_path = None
    if report:
        step(STEPS[7])
        from spark_analysis.report import write_report

        report_path = write_report(summary, series, out)
    return AnalysisResult(
        summary, out, summary_path, report_path, time.monotonic() - started, series
    )
