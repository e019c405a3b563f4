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

publish/subscribe (Scribe trees on the ring; --topics switches it on):
  overlay sim --nodes 1000 --bootstrap oracle --topics 20 --subscribers 50 --publishes 1000
  overlay sim --nodes 200 --topics 4 --publishes 300 --groups 0.3 --max-children 4
  overlay sim --nodes 200 --topics 4 --publishes 300 --crash 0.1 --crash-roots 2
Prints one JSON line computed from the trace files: delivery_ratio, false_deliveries,
duplicates, tree_depth_mean, tree_depth_max, forwards_per_delivery and more.

unstructured mode (gossip; --topics defaults to 4 there):
  overlay sim --mode unstructured --strategy flood --nodes 500 --publishes 100
  overlay sim --mode unstructured --strategy rumor --counter 2 --view full --nodes 1000
  overlay sim --mode unstructured --strategy pbcast --loss 0.1 --nodes 300
  overlay sim --mode unstructured --strategy blind-counter --fanout 2 --forward-limit 2
  overlay sim --mode unstructured --strategy flood --selective --nodes 300
Prints one JSON line from the trace files: delivery_ratio, coverage, messages per node,
t99_s (time to reach 99% of nodes) and more.
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
    parser.add_argument("--mode", choices=("structured", "unstructured"), default="structured",
                        help="structured: Chord (and Scribe with --topics); unstructured: "
                        "gossip over a peer-sampling overlay (default structured)")
    add_pubsub_options(parser)
    from overlay.sim.scenarios.gossip import add_gossip_arguments

    add_gossip_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.mode == "unstructured":
        return run_unstructured(args)
    if args.topics:
        return run_pubsub(args)
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


def run_unstructured(args: argparse.Namespace) -> int:
    from overlay.sim.scenarios.gossip import run_gossip_simulation

    try:
        summary = run_gossip_simulation(args)
    except ValueError as exc:
        print(f"overlay sim: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, separators=(",", ":")))
    return 0


# -- publish/subscribe (Scribe) runs -----------------------------------------------------------


def add_pubsub_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "publish/subscribe", "Scribe topic trees on the ring, measured from the trace files "
        "(--topics switches this on; --crash, --crash-at, --loss, --duration, --bootstrap "
        "and the ring options apply too)")
    group.add_argument("--topics", type=int, default=0, metavar="T",
                       help="topics, named topic-0..topic-{T-1} (default 0: no pub/sub run)")
    group.add_argument("--subscribers", type=int, default=50, metavar="K",
                       help="subscriptions per topic on random nodes, filters from a built-in "
                       "mix that includes empty filters (default 50)")
    group.add_argument("--publishes", type=int, default=200, metavar="P",
                       help="events with random attributes from random nodes (default 200)")
    group.add_argument("--groups", type=float, default=0.0, metavar="FRACTION",
                       help="share of subscriptions in anycast groups g0..g2 (default 0)")
    group.add_argument("--max-children", type=int, metavar="C",
                       help="children per node and topic before new ones are pushed down")
    group.add_argument("--no-summaries", action="store_true",
                       help="send events down every tree edge (no filter summaries)")
    group.add_argument("--crash-roots", type=int, default=1, metavar="N",
                       help="topics whose root is among the --crash victims (default 1)")
    group.add_argument("--crash-successors", type=int, default=0, metavar="K",
                       help="also crash the first K successors of each crashed root (they "
                       "hold its replicas; default 0)")
    group.add_argument("--replicas", type=int, default=2, metavar="R",
                       help="successors holding copies of each root's events before a "
                       "reliable publish is acknowledged (default 2)")
    group.add_argument("--unreliable", action="store_true",
                       help="publish without acknowledgement or replication")


def run_pubsub(args: argparse.Namespace) -> int:
    from overlay.sim.scenarios.scribe import ChordRing, ScribeScenario, run_scribe

    if args.lookups or args.churn:
        print("overlay sim: --lookups and --churn are not part of a --topics run",
              file=sys.stderr)
        return 2
    try:
        scenario = ScribeScenario(
            nodes=args.nodes, topics=args.topics, subscribers=args.subscribers,
            publishes=args.publishes, groups=args.groups, max_children=args.max_children,
            summaries=not args.no_summaries, crash=args.crash, crash_roots=args.crash_roots,
            crash_successors=args.crash_successors, replicas=args.replicas,
            reliable=not args.unreliable, crash_at=args.crash_at, loss=args.loss,
            duration=args.duration, seed=args.seed)
        ring = ChordRing(bootstrap=args.bootstrap, stabilize_interval=args.stabilize_interval,
                         bits=args.bits, successors=args.successors,
                         join_spacing=args.join_spacing, warmup=args.warmup)
        summary = run_scribe(scenario, ring, args.trace_dir, run_id=args.run_id)
    except ValueError as exc:
        print(f"overlay sim: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, separators=(",", ":")))
    return 0
