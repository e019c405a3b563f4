"""``overlay lab`` from the command line: up, status, partition, heal, down on two
hosts, and down leaves no namespace and no daemon behind. Needs root, ``ip netns`` and
``nft`` (skipped with the reason otherwise); the lab is removed even on failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy import cluster, lab
from deploy.netns import NetnsTopology, lab_support

pytestmark = pytest.mark.integration


def overlay_lab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "overlay.cli", "lab", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_missing_lab_and_bad_groups_are_errors(tmp_path: Path) -> None:
    missing = overlay_lab("status", "--dir", str(tmp_path))
    assert missing.returncode == 1 and "no lab in" in missing.stderr
    inventory = lab.LabInventory(str(tmp_path), "x", "structured", 0.0, 0.0,
                                 [NetnsTopology("x").host(i) for i in range(3)])
    with pytest.raises(cluster.ClusterError, match="no host 7"):
        lab.parse_group("0,7", inventory)
    with pytest.raises(cluster.ClusterError, match="host indices"):
        lab.parse_group("a,b", inventory)
    with pytest.raises(cluster.ClusterError, match="in both groups"):
        lab.partition(inventory, [0, 1], [1, 2])


def test_up_status_partition_heal_down(tmp_path: Path) -> None:
    reason = lab_support()
    if reason is not None:
        pytest.skip(f"no network-namespace lab here: {reason}")
    name = f"c{os.getpid() % 10**6}"
    directory = tmp_path / "lab"
    try:
        up = overlay_lab("up", "--hosts", "2", "--delay", "5", "--loss", "0.01",
                         "--name", name, "--dir", str(directory))
        assert up.returncode == 0, up.stderr
        assert [line.split()[:2] for line in up.stdout.splitlines()] == [
            ["h0", f"{name}-h0"], ["h1", f"{name}-h1"]]
        status = overlay_lab("status", "--dir", str(directory))
        assert status.returncode == 0, status.stderr
        assert "delay 5 ms" in status.stdout and "ring: one ring" in status.stdout
        assert "peer_delay_ms = 5.0" in (directory / "h1" / "overlay.toml").read_text()
        cut = overlay_lab("partition", "0", "1", "--dir", str(directory))
        assert cut.returncode == 0, cut.stderr
        assert "partition 0 | 1" in overlay_lab("status", "--dir", str(directory)).stdout
        rules = subprocess.run(["ip", "netns", "exec", f"{name}-h0", "nft", "list", "chain",
                                "inet", "overlay_lab", "partition"], capture_output=True,
                               text=True, check=True).stdout
        assert "198.18.77.2" in rules and "drop" in rules
        assert overlay_lab("heal", "--dir", str(directory)).returncode == 0
        assert "partition none" in overlay_lab("status", "--dir", str(directory)).stdout
        pids = [n.pid for n in lab.LabInventory.load(directory).nodes]
        down = overlay_lab("down", "--dir", str(directory))
        assert down.returncode == 0, down.stderr
        assert not NetnsTopology(name).existing_namespaces()
        assert not any(cluster.pid_alive(pid) for pid in pids)
    finally:
        overlay_lab("down", "--dir", str(directory), "--grace", "2")
        NetnsTopology(name).destroy()
