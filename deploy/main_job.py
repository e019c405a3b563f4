"""The main job: a local overlay publishing and subscribing, then the Spark analysis.

Until the daemon, Chord and Scribe land, the overlay is a simulated one (flooding over a
random graph, every node writing its own trace file); the analysis is the real one.
Prints progress to stderr, then the summary and the path of ``report.html``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from overlay.sim.scenarios.flood import FloodScenario, run_flood


def progress(text: str) -> None:
    print(f"[main-job {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="main-job", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("runs/main"))
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--publishes", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    traces, analysis = args.out / "traces", args.out / "analysis"
    shutil.rmtree(args.out, ignore_errors=True)
    scenario = FloodScenario(nodes=args.nodes, publishes=args.publishes, seed=args.seed)
    progress(f"simulating {scenario.nodes} nodes: {scenario.topics} topics, "
             f"{scenario.topics * scenario.subscribers} filtered subscriptions, "
             f"{scenario.publishes} publishes (flooding, TTL {scenario.ttl})")
    result = run_flood(scenario, traces, run_id=f"main-{args.seed}")
    progress(f"simulation done: {json.dumps(result)}")
    progress(f"Spark analysis of {traces} (local mode)")
    from spark_analysis.cli import main as analyze

    code = analyze(["--traces", str(traces), "--out", str(analysis)])
    if code == 0:
        progress(f"report: {(analysis / 'report.html').resolve()}")
    return code


if __name__ == "__main__":
    sys.exit(main())
