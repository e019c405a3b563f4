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
from spark_analysis.stats import collect_results, scoped
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
    return _only([row.asDict() for row in df.collect()])


def _only(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The one row of a one-row result ({} when it has none)."""
    return rows[0] if rows else {}


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
    jobs), so three chains share the executor: trees, then recovery, then durable
    consumers (which need the published events); expected receivers, the deliveries
    against them and their latency; cost, then gossip (which needs the published
    events). What one chain needs from another comes through a Future. Each chain
    collects its small results together, in one query (``stats.collect_results``), and
    fills in its own fields; ``persisted`` are unpersisted once all are done.
    """

    def __init__(self, loaded: LoadResult, out: OutDir, step: Callable[[str], None]) -> None:
        self.loaded, self.out, self.step = loaded, out, step
        self.pubs: Future[DataFrame] = Future()
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
        results = {"depth_hist": trees.depth_histogram(depths)}
        self.step(STEPS[7])
        if not self.absent(recovery.RECOVERY_EVS):
            starts = recovery.recovery_starts(self.records)
            results["recovery_nodes"] = recovery.node_recovery(starts)
            results["recovery_dropped"] = recovery.dropped_by_reason(self.records)
        got = collect_results(results)
        r = self.results
        r.depth_hist = scoped(got["depth_hist"])
        r.recovery_nodes = got.get("recovery_nodes", [])
        r.recovery_dropped = got.get("recovery_dropped", [])
        self.durable_consumers()

    def absent(self, evs: tuple[str, ...]) -> bool:
        """No record of any type in ``evs`` was loaded: a step over them has nothing to
        read, and its empty results need no Spark job (most runs have no recovery and
        no durable consumers)."""
        return self.loaded.record_types.isdisjoint(evs)

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
        # Read twice: for the pairs whose filter failed, and for the expected deliveries.
        matched = self.keep(expected.expected_receivers(pubs, subs))
        expected_rows = matched.filter(F.col("match_error").isNull())

        self.step(STEPS[3])
        keys = delivery.delivery_keys(self.records)
        # Kept without the node and sub (no step reads them after the join): two
        # fewer columns to copy into the cache saved 0.6 s of CPU at 10M records.
        outcomes = self.keep(delivery.delivery_outcomes(expected_rows, keys).drop("node", "sub"))

        self.step(STEPS[4])
        got = collect_results(
            {
                "subscriptions": expected.subscription_counts(subs),
                "match_errors": expected.match_error_count(matched),
                "deliveries": delivery.delivery_counts(outcomes),
                "reach": delivery.reach_shares(delivery.per_event(outcomes)),
                "hops": delivery.hop_histogram(outcomes),
                "published": delivery.published_counts(pubs),
                "latency": latency.latency_percentiles(outcomes),
            }
        )
        r = self.results
        sub_counts = _only(got["subscriptions"])
        r.bad_filters = int(sub_counts.get("bad_filters") or 0)
        r.subscriptions = int(sub_counts.get("subscriptions") or 0)
        r.match_errors = int(_only(got["match_errors"]).get("match_errors") or 0)
        r.deliveries = scoped(got["deliveries"])
        r.reach = scoped(got["reach"])
        r.hops_hist = scoped(got["hops"])
        r.published = scoped(got["published"])
        r.latency = scoped(got["latency"])

    def cost_and_gossip(self) -> None:
        self.step(STEPS[5])
        tally = self.tally
        stress_df = self.keep(cost.node_stress(self.records, tally))
        _write_table(stress_df, self.out, "node_stress")

        self.step(STEPS[6])
        pubs, nodes = self.pubs.result(), self.loaded.nodes
        got = collect_results(
            {
                "stress": cost.stress_stats(stress_df),
                "node_stress": stress_df.select("forwards", "peak_children"),
                "lookups": cost.lookup_histogram(cost.lookups(self.records)),
                "modes": cost.node_modes(self.records),
                "counts": gossip.record_counts(self.records, tally),
                "coverage": gossip.coverage_stats(gossip.event_reach(self.records, pubs, nodes)),
            }
        )
        r = self.results
        r.stress = _only(got["stress"])
        r.node_stress = got["node_stress"]
        r.lookup_hist = got["lookups"]
        r.modes = {row["mode"]: row["nodes"] for row in got["modes"]}
        r.counts = scoped(got["counts"])
        r.coverage = scoped(got["coverage"])

    def _chain(self, chain: Callable[[], None]) -> None:
        try:
            chain()
        except BaseException:
            # Whoever waits for what this chain would have made must not wait forever.
            for future in (self.pubs,):
                if not future.done():
                    future.set_exception(_UpstreamFailed())
            raise

    def run(self) -> _Results:
        chains = (self.deliveries, self.cost_and_gossip, self.trees)
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
