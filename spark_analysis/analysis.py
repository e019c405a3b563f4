"""The whole analysis: load, compute every metric, write tables, summary and report."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TextIO

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_analysis import consumers, cost, delivery, expected, gossip, latency, recovery, trees
from spark_analysis.load import LoadResult, load_traces
from spark_analysis.location import OutDir
from spark_analysis.stats import rows_by_scope
from spark_analysis.summary import Collected, ConsumerRows, Rows, build_summary, summary_text

STEPS = (
    "reading traces",
    "tree depths",
    "expected receivers",
    "deliveries",
    "latency",
    "cost",
    "gossip",
    "recovery",
    "durable consumers",
    "report",
)


class Progress:
    """One line on stderr, rewritten per step begun, only when stderr is a terminal.

    Steps run side by side (:class:`_Steps`), so the line counts the steps begun and
    names the latest.
    """

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.started = time.monotonic()
        self.step = 0
        self._lock = threading.Lock()

    def __call__(self, name: str) -> None:
        with self._lock:
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
    out_dir: str
    summary_path: str  # a local path, or a URI when the output is not local
    report_path: str | None
    seconds: float
    series: dict[str, Any] = field(default_factory=dict)


def _first_row(df: DataFrame) -> dict[str, Any]:
    rows = df.collect()
    return rows[0].asDict() if rows else {}


def _write_table(df: DataFrame, out: OutDir, name: str) -> None:
    df.coalesce(1).write.mode("overwrite").parquet(out.path("tables", name))


@dataclass(slots=True)
class _Results:
    """What the metric steps collect; each field is set by one chain. Slots make a
    misspelt field fail where it is set; :meth:`unset` finds one a step forgot."""

    published: Rows | None = None
    deliveries: Rows | None = None
    latency: Rows | None = None
    depth_hist: Rows | None = None
    hops_hist: Rows | None = None
    counts: Rows | None = None
    reach: Rows | None = None
    coverage: Rows | None = None
    lookup_hist: list[dict[str, Any]] | None = None
    modes: dict[str, int] | None = None
    stress: dict[str, Any] | None = None
    node_stress: list[dict[str, Any]] | None = None
    bad_filters: int | None = None
    subscriptions: int | None = None
    match_errors: int | None = None
    recovery_nodes: list[dict[str, Any]] | None = None
    recovery_dropped: list[dict[str, Any]] | None = None
    consumers: ConsumerRows | None = None

    def unset(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is None]


class _UpstreamFailed(Exception):
    """A step this one waits for failed (its own error is the one reported)."""


class _Steps:
    """The metric steps after loading, as chains run side by side.

    One Spark job rarely keeps both cores busy (small tasks, the driver planning between
    jobs), so four chains share the executor: trees, then recovery, then durable
    consumers (which need the published events); expected receivers,
    then the deliveries against them; cost, then gossip (which needs the published
    events); latency (which needs the deliveries). What one chain needs from another comes
    through a Future. Each fills in its own fields; ``persisted`` are unpersisted once
    all are done.
    """

    def __init__(self, loaded: LoadResult, out: OutDir, step: Callable[[str], None]) -> None:
        self.loaded, self.out, self.step = loaded, out, step
        self.pubs: Future[DataFrame] = Future()
        self.outcomes: Future[DataFrame] = Future()
        self.persisted: list[DataFrame] = []
        self.results = _Results()
        self.records = loaded.records
        # Counted while loading, for the trees' and the cost chain's use.
        self.tally = loaded.tally

    def keep(self, df: DataFrame) -> DataFrame:
        self.persisted.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return self.persisted[-1]

    def trees(self) -> None:
        self.step(STEPS[1])
        last_event = trees.last_event_from_tally(self.tally)
        depths = self.keep(trees.tree_depths(trees.tree_members(self.records, last_event)))
        _write_table(depths, self.out, "tree_depths")
        self.results.depth_hist = rows_by_scope(trees.depth_histogram(depths))
        self.recovery()

    def absent(self, evs: tuple[str, ...]) -> bool:
        """No record of any type in ``evs`` was loaded: a step over them has nothing to
        read, and its empty results need no Spark job (most runs have no recovery and
        no durable consumers)."""
        return self.loaded.record_types.isdisjoint(evs)

    def recovery(self) -> None:
        self.step(STEPS[7])
        r = self.results
        r.recovery_nodes, r.recovery_dropped = [], []
        if not self.absent(recovery.RECOVERY_EVS):
            starts = recovery.recovery_starts(self.records)
            r.recovery_nodes = [row.asDict() for row in recovery.node_recovery(starts).collect()]
            r.recovery_dropped = [
                row.asDict() for row in recovery.dropped_by_reason(self.records).collect()
            ]
        self.durable_consumers()

    def durable_consumers(self) -> None:
        self.step(STEPS[8])
        if self.absent(consumers.CONSUMER_EVS):
            self.results.consumers = ConsumerRows()
            return
        crecs = self.keep(consumers.consumer_records(self.records))
        found = self.keep(consumers.consumers_seen(crecs))
        if found.isEmpty():  # most runs: the summary and report say nothing of consumers
            self.results.consumers = ConsumerRows()
            return
        pubs = self.pubs.result()
        outcomes = self.keep(
            consumers.consumer_outcomes(
                found,
                consumers.event_handling(crecs),
                consumers.reliable_events(self.records, pubs),
                pubs,
                consumers.excluded_events(self.records),
            )
        )
        span = _first_row(consumers.lag_span(pubs, crecs, found))
        t_min, t_max = span["t_min"], span["t_max"]
        width = consumers.lag_bin_width(t_max - t_min)
        lag = consumers.lag_over_time(pubs, outcomes, found, t_min, t_max, width)

        def rows(df: DataFrame) -> list[dict[str, Any]]:
            return [row.asDict() for row in df.collect()]

        self.results.consumers = ConsumerRows(
            counts=rows(consumers.consumer_counts(outcomes, found)),
            latency=rows(consumers.ack_latency_percentiles(outcomes)),
            lag=rows(lag),
            lag_bin_seconds=width,
        )

    def deliveries(self) -> None:
        self.step(STEPS[2])
        pubs = self.keep(expected.publishes(self.records))
        self.pubs.set_result(pubs)
        subs = self.keep(expected.check_filters(expected.subscriptions(self.records)))
        sub_counts = _first_row(
            subs.agg(
                F.count(F.lit(1)).alias("subscriptions"),
                F.count_if(F.col("filter_error").isNotNull()).alias("bad_filters"),
            )
        )
        matched = expected.expected_receivers(pubs, subs).persist(StorageLevel.MEMORY_AND_DISK)
        r = self.results
        r.match_errors = matched.filter(F.col("match_error").isNotNull()).count()
        r.bad_filters = int(sub_counts.get("bad_filters") or 0)
        r.subscriptions = int(sub_counts.get("subscriptions") or 0)
        expected_rows = matched.filter(F.col("match_error").isNull())

        self.step(STEPS[3])
        keys = delivery.delivery_keys(self.records)
        # Kept without the node and sub (no step reads them after the join): two
        # fewer columns to copy into the cache saved 0.6 s of CPU at 10M records.
        outcomes = self.keep(delivery.delivery_outcomes(expected_rows, keys).drop("node", "sub"))
        r.deliveries = rows_by_scope(delivery.delivery_counts(outcomes))
        self.outcomes.set_result(outcomes)
        matched.unpersist()
        r.reach = rows_by_scope(delivery.reach_shares(delivery.per_event(outcomes)))
        r.hops_hist = rows_by_scope(delivery.hop_histogram(outcomes))
        r.published = rows_by_scope(delivery.published_counts(pubs))

    def latency(self) -> None:
        outcomes = self.outcomes.result()
        self.step(STEPS[4])
        self.results.latency = rows_by_scope(latency.latency_percentiles(outcomes))

    def cost_and_gossip(self) -> None:
        self.step(STEPS[5])
        tally = self.tally
        stress_df = self.keep(cost.node_stress(self.records, tally))
        _write_table(stress_df, self.out, "node_stress")
        r = self.results
        r.stress = _first_row(cost.stress_stats(stress_df))
        looks = cost.lookup_histogram(cost.lookups(self.records)).collect()
        r.lookup_hist = [row.asDict() for row in looks]
        r.node_stress = [
            row.asDict() for row in stress_df.select("forwards", "peak_children").collect()
        ]
        r.modes = {row["mode"]: row["nodes"] for row in cost.node_modes(self.records).collect()}

        self.step(STEPS[6])
        r.counts = rows_by_scope(gossip.record_counts(self.records, tally))
        pubs, nodes = self.pubs.result(), stress_df.select("node")
        reach = gossip.event_reach(self.records, pubs, nodes)
        r.coverage = rows_by_scope(gossip.coverage_stats(reach))

    def _chain(self, chain: Callable[[], None]) -> None:
        try:
            chain()
        except BaseException:
            # Whoever waits for what this chain would have made must not wait forever.
            for future in (self.pubs, self.outcomes):
                if not future.done():
                    future.set_exception(_UpstreamFailed())
            raise

    def run(self) -> _Results:
        chains = (self.deliveries, self.cost_and_gossip, self.trees, self.latency)
        try:
            with ThreadPoolExecutor(len(chains), thread_name_prefix="analysis") as pool:
                ran = [pool.submit(self._chain, chain) for chain in chains]
            errors = [e for e in (f.exception() for f in ran) if e is not None]
            if errors:
                raise next((e for e in errors if not isinstance(e, _UpstreamFailed)), errors[0])
        finally:
            for df in self.persisted:
                df.unpersist()
        if unset := self.results.unset():
            raise RuntimeError(f"the analysis steps left {', '.join(unset)} unset")
        return self.results


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
    out = OutDir(spark, out_dir)
    out.prepare()

    step(STEPS[0])
    loaded: LoadResult = load_traces(spark, traces, out, run)
    r = _Steps(loaded, out, step).run()

    collected = Collected(
        records=loaded.record_count,
        lines=loaded.lines,
        bad_lines=loaded.bad_lines,
        run=run,
        bad_samples=loaded.bad_samples,
        bad_by_reason=loaded.bad_by_reason,
        # run() has checked that none of these is None.
        published=r.published,
        deliveries=r.deliveries,
        latency=r.latency,
        depth_hist=r.depth_hist,
        hops_hist=r.hops_hist,
        counts=r.counts,
        reach=r.reach,
        coverage=r.coverage,
        lookup_hist=r.lookup_hist,
        modes=r.modes,
        stress=r.stress,
        bad_filters=r.bad_filters,
        subscriptions=r.subscriptions,
        match_errors=r.match_errors,
        recovery_nodes=r.recovery_nodes,
        recovery_dropped=r.recovery_dropped,
        consumers=r.consumers,
    )
    summary = build_summary(collected)
    summary_path = out.write_text("summary.json", summary_text(summary))

    series: dict[str, Any] = {
        "latency_cdf": {
            scope: sorted((row["permille"], row["latency_ms"]) for row in rows)
            for scope, rows in collected.latency.items()
        },
        "node_stress": r.node_stress,
        "lookup_hops": collected.lookup_hist,
    }

    report_path = None
    if report:
        step(STEPS[-1])
        from spark_analysis.report import render

        report_path = out.write_text("report.html", render(summary, series))
    return AnalysisResult(
        summary, out.location, summary_path, report_path, time.monotonic() - started, series
    )
