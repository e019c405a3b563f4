"""``overlay cluster`` from the command line, and the main job's workload on a small
real cluster (every expected event received, nothing else)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from deploy import cluster
from deploy.workload import Workload, run_workload

pytestmark = pytest.mark.integration

FAST = "[protocol]\nstabilize_interval = 0.3\nheartbeat_interval = 0.3\n"


def overlay(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "overlay.cli", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_cluster_commands_start_inspect_fault_and_stop(tmp_path: Path) -> None:
    fast = tmp_path / "fast.toml"
    fast.write_text(FAST)
    where = ["--dir", str(tmp_path / "c")]
    try:
        up = overlay("cluster", "up", "--nodes", "3", "--protocol-file", str(fast), *where)
        assert up.returncode == 0, up.stderr
        assert len(up.stdout.splitlines()) == 3
        status = overlay("cluster", "status", *where)
        assert status.returncode == 0 and status.stdout.count("ready=True") == 3
        usage = overlay("cluster", "kill", *where)
        assert usage.returncode == 2 and "--random" in usage.stderr
        killed = overlay("cluster", "kill", "--random", "1", *where)
        assert killed.returncode == 0 and killed.stdout.startswith("killed ")
        status = overlay("cluster", "status", *where)
        assert status.returncode == 1 and status.stdout.count("DOWN") == 1
    finally:
        down = overlay("cluster", "down", *where)
    assert down.returncode == 0
    assert sorted(line.split(maxsplit=1)[1] for line in down.stdout.splitlines()) == [
        "not running", "stopped", "stopped"]
    missing = overlay("cluster", "status", "--dir", str(tmp_path / "nothing"))
    assert missing.returncode == 1 and "no cluster" in missing.stderr


def test_main_job_workload_receives_exactly_what_the_filters_select(tmp_path: Path) -> None:
    inventory = cluster.up(tmp_path / "c", 3, extra_config=FAST)
    try:
        summary = trio.run(run_workload, inventory.nodes,
                           Workload(topics=2, subscribers=4, publishes=40, rate=100.0),
                           lambda text: None)
    finally:
        cluster.down(inventory)
    assert summary["publish_failures"] == 0
    assert summary["expected_deliveries"] > 0
    assert summary["delivered"] == summary["expected_deliveries"]
    assert summary["false_deliveries"] == 0 and summary["duplicates"] == 0
