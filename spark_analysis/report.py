"""report.html: one self-contained page (plots embedded as PNG data URIs, no CDN)."""

from __future__ import annotations

import base64
import html
import io
from collections import Counter
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: render to memory
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from spark_analysis.summary import TOPIC_KEYS

CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2rem auto;
       max-width: 1100px; color: #222; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
.meta { color: #666; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0; }
th, td { border: 1px solid #ddd; padding: 0.3rem 0.5rem; text-align: right; }
th { background: #f3f5f7; }
td:first-child, th:first-child { text-align: left; }
tr.overall td { font-weight: 600; background: #fafafa; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr)); gap: 1rem; }
figure { margin: 0; }
figure img { width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.85rem; }
code { background: #f3f5f7; padding: 0 0.2rem; }
"""


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(title: str, fig: Figure, caption: str) -> str:
    return (
        f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{_png(fig)}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def _bars(title: str, hist: dict[str, int], xlabel: str, ylabel: str = "count") -> Figure:
    fig, ax = plt.subplots(figsize=(6, 3.4))
    keys = sorted(hist, key=lambda k: float(k))
    ax.bar([str(k) for k in keys], [hist[k] for k in keys], color="#4c78a8")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if not keys:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    return fig


def _ratio_plot(summary: dict[str, Any]) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 3.4))
    topics = summary["topics"]
    names = [t for t in topics if topics[t]["delivery_ratio"] is not None]
    ax.bar(names, [topics[t]["delivery_ratio"] for t in names], color="#54a24b")
    overall = summary["overall"]["delivery_ratio"]
    if overall is not None:
        ax.axhline(overall, color="#e45756", linestyle="--", label=f"overall {overall:.3f}")
        ax.legend(loc="lower right")
    ax.set_ylim(0, 1.05)
    ax.set_title("Delivery ratio per topic")
    ax.set_ylabel("delivered / expected")
    ax.tick_params(axis="x", rotation=30)
    return fig


def _cdf_plot(cdf: dict[str | None, list[tuple[int, float]]]) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for scope, points in sorted(cdf.items(), key=lambda kv: (kv[0] is None, kv[0] or "")):
        xs = [v for _, v in points]
        ys = [p / 1000 for p, _ in points]
        label = "all topics" if scope is None else scope
        style = {"color": "black", "linewidth": 2} if scope is None else {"linewidth": 1}
        ax.step(xs, ys, where="post", label=label, **style)
    ax.set_title("Delivery latency CDF")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("share of deliveries")
    ax.set_ylim(0, 1.02)
    if cdf:
        ax.legend(fontsize="x-small", loc="lower right")
    return fig


def _stress_plot(stress: list[dict[str, int]], children: bool) -> Figure:
    fig, axes = plt.subplots(1, 2 if children else 1, figsize=(8 if children else 6, 3.4))
    left = axes[0] if children else axes
    fwd = Counter(r["forwards"] for r in stress)
    left.hist([r["forwards"] for r in stress], bins=min(40, max(1, len(fwd))), color="#f58518")
    left.set_title("forwards per node")
    left.set_xlabel("forward records")
    left.set_ylabel("nodes")
    if not children:
        return fig
    right = axes[1]
    kids = Counter(r["peak_children"] for r in stress)
    right.bar([str(k) for k in sorted(kids)], [kids[k] for k in sorted(kids)], color="#72b7b2")
    right.set_title("children per node (most at once)")
    right.set_xlabel("children")
    return fig


def _lookup_plot(rows: list[dict[str, Any]]) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 3.4))
    hops = sorted({r["hops"] for r in rows if r["hops"] is not None})
    ok = {r["hops"]: r["count"] for r in rows if r["ok"]}
    failed: Counter[int] = Counter()
    for r in rows:
        if not r["ok"]:
            failed[r["hops"]] += r["count"]
    labels = [str(h) for h in hops]
    ok_counts = [ok.get(h, 0) for h in hops]
    ax.bar(labels, ok_counts, color="#4c78a8", label="ok")
    failed_counts = [failed.get(h, 0) for h in hops]
    ax.bar(labels, failed_counts, bottom=ok_counts, color="#e45756", label="failed")
    ax.set_title("Lookup hops")
    ax.set_xlabel("hops")
    ax.set_ylabel("lookups")
    if hops:
        # The stacked bars' bottoms are sticky edges, which can keep autoscaling from
        # leaving room above the tallest stack: the limit is set from the totals.
        tallest = max(o + f for o, f in zip(ok_counts, failed_counts, strict=True))
        ax.set_ylim(0, max(1, tallest) * 1.08)
        ax.legend()
    return fig


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def summary_table(summary: dict[str, Any]) -> str:
    head = "".join(f"<th>{k.replace('_', ' ')}</th>" for k in TOPIC_KEYS)
    rows = [
        '<tr class="overall"><td>all topics</td>'
        + "".join(f"<td>{_fmt(summary['overall'][k])}</td>" for k in TOPIC_KEYS)
        + "</tr>"
    ]
    for topic, s in summary["topics"].items():
        rows.append(
            f"<tr><td>{html.escape(topic)}</td>"
            + "".join(f"<td>{_fmt(s[k])}</td>" for k in TOPIC_KEYS)
            + "</tr>"
        )
    return f"<table><tr><th>topic</th>{head}</tr>{''.join(rows)}</table>"


def _kv_table(items: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{_fmt(v)}</td></tr>" for k, v in items.items()
    )
    return f"<table>{rows}</table>"


RECOVERY_COLUMNS = ("starts", "ms", "ms_max", "topics", "events", "bytes")


def recovery_section(summary: dict[str, Any]) -> str:
    """Each node that recovered durable logs or dropped stored data at a start, slowest
    latest load first; empty when none did (the section is not shown)."""
    recovery = summary.get("recovery") or {}
    nodes: dict[str, dict[str, Any]] = recovery.get("per_node") or {}
    if not nodes:
        return ""

    def slowest_first(item: tuple[str, dict[str, Any]]) -> tuple[bool, float, str]:
        ms = item[1]["ms"]
        return ms is None, -(ms or 0.0), item[0]

    def dropped(counts: dict[str, int]) -> str:
        return ", ".join(f"{k}: {v}" for k, v in counts.items()) or "-"

    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "node",
            "starts",
            "load ms (latest start)",
            "slowest load ms",
            "topics",
            "events",
            "payload bytes",
            "dropped",
        )
    )
    rows = "".join(
        f"<tr><td>{html.escape(node)}</td>"
        + "".join(f"<td>{_fmt(n[k])}</td>" for k in RECOVERY_COLUMNS)
        + f"<td>{html.escape(dropped(n['dropped']))}</td></tr>"
        for node, n in sorted(nodes.items(), key=slowest_first)
    )
    return (
        "<h2>Recovery at start</h2>"
        f'<p class="meta">Durable topic logs loaded by {recovery["nodes"]} nodes over '
        f"{recovery['starts']} starts (mean load {_fmt(recovery['ms_mean'])} ms); stored "
        f"data dropped: {html.escape(dropped(recovery['dropped']))}.</p>"
        f"<table><tr>{head}</tr>{rows}</table>"
    )


CONSUMER_COLUMNS = {
    "members": "members",
    "expected": "expected",
    "acknowledged": "acknowledged",
    "acked_more_than_once": "acked more than once",
    "redelivered": "redelivered",
    "dead_lettered": "dead-lettered",
    "terminated": "terminated",
    "excluded": "excluded (too old)",
    "pending_at_delete": "pending at delete",
    "lost": "lost",
    "ack_latency_ms_p50": "ack ms p50",
    "ack_latency_ms_p99": "ack ms p99",
}


def _lag_plot(consumers: dict[str, Any]) -> Figure:
    fig, ax = plt.subplots(figsize=(8, 3.4))
    # Seconds from the first bin's start: daemons' ts are epoch seconds.
    start = consumers["overall"]["lag"]["ts"][0] - consumers["lag_bin_seconds"]
    for topic, by_name in consumers["per_consumer"].items():
        for name, c in by_name.items():
            xs = [t - start for t in c["lag"]["ts"]]
            ax.plot(xs, c["lag"]["lag"], label=f"{topic} / {name}", linewidth=1.2)
    ax.set_title("Consumer lag (published minus acknowledged)")
    ax.set_xlabel(f"time (s, bins of {consumers['lag_bin_seconds']:g} s)")
    ax.set_ylabel("events")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts of events
    ax.legend(fontsize="x-small", loc="upper left")
    return fig


def consumers_section(summary: dict[str, Any]) -> str:
    """Durable consumers: the delivery check, a row per consumer and the lag plot;
    empty when the trace has no consumer (the section is not shown)."""
    consumers = summary.get("consumers")
    if not consumers:
        return ""
    overall = consumers["overall"]
    head = "".join(f"<th>{h}</th>" for h in ("topic", "consumer", *CONSUMER_COLUMNS.values()))

    def row(topic: str, name: str, c: dict[str, Any], css: str = "") -> str:
        cells = "".join(f"<td>{_fmt(c[k])}</td>" for k in CONSUMER_COLUMNS)
        return f"<tr{css}><td>{html.escape(topic)}</td><td>{html.escape(name)}</td>{cells}</tr>"

    rows = row("all", f"{consumers['consumers']} consumers", overall, ' class="overall"') + "".join(
        row(topic, name, c)
        for topic, by_name in consumers["per_consumer"].items()
        for name, c in by_name.items()
    )
    verdict = "none lost" if overall["none_lost"] else f"{overall['lost']} lost"
    figure = _figure(
        "consumer lag",
        _lag_plot(consumers),
        "Events published on each consumer's topic minus those it acknowledged, at the "
        "end of each bin.",
    )
    return (
        "<h2>Durable consumers</h2>"
        f'<p class="meta">Delivery check: {verdict} of {overall["expected"]} expected events '
        f"(handled: acknowledged, terminated or dead-lettered: {overall['handled']}; "
        f"excluded, dropped as too old: {overall['excluded']}; pending when their consumer "
        f"was deleted: {overall['pending_at_delete']}).</p>"
        f"<table><tr>{head}</tr>{rows}</table>{figure}"
    )


STRUCTURED, UNSTRUCTURED = "structured", "unstructured"


def shown_modes(summary: dict[str, Any]) -> set[str]:
    """The modes whose metrics the report shows: those some node announced in its
    ``node_up`` (a tree run has no gossip coverage to speak of, a gossip run no trees
    or lookups); both when no node announced any."""
    announced = set(summary.get("modes") or {})
    return announced & {STRUCTURED, UNSTRUCTURED} or {STRUCTURED, UNSTRUCTURED}


def render(summary: dict[str, Any], series: dict[str, Any]) -> str:
    """The report page as text."""
    overall = summary["overall"]
    modes = shown_modes(summary)
    structured = STRUCTURED in modes
    tree_figure = [
        _figure(
            "tree depth",
            _bars(
                "Tree depth (all topics)", overall["tree_depth_histogram"], "depth", "tree members"
            ),
            "Members of every topic tree at the end of the trace, by parent edges to "
            "the root; detached members (cycle or missing parent): "
            f"{overall['tree_detached']}.",
        )
    ]
    figures = [
        *(tree_figure if structured else []),
        _figure(
            "delivery ratio",
            _ratio_plot(summary),
            "Distinct expected deliveries that happened, over expected ones.",
        ),
        _figure(
            "latency",
            _cdf_plot(series.get("latency_cdf", {})),
            "First delivery's ts minus the publish ts; exact nearest-rank points.",
        ),
        _figure(
            "hops",
            _bars(
                "Hops of deliveries (all topics)", overall["hops_histogram"], "hop", "deliveries"
            ),
            "Hop count of each expected delivery's first deliver record.",
        ),
        _figure(
            "node stress",
            _stress_plot(series.get("node_stress", []), children=structured),
            "Forward records sent by each node"
            + ("; the most children each node had at once." if structured else "."),
        ),
    ]
    if structured:
        figures.append(
            _figure(
                "lookup hops",
                _lookup_plot(series.get("lookup_hops", [])),
                "DHT lookups and routes by hops, ok or failed; path length counts the ok "
                "ones only.",
            )
        )
    lookup = summary["lookup"]
    general: dict[str, Any] = {
        "records": summary["records"],
        "bad lines": summary["bad_lines"],
        "nodes": summary["nodes"],
        "modes": ", ".join(f"{k}: {v}" for k, v in (summary.get("modes") or {}).items()) or None,
        "subscriptions": summary["subscriptions"],
        "subscriptions with a bad filter": summary["bad_filters"],
    }
    if structured:
        general |= {
            "lookups": lookup["count"],
            "lookup ok rate": lookup["ok_rate"],
            "lookup path length mean (ok lookups)": lookup.get("path_length_mean"),
            "lookup path length p99 (ok lookups)": lookup.get("path_length_p99"),
        }
    if UNSTRUCTURED in modes:
        general |= {
            "gossip coverage (mean share of nodes)": overall["coverage_mean"],
            "recv redundancy (dup / all recv)": overall["redundancy"],
            "events over 90% of receivers": overall["bimodal"]["share_over_90"],
            "events under 10% of receivers": overall["bimodal"]["share_under_10"],
        }
    general["repairs"] = ", ".join(f"{k}: {v}" for k, v in overall["repairs"].items()) or None
    samples = summary.get("bad_line_samples") or []
    bad = ""
    if samples:
        items = "".join(
            f"<tr><td>{html.escape(s['file'])}</td><td>{html.escape(s['reason'])}</td>"
            f"<td><code>{html.escape(s['line'][:120])}</code></td></tr>"
            for s in samples
        )
        bad = f"<h2>Malformed lines (first {len(samples)})</h2><table>{items}</table>"
    run = f" — run {html.escape(summary['run'])}" if summary.get("run") else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Trace analysis{run}</title><style>{CSS}</style></head>
<body>
<h1>Trace analysis{run}</h1>
<p class="meta">{summary["records"]} records from {summary["nodes"]} nodes,
{summary["bad_lines"]} malformed lines.</p>
<h2>Summary</h2>
{summary_table(summary)}
{_kv_table(general)}
<h2>Plots</h2>
<div class="grid">{"".join(figures)}</div>
{recovery_section(summary)}
{consumers_section(summary)}
{bad}
</body></html>
"""
