"""How fast N daemons come up on this machine and how much memory each holds (issue 9:
32 daemons, one ring, resident memory per daemon under 60 MB).

``deploy.cluster.up`` starts the daemons one after the other (each on loopback, a port
the kernel chose, the first one the seed of the others) and returns once every daemon's
API says it is ready (it has joined). Figures, in seconds from the first start:
  started      every process has reported its address (daemon.json)
  all joined   every daemon's API says ready (``overlay cluster up`` returns here)
  one ring     every daemon's successor is the next one in id order
Resident memory (VmRSS of /proc/PID/status; it counts shared pages, such as the Python
interpreter's, in every process) and proportional set size (Pss of smaps_rollup: shared
pages divided among their users) per daemon, at one ring and again ``--settle``
seconds later. The cluster runs the default protocol periods and is stopped gracefully.
The load average column shows other work on the machine (it slows the start).

Run: .venv/bin/python bench/cluster_up.py [--nodes 32] [--settle 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# As a script, bench/ comes first on sys.path (bench/scribe.py would hide ``scribe``).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deploy import cluster  # noqa: E402


def memory_mb(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of one process, in MB."""
    rss = pss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            pss = int(line.split()[1])
    return rss / 1024, pss / 1024


def memory_summary(inventory: cluster.Inventory) -> dict[str, float]:
    samples = [memory_mb(node.pid) for node in inventory.nodes]
    rss = [r for r, _ in samples]
    pss = [p for _, p in samples]
    return {"rss_mb_median": statistics.median(rss), "rss_mb_max": max(rss),
            "rss_mb_min": min(rss), "pss_mb_median": statistics.median(pss),
            "pss_mb_total": sum(pss)}


def ring_whole(inventory: cluster.Inventory) -> bool:
    answers = [cluster.node_status(node) for node in inventory.nodes]
    return cluster.ring_problem(inventory.nodes, answers) is None


def run(nodes: int, directory: Path, settle: float, timeout: float) -> dict[str, Any]:
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    started: list[float] = []

    def progress(text: str) -> None:
        if text.startswith(f"started {nodes}/"):
            started.append(time.monotonic() - t0)

    inventory = cluster.up(directory, nodes, timeout=timeout, progress=progress)
    try:
        joined = time.monotonic() - t0
        cluster.wait_until(lambda: ring_whole(inventory), timeout, "one ring", interval=0.2)
        ring = time.monotonic() - t0
        at_ring = memory_summary(inventory)
        time.sleep(settle)
        later = memory_summary(inventory)
    finally:
        outcome = cluster.down(inventory, grace=30.0)
    return {"nodes": nodes, "loadavg_1m": load,
            "started_s": started[0] if started else joined, "all_joined_s": joined,
            "one_ring_s": ring, "memory_at_ring": at_ring,
            f"memory_after_{settle:g}s": later,
            "stopped_gracefully": sum(v in ("stopped", "not running") for v in outcome.values())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds between the two memory samples (default 10)")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--dir", type=Path, help="cluster directory (default: a temporary one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cluster-up-") as tmp:
        result = run(args.nodes, args.dir or Path(tmp), args.settle, args.timeout)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['nodes']} daemons (load average {result['loadavg_1m']:.2f} at start)")
    print(f"  started     {result['started_s']:6.1f} s")
    print(f"  all joined  {result['all_joined_s']:6.1f} s")
    print(f"  one ring    {result['one_ring_s']:6.1f} s")
    for label, key in (("at one ring", "memory_at_ring"),
                       (f"after {args.settle:g} s", f"memory_after_{args.settle:g}s")):
        m = result[key]
        print(f"  memory {label}: RSS median {m['rss_mb_median']:.1f} MB "
              f"(min {m['rss_mb_min']:.1f}, max {m['rss_mb_max']:.1f}); "
              f"PSS median {m['pss_mb_median']:.1f} MB, all daemons {m['pss_mb_total']:.0f} MB")
    print(f"  stopped gracefully: {result['stopped_gracefully']}/{result['nodes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
