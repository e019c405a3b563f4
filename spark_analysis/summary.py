"""summary.json: collected per-topic/overall results folded into one JSON document.

Everything here is plain Python over small collected rows. Means and ratios are
divided here from exact integer sums, so the numbers do not depend on how Spark
partitioned the data (local and cluster runs give identical summaries).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Scope = str | None  # a topic, or None for all topics
Rows = dict[Scope, list[dict[str, Any]]]

TOPIC_KEYS = (
    "published",
    "expected",
    "delivered",
    "delivery_ratio",
    "false_deliveries",
    "duplicates",
    "latency_ms_p50",
    "latency_ms_p99",
    "tree_depth_mean",
    "tree_depth_max",
    "forwards_per_delivery",
)


@dataclass
class ConsumerRows:
    """Durable consumers' collected rows (spark_analysis.consumers): consumer_counts,
    ack_latency_percentiles and lag_over_time, and the lag bins' width (None when the
    trace has no consumer)."""

    counts: list[dict[str, Any]] = field(default_factory=list)
    latency: list[dict[str, Any]] = field(default_factory=list)
    lag: list[dict[str, Any]] = field(default_factory=list)
    lag_bin_seconds: float | None = None


@dataclass
class Collected:
    """The small results the summary is built from, keyed by scope."""

    records: int
    lines: int
    bad_lines: int
    run: str | None
    published: Rows
    deliveries: Rows
    latency: Rows
    depth_hist: Rows
    hops_hist: Rows
    counts: Rows
    reach: Rows
    coverage: Rows
    lookup_hist: list[dict[str, Any]]
    modes: dict[str, int]  # mode -> nodes that announced it in node_up
    stress: dict[str, Any]
    bad_filters: int
    subscriptions: int
    match_errors: int
    bad_samples: list[dict[str, str]] = field(default_factory=list)
    bad_by_reason: dict[str, int] = field(default_factory=dict)
    #: recovery.node_recovery and recovery.dropped_by_reason rows.
    recovery_nodes: list[dict[str, Any]] = field(default_factory=list)
    recovery_dropped: list[dict[str, Any]] = field(default_factory=list)
    consumers: ConsumerRows = field(default_factory=ConsumerRows)

    @property
    def nodes(self) -> int:
        """Nodes that wrote at least one record (the node stress table has them all)."""
        return int(self.stress.get("nodes") or 0)


def ratio(num: float | None, den: float | None) -> float | None:
    """num/den, or None when there is nothing to divide by."""
    if num is None or not den:
        return None
    return num / den


def _one(rows: Rows, scope: Scope) -> dict[str, Any]:
    found = rows.get(scope) or [{}]
    return found[0]


def _hist(rows: Rows, scope: Scope, key: str) -> dict[str, int]:
    items = [(r[key], r["count"]) for r in rows.get(scope, []) if r.get(key) is not None]
    return {str(k): int(v) for k, v in sorted(items)}


def _percentile(rows: Rows, scope: Scope, permille: int) -> float | None:
    for r in rows.get(scope, []):
        if r["permille"] == permille:
            return float(r["latency_ms"])
    return None


def nearest_rank_in_histogram(hist: list[tuple[int, int]], permille: int) -> int | None:
    """Exact nearest-rank percentile from (value, count) pairs."""
    n = sum(c for _, c in hist)
    if not n:
        return None
    rank = max(1, (n * permille + 999) // 1000)
    seen = 0
    for value, count in sorted(hist):
        seen += count
        if seen >= rank:
            return value
    raise AssertionError("unreachable: rank <= n")


def lookup_summary(hist: list[dict[str, Any]]) -> dict[str, Any]:
    """Lookup figures from (hops, ok, count) rows.

    ``hops_*``: every lookup with a hop count, ok or not; ``path_length_*``: those with
    ``ok`` true only, as the Chord paper measures path length (a failed lookup's hops
    say how long it wandered, not how long a path is).
    """
    count = sum(r["count"] for r in hist)
    known = sum(r["count"] for r in hist if r["ok"] is not None)
    ok = sum(r["count"] for r in hist if r["ok"])
    hops = [(r["hops"], r["count"]) for r in hist if r["hops"] is not None]
    paths = [(r["hops"], r["count"]) for r in hist if r["hops"] is not None and r["ok"]]
    return {
        "count": count,
        "ok_rate": ratio(ok, known),
        "hops_mean": ratio(sum(h * c for h, c in hops), sum(c for _, c in hops)),
        "hops_p99": nearest_rank_in_histogram(hops, 990),
        "hops_max": max((h for h, _ in hops), default=None),
        "path_length_mean": ratio(sum(h * c for h, c in paths), sum(c for _, c in paths)),
        "path_length_p99": nearest_rank_in_histogram(paths, 990),
    }


def _depth(c: Collected, scope: Scope) -> dict[str, Any]:
    rows = c.depth_hist.get(scope, [])
    known = [(r["depth"], r["count"]) for r in rows if r["depth"] is not None]
    n = sum(cnt for _, cnt in known)
    return {
        "tree_nodes": sum(r["count"] for r in rows),
        "tree_detached": sum(r["count"] for r in rows if r["depth"] is None),
        "tree_depth_mean": ratio(sum(d * cnt for d, cnt in known), n),
        "tree_depth_max": max((d for d, _ in known), default=None),
    }


def _counted(c: Collected, scope: Scope, ev: str, field_: str = "count") -> int:
    return sum(int(r[field_]) for r in c.counts.get(scope, []) if r["ev"] == ev)


def _by_detail(c: Collected, scope: Scope, ev: str) -> dict[str, int]:
    rows = [r for r in c.counts.get(scope, []) if r["ev"] == ev and r["detail"] is not None]
    return {str(r["detail"]): int(r["count"]) for r in sorted(rows, key=lambda r: r["detail"])}


def scope_summary(c: Collected, scope: Scope) -> dict[str, Any]:
    """All metrics of one topic (or of all topics for ``None``)."""
    d = _one(c.deliveries, scope)
    expected = int(d.get("expected") or 0)
    delivered = int(d.get("delivered") or 0)
    depth = _depth(c, scope)
    fwd = _counted(c, scope, "forward")
    recvs = _counted(c, scope, "recv")
    cov = _one(c.coverage, scope)
    reach = _one(c.reach, scope)
    with_receivers = int(reach.get("events_with_receivers") or 0)
    coverage_events = int(cov.get("coverage_events") or 0)
    out: dict[str, Any] = {
        "published": int(_one(c.published, scope).get("published") or 0),
        "expected": expected,
        "delivered": delivered,
        "delivery_ratio": ratio(delivered, expected),
        "false_deliveries": int(d.get("false_deliveries") or 0),
        "duplicates": int(d.get("duplicates") or 0),
        "latency_ms_p50": _percentile(c.latency, scope, 500),
        "latency_ms_p99": _percentile(c.latency, scope, 990),
        "tree_depth_mean": depth["tree_depth_mean"],
        "tree_depth_max": depth["tree_depth_max"],
        "forwards_per_delivery": ratio(fwd, delivered),
        # Beyond the required keys:
        "replayed": int(d.get("replayed") or 0),
        "latency_ms_p90": _percentile(c.latency, scope, 900),
        "latency_ms_max": _percentile(c.latency, scope, 1000),
        "forwards": fwd,
        "tree_nodes": depth["tree_nodes"],
        "tree_detached": depth["tree_detached"],
        "tree_depth_histogram": _hist(c.depth_hist, scope, "depth"),
        "hops_histogram": _hist(c.hops_hist, scope, "hop"),
        "coverage_mean": ratio(cov.get("reached_sum"), coverage_events * c.nodes),
        "recvs": recvs,
        "redundancy": ratio(_counted(c, scope, "recv", "dups"), recvs),
        "repairs": _by_detail(c, scope, "repair"),
        "drops": _by_detail(c, scope, "drop"),
        "bimodal": {
            "events_with_receivers": with_receivers,
            "share_over_90": ratio(reach.get("events_over_90"), with_receivers),
            "share_under_10": ratio(reach.get("events_under_10"), with_receivers),
        },
    }
    return out


def recovery_summary(c: Collected) -> dict[str, Any]:
    """Durable-log recovery (spark_analysis.recovery): per node its latest start's load
    time (``ms``), topics, events and payload bytes loaded, its starts and slowest load
    (``ms_max``), and the stored data it dropped by kind of reason; overall, the nodes
    that recovered or dropped anything, their load times' mean and max, what their
    latest starts loaded, and the drops by reason."""
    nodes: dict[str, dict[str, Any]] = {}
    empty = {"starts": 0, "ms": None, "ms_max": None, "topics": 0, "events": 0, "bytes": 0}
    for row in c.recovery_nodes:
        nodes[row["node"]] = {k: row[k] for k in empty} | {"dropped": {}}
    dropped: dict[str, int] = {}
    for row in c.recovery_dropped:
        node = nodes.setdefault(row["node"], {**empty, "dropped": {}})
        node["dropped"][row["reason"]] = int(row["count"])
        dropped[row["reason"]] = dropped.get(row["reason"], 0) + int(row["count"])
    for node in nodes.values():
        node["dropped"] = dict(sorted(node["dropped"].items()))
    loads = [n["ms"] for n in nodes.values() if n["ms"] is not None]
    return {
        "nodes": len(nodes),
        "starts": sum(n["starts"] for n in nodes.values()),
        "ms_mean": ratio(sum(loads), len(loads)),
        "ms_max": max(
            (n["ms_max"] for n in nodes.values() if n["ms_max"] is not None), default=None
        ),
        "topics": sum(n["topics"] for n in nodes.values()),
        "events": sum(n["events"] for n in nodes.values()),
        "bytes": sum(n["bytes"] for n in nodes.values()),
        "dropped": dict(sorted(dropped.items())),
        "per_node": dict(sorted(nodes.items())),
    }


#: Per consumer and overall: counts of its expected events (TRACES.md, durable consumers).
CONSUMER_COUNTS = (
    "expected",
    "handled",
    "acknowledged",
    "acks",
    "acked_more_than_once",
    "terminated",
    "redelivered",
    "redeliveries",
    "dead_lettered",
    "excluded",
    "pending_at_delete",
    "lost",
)
LAG_SERIES = ("published", "acknowledged", "lag")


def _lag_series(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Lag rows of one consumer as columns in bin order: ts (bin ends) and counts."""
    ordered = sorted(rows, key=lambda r: r["bin"])
    return {key: [r[key] for r in ordered] for key in ("ts", *LAG_SERIES)}


def _ack_latency(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    found = {r["permille"]: float(r["latency_ms"]) for r in rows}
    return {"ack_latency_ms_p50": found.get(500), "ack_latency_ms_p99": found.get(990)}


def consumers_summary(c: Collected) -> dict[str, Any] | None:
    """Durable consumers: per consumer (``per_consumer`` {topic: {durable: ...}}) its
    members, counts, ack latency, whether none of its events was lost, and its lag
    series; overall the counts and lag summed over consumers and the ack latency over
    all their events. None when the trace has no consumer."""
    rows = c.consumers
    if not rows.counts:
        return None
    lags: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows.lag:
        lags.setdefault((r["topic"], r["durable"]), []).append(r)
    latencies: dict[tuple[str, str] | None, list[dict[str, Any]]] = {}
    for r in rows.latency:
        key = None if r["overall"] else (r["topic"], r["durable"])
        latencies.setdefault(key, []).append(r)
    per: dict[str, dict[str, Any]] = {}
    for r in sorted(rows.counts, key=lambda r: (r["topic"], r["durable"])):
        key = (r["topic"], r["durable"])
        per.setdefault(r["topic"], {})[r["durable"]] = {
            "first_ts": r["first_ts"],
            "deleted_ts": r["deleted_ts"],
            "members": int(r["members"]),
            "attaches": int(r["attaches"]),
            "detaches": int(r["detaches"]),
            **{k: int(r[k]) for k in CONSUMER_COUNTS},
            **_ack_latency(latencies.get(key, [])),
            "none_lost": r["lost"] == 0,
            "lag": _lag_series(lags.get(key, [])),
        }
    each = [d for by_name in per.values() for d in by_name.values()]
    totals = {k: sum(d[k] for d in each) for k in ("members", *CONSUMER_COUNTS)}
    # Every consumer's series has the same bins (one width, one span).
    lag = {"ts": each[0]["lag"]["ts"]} | {
        k: [sum(col) for col in zip(*(d["lag"][k] for d in each), strict=True)]
        for k in LAG_SERIES
    }
    return {
        "consumers": len(each),
        "lag_bin_seconds": rows.lag_bin_seconds,
        "overall": totals
        | _ack_latency(latencies.get(None, []))
        | {"none_lost": totals["lost"] == 0, "lag": lag},
        "per_consumer": per,
    }


def build_summary(c: Collected) -> dict[str, Any]:
    """The summary.json document (``consumers`` only when the trace has any)."""
    topics: set[str] = set()
    for rows in (c.published, c.deliveries, c.depth_hist, c.counts):
        topics.update(t for t in rows if t is not None)
    stress = c.stress
    nodes_stressed = c.nodes
    summary = {
        "records": c.records,
        "bad_lines": c.bad_lines,
        "lines": c.lines,
        "run": c.run,
        "nodes": c.nodes,
        "modes": dict(sorted(c.modes.items())),
        "subscriptions": c.subscriptions,
        "bad_filters": c.bad_filters,
        "match_errors": c.match_errors,
        "lookup": lookup_summary(c.lookup_hist),
        "node_stress": {
            "nodes": nodes_stressed,
            "forwards_mean": ratio(stress.get("forwards_sum"), nodes_stressed),
            "forwards_max": stress.get("forwards_max"),
            "children_mean": ratio(stress.get("children_sum"), nodes_stressed),
            "children_max": stress.get("children_max"),
        },
        "overall": scope_summary(c, None),
        "topics": {t: scope_summary(c, t) for t in sorted(topics)},
        "recovery": recovery_summary(c),
        "bad_lines_by_reason": c.bad_by_reason,
        "bad_line_samples": c.bad_samples,
    }
    consumers = consumers_summary(c)
    if consumers is not None:
        summary["consumers"] = consumers
    return summary


def _clean(value: Any) -> Any:
    # JSON has no NaN or Infinity: a value that cannot be computed is null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def summary_text(summary: dict[str, Any]) -> str:
    """summary.json's text."""
    return json.dumps(_clean(summary), indent=2, allow_nan=False) + "\n"
