"""The main job: a local cluster publishing and subscribing, then the Spark analysis.

1. ``deploy.cluster.up``: N ``overlay daemon`` processes on loopback form a Chord ring
   (Scribe on it, every daemon tracing to ``<out>/cluster/<name>/traces``);
2. ``deploy.workload``: filtered subscriptions and publishes through the daemons' local
   socket APIs, with the workload's own count of expected and received events;
3. ``deploy.cluster.down``: SIGTERM, graceful leave, traces flushed;
4. the Spark analysis of every node's traces, with ``report.html``.

Prints progress to stderr, then the workload summary, the analysis summary and the path
of the report. Exit 0 when every step ran (the figures say how well the overlay did).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import trio

from deploy import cluster
from deploy.workload import Workload, run_workload

#: Protocol periods for a short run on one host: repairs within a few seconds.
FAST_PROTOCOL = """
[protocol]
stabilize_interval = 0.5
fix_fingers_interval = 0.5
check_predecessor_interval = 0.5
heartbeat_interval = 0.5
parent_timeout = 2.0
"""


def progress(text: str) -> None:
    print(f"[main-job {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="main-job", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/main"))
    parser.add_argument("--nodes", type=int, default=16, help="daemons (default 16)")
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--subscribers", type=int, default=6, help="per topic (default 6)")
    parser.add_argument("--publishes", type=int, default=400)
    parser.add_argument("--rate", type=float, default=40.0, help="publishes per second")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    cluster_dir, analysis = out / "cluster", out / "analysis"
    progress(f"starting {args.nodes} daemons in {cluster_dir}")
    inventory = cluster.up(cluster_dir, args.nodes, extra_config=FAST_PROTOCOL,
                           progress=progress)
    try:
        workload = Workload(topics=args.topics, subscribers=args.subscribers,
                            publishes=args.publishes, rate=args.rate, seed=args.seed)
        summary = trio.run(run_workload, inventory.nodes, workload, progress)
    finally:
        progress("stopping the daemons (graceful leave)")
        stopped = cluster.down(inventory)
    progress(f"workload: {json.dumps(summary)}")
    (out / "workload.json").write_text(json.dumps(summary, indent=2) + "\n")
    if any(outcome == "killed" for outcome in stopped.values()):
        progress(f"some daemons had to be killed: {stopped}")
    progress(f"Spark analysis of {cluster_dir} (local mode)")
    from spark_analysis.cli import main as analyze

    code = analyze(["--traces", str(cluster_dir), "--out", str(analysis)])
    if code == 0:
        progress(f"report: {analysis / 'report.html'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
