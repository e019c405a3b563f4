"""``overlay sim --topics ...``: a Scribe run on Chord, summarized from its traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from overlay.cli import main


def test_pubsub_run_prints_the_trace_figures(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "--nodes", "40", "--bootstrap", "oracle", "--warmup", "5",
                 "--duration", "40", "--topics", "2", "--subscribers", "10",
                 "--publishes", "40", "--groups", "0.3", "--max-children", "3",
                 "--trace-dir", str(tmp_path), "--run-id", "cli"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    for key in ("delivery_ratio", "false_deliveries", "duplicates", "tree_depth_mean",
                "tree_depth_max", "forwards_per_delivery"):
        assert key in summary
    assert summary["delivery_ratio"] == 1.0 and summary["max_children"] == 3
    assert summary["stress"]["children_per_tree_max"] <= 3
    assert any(tmp_path.glob("*.jsonl"))


def test_pubsub_run_refuses_options_of_other_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--nodes", "10", "--topics", "1", "--lookups", "5"]) == 2
    assert "--lookups" in capsys.readouterr().err
    assert main(["sim", "--nodes", "10", "--topics", "1", "--duration", "20"]) == 2
    assert "raise the duration" in capsys.readouterr().err


@pytest.mark.slow
def test_calls_drawn_for_crashed_nodes_are_skipped_and_counted(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Subscriptions drawn for nodes that crash before their time (``--crash-at 150``,
    before the subscribe window) are not made: the run ends normally and says how many
    calls it skipped."""
    code = main(["sim", "--nodes", "500", "--topics", "10", "--subscribers", "30",
                 "--publishes", "2000", "--crash", "0.3", "--crash-at", "150",
                 "--loss", "0.05"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    skipped = summary["skipped_calls"]
    assert skipped["subscribe"] > 0 and skipped["publish"] == 0  # publishers are drawn alive
    assert summary["subscriptions"] == 300 and summary["crashed"] == 150
    reliability = summary["reliability"]
    assert reliability["lost"] == reliability["duplicated"] == reliability["out_of_order"] == 0
