"""summary.json's lookup figures and report.html's choices, on small hand-made inputs."""

from __future__ import annotations

import re
from typing import Any

import pytest

from spark_analysis.report import _lookup_plot, render
from spark_analysis.summary import lookup_summary


def test_path_length_counts_ok_lookups_only() -> None:
    hist = [
        {"hops": 2, "ok": True, "count": 3},
        {"hops": 4, "ok": True, "count": 1},
        {"hops": 30, "ok": False, "count": 2},  # gave up after wandering
        {"hops": None, "ok": False, "count": 1},
        {"hops": 5, "ok": None, "count": 1},
    ]
    got = lookup_summary(hist)
    assert got["count"] == 8
    assert got["ok_rate"] == 4 / 7  # of the lookups that say ok or not
    assert got["path_length_mean"] == (2 * 3 + 4) / 4
    assert got["path_length_p99"] == 4
    # every lookup with hops, as before
    assert got["hops_mean"] == (2 * 3 + 4 + 30 * 2 + 5) / 7 and got["hops_p99"] == 30
    assert lookup_summary([])["path_length_mean"] is None


def test_lookup_bars_stay_inside_their_axis() -> None:
    rows = [{"hops": 3, "ok": True, "count": 52_000}, {"hops": 3, "ok": False, "count": 500}]
    rows += [{"hops": 12, "ok": False, "count": 30_000}, {"hops": 2, "ok": True, "count": 40_000}]
    fig = _lookup_plot(rows)
    low, high = fig.axes[0].get_ylim()
    assert low == 0 and high > 52_500 * 1.05


def _summary(modes: dict[str, int]) -> dict[str, Any]:
    scope: dict[str, Any] = {
        "published": 1,
        "expected": 1,
        "delivered": 1,
        "delivery_ratio": 1.0,
        "false_deliveries": 0,
        "duplicates": 0,
        "latency_ms_p50": 1.0,
        "latency_ms_p99": 1.0,
        "tree_depth_mean": 1.0,
        "tree_depth_max": 1,
        "forwards_per_delivery": 1.0,
        "tree_depth_histogram": {"1": 1},
        "tree_detached": 0,
        "hops_histogram": {"1": 1},
        "coverage_mean": 0.5,
        "redundancy": 0.25,
        "bimodal": {"share_over_90": 0.75, "share_under_10": 0.125},
        "repairs": {},
    }
    return {
        "records": 3,
        "bad_lines": 0,
        "nodes": 2,
        "modes": modes,
        "subscriptions": 1,
        "bad_filters": 0,
        "lookup": lookup_summary([{"hops": 3, "ok": True, "count": 2}]),
        "overall": scope,
        "topics": {"t": scope},
    }


SERIES = {
    "latency_cdf": {None: [(500, 1.0), (1000, 1.0)]},
    "node_stress": [{"forwards": 1, "peak_children": 2}, {"forwards": 0, "peak_children": 0}],
    "lookup_hops": [{"hops": 3, "ok": True, "count": 2}],
}
GOSSIP_ROWS = ("gossip coverage", "events over 90% of receivers", "recv redundancy")
STRUCTURED_ROWS = ("lookup path length mean (ok lookups)", "lookup ok rate")


@pytest.mark.parametrize(
    ("modes", "gossip", "structured", "figures"),
    [
        ({"structured": 2}, False, True, 6),
        ({"unstructured": 2}, True, False, 4),
        ({"structured": 1, "unstructured": 1}, True, True, 6),
        ({}, True, True, 6),  # no node_up: nothing to tell the modes by
    ],
)
def test_each_mode_shows_its_own_metrics(
    modes: dict[str, int], gossip: bool, structured: bool, figures: int
) -> None:
    page = render(_summary(modes), SERIES)
    assert all((row in page) == gossip for row in GOSSIP_ROWS), page
    assert all((row in page) == structured for row in STRUCTURED_ROWS)
    assert ('alt="tree depth"' in page) == structured == ('alt="lookup hops"' in page)
    assert len(re.findall("data:image/png;base64,", page)) == figures
