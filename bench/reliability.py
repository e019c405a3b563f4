"""The cost of reliable publishing, in the simulator, measured from the traces.

Three runs of the Scribe scenario on a Chord ring formed by joins (same seed, same
subscriptions and events):

  reliable     every publish reliable (acknowledged once the root's replicas hold it)
  unreliable   ``reliable: false`` (no acknowledgement, no copies)
  root crash   reliable, and the roots of all topics crash (with 30% of the nodes)

Printed per run: messages sent per delivered event (every message of every kind the
simulator carried, ring maintenance included, divided by the deliveries), delivery
latency p50/p99 (publish record to deliver record), and for reliable runs the publish
latency p50/p99 (publish record to the publisher's publish_ack record, which is when
the API answers). For the crash run: the recovery time (crash to the last tree repair
record) and the reliability check (acknowledged events lost, repeated, out of order).

Run: .venv/bin/python bench/reliability.py [--nodes 300] [--publishes 1000] [--seed 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path, and bench/matching.py and
# bench/scribe.py would hide the packages of those names.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from overlay.sim.scenarios.scribe import ChordRing, ScribeScenario, run_scribe  # noqa: E402
from overlay.sim.scenarios.trace_check import TraceCheck  # noqa: E402


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ranked = sorted(values)
    return ranked[max(0, min(len(ranked) - 1, round(p * len(ranked) + 0.5) - 1))]


def latencies(trace_dir: Path) -> dict[str, Any]:
    check = TraceCheck(trace_dir)
    published = {p["msg_id"]: p["ts"] for p in check.publishes()}
    deliveries = [r["ts"] - published[r["msg_id"]] for r in check.by_ev["deliver"]
                  if r["msg_id"] in published]
    acks = [r["ts"] - published[r["msg_id"]] for r in check.by_ev["publish_ack"]
            if r["msg_id"] in published]
    return {"deliveries": len(deliveries),
            "delivery_ms": [round(1000 * v, 1) if v is not None else None
                            for v in (percentile(deliveries, 0.5), percentile(deliveries, 0.99))],
            "publish_ms": [round(1000 * v, 1) if v is not None else None
                           for v in (percentile(acks, 0.5), percentile(acks, 0.99))],
            "mean_delivery_ms": round(1000 * statistics.fmean(deliveries), 1)
            if deliveries else None}


def run(name: str, scenario: ScribeScenario, base: Path) -> dict[str, Any]:
    trace_dir = base / name
    summary = run_scribe(scenario, ChordRing(bootstrap="join"), trace_dir)
    lat = latencies(trace_dir)
    row = {"run": name, "messages_per_delivery":
           round(summary["messages"] / lat["deliveries"], 2) if lat["deliveries"] else None,
           "delivery_p50_p99_ms": lat["delivery_ms"], "publish_p50_p99_ms": lat["publish_ms"],
           "wall_s": summary["wall_s"]}
    if summary.get("crashed"):
        row.update(recovery_s=summary["repair_time"], reliability=summary["reliability"])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--topics", type=int, default=6)
    parser.add_argument("--subscribers", type=int, default=30)
    parser.add_argument("--publishes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    common = {"nodes": args.nodes, "topics": args.topics, "subscribers": args.subscribers,
              "publishes": args.publishes, "seed": args.seed}
    with tempfile.TemporaryDirectory(prefix="bench-reliability-") as tmp:
        base = Path(tmp)
        rows = [
            run("reliable", ScribeScenario(**common), base),  # type: ignore[arg-type]  # scenario fields from a shared dict of mixed types
            run("unreliable", ScribeScenario(**common, reliable=False), base),  # type: ignore[arg-type]  # scenario fields from a shared dict of mixed types
            run("root crash", ScribeScenario(**common, crash=0.3,  # type: ignore[arg-type]  # scenario fields from a shared dict of mixed types
                                             crash_roots=args.topics), base),
        ]
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
