"""``overlay sim``: run the Chord core in the discrete-event simulator."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  overlay sim --nodes 1000 --lookups 2000 --duration 300
  overlay sim --nodes 4096 --bootstrap oracle --lookups 5000 --duration 60
  overlay sim --nodes 500 --lookups 2000 --duration 400 --crash 0.2 --crash-at 200
  overlay sim --nodes 500 --churn 0.05 --stabilize-interval 30 --lookups 3000 --duration 3600
  overlay sim --nodes 200 --duration 120 --trace-dir runs/chord/traces
Prints one JSON line: nodes, lookups, ok_rate, hops_mean, hops_p99, wall_s and more.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sim", help="simulate a Chord ring (lookups, failures, churn)",
        description="Run Chord nodes in the deterministic simulator and print a JSON summary. "
        "A lookup is ok when it returns succ(key) over the live ring.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100, help="ring size (default 100)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--duration", type=float, default=300.0,
                        help="simulated seconds (default 300)")
    parser.add_argument("--trace-dir", type=Path, help="write node traces here (default: none)")
    parser.add_argument("--lookups", type=int, default=0,
                        help="lookups for random keys, spread after the warm-up (default 0)")
    parser.add_argument("--bootstrap", choices=("join", "oracle"), default="join",
                        help="join: one by one through the protocol; oracle: correct tables "
                        "at once (default join)")
    parser.add_argument("--crash", type=float, default=0.0, metavar="FRACTION",
                        help="share of the nodes that fail together at --crash-at")
    parser.add_argument("--crash-at", type=float, metavar="T", help="when they fail (seconds)")
    parser.add_argument("--churn", type=float, default=0.0, metavar="RATE_PER_S",
                        help="Poisson joins and failures, each at this rate, after the warm-up")
    parser.add_argument("--loss", type=float, default=0.0, help="message loss probability")
    parser.add_argument("--stabilize-interval", type=float, default=5.0, metavar="S",
                        help="mean period of stabilize, fix_fingers, check_predecessor "
                        "(default 5)")
    parser.add_argument("--bits", type=int, default=128, metavar="M",
                        help="identifier bits (default 128)")
    parser.add_argument("--successors", type=int, default=8, help="successor list length")
    parser.add_argument("--join-spacing", type=float, default=0.1, metavar="S",
                        help="seconds between joins while the ring forms (default 0.1)")
    parser.add_argument("--warmup", type=float, metavar="T",
                        help="lookups start at T (default: 20 stabilize periods after the "
                        "last join)")
    parser.add_argument("--run-id", help="run id written in every trace record")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from overlay.sim.scenarios.chord import ChordScenario, run_chord

    try:
        scenario = ChordScenario(
            nodes=args.nodes, duration=args.duration, lookups=args.lookups,
            bootstrap=args.bootstrap, crash=args.crash, crash_at=args.crash_at,
            churn=args.churn, loss=args.loss, stabilize_interval=args.stabilize_interval,
            bits=args.bits, successors=args.successors, join_spacing=args.join_spacing,
            warmup=args.warmup, seed=args.seed)
    except ValueError as exc:
        print(f"overlay sim: {exc}", file=sys.stderr)
        return 2
    summary = run_chord(scenario, args.trace_dir, run_id=args.run_id)
    print(json.dumps(summary, separators=(",", ":")))
    return 0
