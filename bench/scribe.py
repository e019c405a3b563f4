"""Scribe at paper scale in the simulator: delivery, tree shape, filter pruning, anycast
groups, repair after crashes, and node stress with and without the children bound.

Every figure comes from the trace files (overlay.sim.scenarios.trace_check), not from
the protocol's own counters. Workload: ``--nodes`` nodes, ``--topics`` topics with
``--subscribers`` subscriptions each on random nodes (filters from the flood scenario's
mix, a quarter of them empty), ``--publishes`` events from random nodes with random
attributes over 40 simulated seconds.

Runs:
  base        no faults
  no-summary  the same with summaries off (events go down every edge)
  groups      30% of the subscriptions in anycast groups (3 per topic)
  crash       10% of the nodes crash a quarter into the publishing, the roots of 2
              topics among them; figures for events published after the repair
  bound-C     the children bound C (FreePastry's LimitedScribePolicy), for each C given

``--ring chord`` runs on the Chord core (tables installed correct at once, then 20 s of
its maintenance; ``--bootstrap join`` forms the ring by joins); ``--ring ideal`` on
perfect finger tables (the oracle ring of the tests), which isolates Scribe from Chord.

Run: .venv/bin/python bench/scribe.py [--ring chord|ideal] [--nodes 1000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path, and this file's name
# would hide the ``scribe`` package it measures.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from overlay.sim.scenarios.scribe import (  # noqa: E402
    ChordRing,
    Ring,
    ScribeScenario,
    run_scribe,
)


def make_ring(args: argparse.Namespace) -> Ring:
    if args.ring == "ideal":
        from tests.scribe.fakekbr import OracleRingBuilder

        return OracleRingBuilder()
    return ChordRing(bootstrap=args.bootstrap, warmup=args.warmup)


def run(label: str, args: argparse.Namespace, scenario: ScribeScenario) -> dict[str, Any]:
    summary = run_scribe(scenario, make_ring(args))
    keys = ["delivery_ratio", "false_deliveries", "duplicates", "group_extra",
            "roots_per_topic_max", "topics_without_root", "detached", "tree_depth_mean",
            "tree_depth_max", "half_log2_n", "forwards_per_delivery", "expected",
            "group_services", "crashed", "repair_time", "events_after_repair",
            "delivery_ratio_after_repair", "duplicates_after_repair", "wall_s"]
    row = {"run": label, **{k: summary[k] for k in keys if k in summary}}
    stress = summary["stress"]
    row.update(children_mean=stress["children"]["mean"], children_max=stress["children"]["max"],
               children_per_tree_max=stress["children_per_tree_max"],
               forwards_mean=stress["forwards"]["mean"], forwards_p99=stress["forwards"]["p99"],
               forwards_max=stress["forwards"]["max"])
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ring", choices=["chord", "ideal"], default="chord")
    parser.add_argument("--bootstrap", choices=["oracle", "join"], default="oracle",
                        help="how the Chord ring forms (default: correct tables at once)")
    parser.add_argument("--warmup", type=float, default=20.0,
                        help="seconds of Chord maintenance before subscribing (default 20)")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--publishes", type=int, default=1000)
    parser.add_argument("--bounds", type=int, nargs="*", default=[8, 4, 2])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="200 nodes, 5 topics")
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.topics, args.publishes = 200, 5, 250
    base = ScribeScenario(nodes=args.nodes, topics=args.topics, subscribers=args.subscribers,
                          publishes=args.publishes, seed=args.seed)

    def variant(**changes: Any) -> ScribeScenario:
        return ScribeScenario(**{**base.__dict__, **changes})

    run("base", args, base)
    run("no-summary", args, variant(summaries=False))
    run("groups", args, variant(groups=0.3))
    run("crash", args, variant(crash=0.1, crash_roots=2))
    for bound in args.bounds:
        run(f"bound-{bound}", args, variant(max_children=bound))


if __name__ == "__main__":
    main()
