"""main(argv) exit codes and output that need no JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_analysis.cli import EXIT_USAGE, format_summary, main

pytestmark = pytest.mark.spark


def test_usage_errors_return_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_USAGE
    assert main(["--traces", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == (
        EXIT_USAGE
    )
    captured = capsys.readouterr()
    assert "no such trace path" in captured.err and captured.out == ""


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "--traces" in capsys.readouterr().out


def test_format_summary_prints_nulls_as_na() -> None:
    scope = dict.fromkeys(
        ["published", "expected", "delivered", "false_deliveries", "duplicates"], 0
    ) | dict.fromkeys(
        [
            "delivery_ratio",
            "latency_ms_p50",
            "latency_ms_p99",
            "tree_depth_mean",
            "tree_depth_max",
            "forwards_per_delivery",
        ]
    )
    summary = {
        "records": 0,
        "bad_lines": 0,
        "nodes": 0,
        "bad_filters": 0,
        "overall": scope,
        "lookup": {"count": 0, "ok_rate": None, "hops_mean": None, "hops_p99": None},
        "topics": {"t": scope},
    }
    text = format_summary(summary)
    assert "ratio n/a" in text and "t: ratio n/a" in text
