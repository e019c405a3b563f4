"""CPU per event on every daemon of a local overlay, and what each subscriber got.

Starts ``--nodes`` daemons (``deploy.cluster``), one subscriber process on each daemon
but the first (as ``bench/e2e.py``'s multi-daemon setup), and publishes from the first:
``--warmup`` events, then ``--events`` as fast as the API takes them (pipelined,
``--window`` outstanding; ``--reliable`` for reliable publishes). Prints the rate, the
count each subscriber received of the measured run, and each daemon's CPU time per
event (user + system, from /proc) with the total: where an event's cost goes (the
topic's root, forwarders, leaves) and what the whole overlay pays per event.

The warm-up starts right after the ring formed, like ``bench/e2e.py``: a root that took
its key moments before holds the first publishes through its takeover wait and then
numbers them at once, so this also exercises that burst.

Run: .venv/bin/python bench/cluster_cost.py [--nodes 10] [--events 10000] [--reliable]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# This file's folder must not hide packages; the repository it is in comes first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.e2e_publishers import OverlayPublisher  # noqa: E402
from bench.e2e_workload import Subscribers  # noqa: E402
from deploy import cluster  # noqa: E402

TICKS = 100  # clock ticks per second of /proc/<pid>/stat (USER_HZ on Linux)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--events", type=int, default=10000)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--reliable", action="store_true")
    args = p.parse_args(argv)
    if args.nodes < 2:
        p.error("--nodes must be at least 2 (the publisher's daemon has no subscriber)")
    with tempfile.TemporaryDirectory(prefix="cluster-cost-") as tmp:
        inventory = cluster.up(Path(tmp), args.nodes, timeout=120.0)
        subs: Subscribers | None = None
        try:
            apis = [node.api for node in inventory.nodes]
            subs = Subscribers("overlay", apis[1:])
            publisher = OverlayPublisher(apis[0])
            publisher.reliable = args.reliable
            publisher.burst(1, args.warmup, args.window)
            subs.wait(1, args.warmup, idle=20, cap=300)
            before = {node.name: cpu_seconds(node.pid) for node in inventory.nodes}
            started = time.monotonic()
            publisher.burst(2, args.events, args.window)
            subs.wait(2, args.events, idle=20, cap=600)
            seconds = time.monotonic() - started
            after = {node.name: cpu_seconds(node.pid) for node in inventory.nodes}
            counts = [count for count, _ in subs.ask("count", 2)]
            with open("/proc/loadavg", encoding="ascii") as fh:
                load = fh.read().split()[0]
            kind = "reliable" if args.reliable else "unreliable"
            print(f"{args.events} {kind} events in {seconds:.1f} s = "
                  f"{args.events / seconds:,.0f} events/s (load average {load})")
            print(f"received per subscriber (n01...): {counts}")
            total = 0.0
            for node in inventory.nodes:
                cost = (after[node.name] - before[node.name]) / args.events * 1e6
                total += cost
                print(f"  {node.name}  {cost:7.0f} us/event")
            print(f"  all daemons {total:7.0f} us/event")
            return 0 if min(counts) == args.events else 1
        finally:
            if subs is not None:
                subs.close()
            cluster.down(inventory)


if __name__ == "__main__":
    sys.exit(main())
