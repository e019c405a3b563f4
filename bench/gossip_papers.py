"""The gossip core next to the papers' figures, in the simulator, measured from its traces.

Every figure comes from the trace files (``overlay.sim.scenarios.gossip.GossipTraces``,
plus the split of pbcast's deliveries and the rounds of rumor spreading, read from the
same files here); only control messages come from the simulator's counters.
Experiments (``--only 1,2,...`` runs some of them):

  1  push rumor mongering, feedback + coin (p_stop = 1/k, k = 1..7), full view, aligned
     rounds (the synchronous model): residue next to the solution s of
     s = e^(-(k+1)(1-s)) (Demers et al. 1987), computed here numerically too.
     Full run: N = 10,000, ``--rumor-events`` (3) events per k, all published at once
     (independent rumors; a node bundles the pushes of one round to one peer); t_ave and
     t_last: the round in which a node got the event (mean over nodes, and the last).
  2  Demers et al. 1987, Table 1: push, feedback + counter k = 1..5, n = 1000 (10 events
     per k, published at once, full view, aligned rounds): residue,
     traffic (update messages sent per site: ``messages_per_node_per_event``, the
     ``forward`` records of the run divided by nodes and events), and convergence
     t_ave / t_last in rounds; with the counter counting only consecutive unneeded
     pushes (``reset_counter``, as the paper's bound argument reads) and counting all.
  3  blind counter rumor mongering (B = F = 2) against flooding (hop limit 8) on the same
     HyParView overlay (active view 5, and 10), N = 1000: messages, coverage, time to
     cover. Experiments 3 to 5 publish 30 events over 10 s and drain 15 s more.
  4  pbcast (first-phase fanout 3, hop limit 8, one digest peer per round) without and
     with 10% message loss, N = 1000, 2 topics x 50 filtered subscriptions: delivery
     ratio after repair, and the latency of the deliveries the first phase made against
     those a digest repaired (a ``repair`` record at that node for that event at or
     before the delivery).
  5  selective routing: event messages per delivery with and without ``selective``
     (flooding and pbcast, HyParView, N = 1000, 4 topics x 12 filtered subscriptions),
     with the delivery ratio to interested nodes. Adverts are distance vectors toward
     subscribers over ``radius`` (8, the hop limit) hops; events follow shortest paths
     to the subscribers that may match, pbcast's digests only along those routes.
  6  HyParView peer sampling: half of N = 1000 nodes crash at once (every second one,
     after 20 s; a send to a crashed node fails after 0.5 s); rounds until the
     survivors' active views form one connected component again, and until no survivor
     has a crashed neighbour (3 seeds, at most 30 rounds).

Network: the simulator's default delays (5 ms + up to 141 ms), far below the 1 s round.
Every run goes one after another in this one process. The full run took 8 minutes on
a shared 2-core machine (experiment 1: 3.6 minutes, 2: 0.9, 3: 1.5, 4: 0.5, 5: 1.3,
6: 0.25) before selective routing's distance-vector adverts; experiment 5 alone now
takes 5.5 minutes (``--only 5``; the selective flooding run, whose adverts cascade over
8 hops while 48 subscriptions start, 1.5 to 3 minutes of it).
``--quick`` shrinks every experiment (N = 200 for 1, 2 and 6, N = 150 for 3 to 5, 2
events per k, 10 events, one seed) for a smoke run of about 30 s.
Traces go to a temporary directory (in /dev/shm when there is one) and are removed.

Run: .venv/bin/python bench/gossip_papers.py [--quick] [--only 1,2] [--out runs/bench/gossip]
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path; keep imports to the repo.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from overlay.sim.engine import Simulator  # noqa: E402
from overlay.sim.network import NetworkConfig  # noqa: E402
from overlay.sim.scenarios.gossip import (  # noqa: E402
    GossipScenario,
    GossipTraces,
    build,
    components,
    run_gossip,
)

#: Demers et al. 1987, Table 1 (1000 sites, feedback + counter): k -> (s, m, t_ave, t_last).
DEMERS_TABLE1 = {1: (0.18, 1.7, 11.0, 16.8), 2: (0.037, 3.3, 12.1, 16.9),
                 3: (0.011, 4.5, 12.5, 17.4), 4: (0.0036, 5.6, 12.7, 17.5),
                 5: (0.0012, 6.7, 12.8, 17.7)}

#: A dissemination-only workload: one topic, no subscriptions, every event published at
#: t = 1.5 s (between two aligned rounds), and long enough to let every rumor die.
RUMOR_BASE = dict(strategy="rumor", view="full", aligned_rounds=True, topics=1,
                  subscribers=0, join_window=0.5, warmup=1.0, subscribe_window=0.0,
                  settle=0.5, publish_window=0.0, drain=100.0)


def coin_residue(k: int) -> float:
    """The root in (0, 1) of s = e^(-(k+1)(1-s)), by bisection (s = 1 is the other)."""
    lo, hi = 0.0, 0.999
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid - math.exp(-(k + 1) * (1 - mid)) < 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


class BenchTraces(GossipTraces):
    """GossipTraces that also keeps which node asked a digest repair for which event."""

    def __init__(self, trace_dir: Path) -> None:
        self.repaired: dict[tuple[str, str], float] = {}
        super().__init__(trace_dir)

    def _read(self, rec: dict[str, Any]) -> None:
        super()._read(rec)
        if rec["ev"] == "repair":
            self.repaired.setdefault((rec["node"], rec["msg_id"]), rec["ts"])

    def reach_delays(self) -> list[list[float]]:
        """Per event, the sorted seconds from its publish until each reached node had it."""
        return [sorted(ts - pub["ts"] for ts in self.reached.get(msg_id, {}).values())
                for msg_id, pub in self.publishes.items()]

    def rounds(self, interval: float) -> tuple[float | None, float | None]:
        """Mean over events of (t_ave, t_last) in rounds: the round in which a node got
        the event, counting the publisher's first push as round 1 (aligned rounds)."""
        aves, lasts = [], []
        for msg_id, pub in self.publishes.items():
            start = math.floor(pub["ts"] / interval)
            got = [math.floor(ts / interval) - start
                   for node, ts in self.reached.get(msg_id, {}).items() if node != pub["node"]]
            if got:
                aves.append(sum(got) / len(got))
                lasts.append(max(got))
        return _mean(aves), _mean(lasts)


def windows(args: argparse.Namespace) -> dict[str, float]:
    """Publishing and drain windows of experiments 3 to 5 (the warmup stays 15 s)."""
    return {"publish_window": args.publish_window, "drain": args.drain}


def scratch() -> tempfile.TemporaryDirectory[str]:
    """A temporary trace directory, in memory when /dev/shm exists."""
    shm = Path("/dev/shm")
    return tempfile.TemporaryDirectory(prefix="gossip-bench-",
                                       dir=shm if shm.is_dir() else None)


def run_traced(scenario: GossipScenario) -> tuple[dict[str, Any], BenchTraces]:
    with scratch() as tmp:
        summary = run_gossip(scenario, Path(tmp))
        return summary, BenchTraces(Path(tmp))


# -- output ------------------------------------------------------------------------------------


def show(title: str, rows: list[dict[str, Any]], out: Path, name: str) -> None:
    print(f"\n== {title}")
    if not rows:
        print("(nothing ran)")
        return
    columns = list(rows[0])
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for r in cells:
        print("  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    print(f"-> {path}")
    sys.stdout.flush()


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.0f}"
    return str(value)


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _quantile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4)


def _time_to(delays: list[list[float]], count: int) -> float | None:
    """Mean over the events that reached ``count`` nodes of the time they took."""
    return _mean([d[count - 1] for d in delays if len(d) >= count])


# -- the experiments ---------------------------------------------------------------------------


def exp_rumor_coin(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for k in range(1, 8):
        summary, traces = run_traced(GossipScenario(
            **RUMOR_BASE, nodes=args.rumor_nodes, p_stop=1 / k,  # type: ignore[arg-type]  # scenario fields from a shared dict of mixed types
            publishes=args.rumor_events, seed=args.seed + k))
        t_ave, t_last = traces.rounds(1.0)
        rows.append({
            "k": k, "p_stop": round(1 / k, 4), "nodes": args.rumor_nodes,
            "events": summary["events"], "residue": summary["residue"],
            "residue_max": round(1 - summary["coverage_min"], 5),
            "s_formula": round(coin_residue(k), 5),
            "sim/formula": _ratio(summary["residue"], coin_residue(k)),
            "msgs_per_node_per_event": summary["messages_per_node_per_event"],
            "t_ave_rounds": t_ave, "t_last_rounds": t_last, "wall_s": summary["wall_s"]})
        print(f"  [1] k={k} done in {summary['wall_s']} s", flush=True)
    return rows


def exp_demers_table1(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for reset in (True, False):
        for k in range(1, 6):
            summary, traces = run_traced(GossipScenario(
                **RUMOR_BASE, nodes=args.demers_nodes, counter=k,  # type: ignore[arg-type]  # scenario fields from a shared dict of mixed types
                reset_counter=reset, publishes=args.demers_events, seed=args.seed + k))
            t_ave, t_last = traces.rounds(1.0)
            s, m, p_ave, p_last = DEMERS_TABLE1[k]
            rows.append({
                "counter": "consecutive" if reset else "total", "k": k,
                "nodes": args.demers_nodes, "events": summary["events"],
                "residue": summary["residue"], "s_paper": s,
                "traffic": summary["messages_per_node_per_event"], "m_paper": m,
                "t_ave": t_ave, "t_ave_paper": p_ave, "t_last": t_last,
                "t_last_paper": p_last, "wall_s": summary["wall_s"]})
            print(f"  [2] {rows[-1]['counter']} k={k} done in {summary['wall_s']} s",
                  flush=True)
    return rows


def exp_blind_vs_flood(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for active in args.active_sizes:
        rows += _blind_vs_flood(args, active)
    return [{key: row.get(key) for key in rows[0]} for row in rows]


def _blind_vs_flood(args: argparse.Namespace, active: int) -> list[dict[str, Any]]:
    base = dict(nodes=args.nodes, topics=1, subscribers=0, publishes=args.events,
                active_size=active, seed=args.seed, **windows(args))
    rows: list[dict[str, Any]] = []
    for label, changes in (("flood", dict(strategy="flood")),
                           ("blind-counter B=F=2", dict(strategy="blind-counter", fanout=2,
                                                        forward_limit=2))):
        summary, traces = run_traced(GossipScenario(**{**base, **changes}))  # type: ignore[arg-type]  # scenario fields from a shared dict of mixed types
        delays = traces.reach_delays()
        n = len(traces.nodes)
        rows.append({
            "strategy": label, "active_view": active, "nodes": n, "events": summary["events"],
            "msgs_per_node_per_event": summary["messages_per_node_per_event"],
            "coverage": summary["coverage"], "coverage_min": summary["coverage_min"],
            "t50_s": _time_to(delays, math.ceil(0.5 * n)),
            "t90_s": _time_to(delays, math.ceil(0.9 * n)),
            "t99_s": summary["t99_s"], "events_to_99": summary["t99_reached"],
            "t_last_s": _mean([d[-1] for d in delays if d]),
            "mean_reach_s": _mean([sum(d) / len(d) for d in delays if d]),
            "control_msgs_per_node": summary["control_messages_per_node"],
            "wall_s": summary["wall_s"]})
        print(f"  [3] {label} active={active} done in {summary['wall_s']} s", flush=True)
    flood, blind = rows
    rows.append({"strategy": "blind / flood", "active_view": active,
                 "msgs_per_node_per_event": _ratio(blind["msgs_per_node_per_event"],
                                                   flood["msgs_per_node_per_event"]),
                 "coverage": _ratio(blind["coverage"], flood["coverage"]),
                 "coverage_min": None,
                 **{key: _ratio(blind[key], flood[key])
                    for key in ("t50_s", "t90_s", "t99_s", "t_last_s", "mean_reach_s")}})
    return rows


def exp_pbcast_loss(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for loss in (0.0, 0.1):
        summary, traces = run_traced(GossipScenario(
            nodes=args.nodes, strategy="pbcast", loss=loss, topics=2,
            subscribers=args.subscribers, publishes=args.events, seed=args.seed,
            **windows(args)))
        first, repaired = [], []
        for (node, _, msg_id), ts in traces.deliveries.items():
            pub = traces.publishes.get(msg_id)
            if pub is None:
                continue
            asked = traces.repaired.get((node, msg_id))
            (repaired if asked is not None and asked <= ts else first).append(ts - pub["ts"])
        first.sort()
        repaired.sort()
        total = len(first) + len(repaired)
        expected = summary["expected_deliveries"]
        rows.append({
            "loss": loss, "nodes": args.nodes, "events": summary["events"],
            "expected": expected, "delivery_ratio": summary["delivery_ratio"],
            "coverage": summary["coverage"],
            "first_phase_share": round(len(first) / expected, 5) if expected else None,
            "repaired_deliveries": len(repaired),
            "first_p50_s": _quantile(first, 0.5), "first_p99_s": _quantile(first, 0.99),
            "repaired_p50_s": _quantile(repaired, 0.5),
            "repaired_p99_s": _quantile(repaired, 0.99),
            "all_p50_s": summary["latency_p50_s"], "all_p99_s": summary["latency_p99_s"],
            "false": summary["false_deliveries"], "duplicates": summary["duplicate_deliveries"],
            "msgs_per_delivery": summary["messages_per_delivery"],
            "delivered": total, "wall_s": summary["wall_s"]})
        print(f"  [4] loss={loss} done in {summary['wall_s']} s", flush=True)
    return rows


def exp_selective(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for strategy in ("flood", "pbcast"):
        for selective in (False, True):
            summary, _ = run_traced(GossipScenario(
                nodes=args.nodes, strategy=strategy, selective=selective,
                publishes=args.events, seed=args.seed, **windows(args)))
            rows.append({
                "strategy": strategy, "selective": selective, "nodes": args.nodes,
                "events": summary["events"], "expected": summary["expected_deliveries"],
                "delivery_ratio": summary["delivery_ratio"],
                "false": summary["false_deliveries"],
                "duplicates": summary["duplicate_deliveries"],
                "msgs_per_delivery": summary["messages_per_delivery"],
                "coverage": summary["coverage"],
                "latency_p50_s": summary["latency_p50_s"],
                "control_msgs_per_node": summary["control_messages_per_node"],
                "wall_s": summary["wall_s"]})
            print(f"  [5] {strategy} selective={selective} done in {summary['wall_s']} s",
                  flush=True)
        plain, sel = rows[-2:]
        rows.append({"strategy": strategy, "selective": "ratio sel/plain",
                     "delivery_ratio": _ratio(sel["delivery_ratio"], plain["delivery_ratio"]),
                     "msgs_per_delivery": _ratio(sel["msgs_per_delivery"],
                                                 plain["msgs_per_delivery"]),
                     "control_msgs_per_node": _ratio(sel["control_msgs_per_node"],
                                                     plain["control_msgs_per_node"])})
    return [{key: row.get(key) for key in rows[0]} for row in rows]


def exp_crash_half(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    max_rounds = 30
    for seed in range(args.seed, args.seed + args.crash_seeds):
        started = time.perf_counter()
        scenario = GossipScenario(nodes=args.crash_nodes, seed=seed)
        with scratch() as tmp:
            sim = Simulator(seed, NetworkConfig(unreachable_after=0.5), trace_dir=Path(tmp))
            nodes = build(sim, scenario)
            sim.run(until=20.0)
            everyone = {n.address for n in nodes}
            before = components(nodes, everyone)
            victims = {n.address for n in nodes[::2]}
            for addr in victims:
                sim.crash(addr)
            alive = everyone - victims
            after = components(nodes, alive)
            rounds, connected_at, clean_at = 0, None, None
            while rounds < max_rounds and (connected_at is None or clean_at is None):
                rounds += 1
                sim.run(until=20.0 + rounds * scenario.round_interval)
                if connected_at is None and len(components(nodes, alive)) == 1:
                    connected_at = rounds
                stale = any(set(n.peers.neighbours()) & victims
                            for n in nodes if n.address in alive)
                if clean_at is None and not stale:
                    clean_at = rounds
            degrees = [len(n.peers.neighbours()) for n in nodes if n.address in alive]
            sim.close()
        rows.append({
            "seed": seed, "nodes": args.crash_nodes, "components_before": len(before),
            "components_at_crash": len(after), "largest_at_crash": after[0],
            "isolated_at_crash": sum(1 for s in after if s == 1),
            "rounds_to_connected": connected_at, "rounds_to_no_dead_neighbour": clean_at,
            "survivor_degree_mean": round(sum(degrees) / len(degrees), 3),
            "wall_s": round(time.perf_counter() - started, 3)})
        print(f"  [6] seed={seed} done in {rows[-1]['wall_s']} s", flush=True)
    return rows


EXPERIMENTS = {
    1: ("1. push rumor mongering, feedback + coin p_stop=1/k: residue vs s=e^(-(k+1)(1-s))",
        "rumor_coin", exp_rumor_coin),
    2: ("2. Demers et al. 1987 Table 1 (paper: n = 1000): push, feedback + counter",
        "demers_table1", exp_demers_table1),
    3: ("3. blind counter rumor mongering B=F=2 vs flooding, HyParView",
        "blind_vs_flood", exp_blind_vs_flood),
    4: ("4. pbcast with message loss: delivery after repair, first-phase vs repaired latency",
        "pbcast_loss", exp_pbcast_loss),
    5: ("5. selective routing: event messages per delivery", "selective", exp_selective),
    6: ("6. HyParView: half the nodes crash at once; rounds until the survivors reconnect",
        "crash_half", exp_crash_half),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes everywhere (N = 150 to 200), a smoke run")
    parser.add_argument("--only", default="1,2,3,4,5,6", help="experiments to run, e.g. 1,3")
    parser.add_argument("--out", type=Path, default=Path("runs/bench/gossip"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rumor-nodes", type=int, help="experiment 1 (default 10000)")
    parser.add_argument("--rumor-events", type=int, help="experiment 1, per k (default 3)")
    parser.add_argument("--demers-nodes", type=int, help="experiment 2 (default 1000)")
    parser.add_argument("--demers-events", type=int, help="experiment 2, per k (default 10)")
    parser.add_argument("--nodes", type=int, help="experiments 3 to 5 (default 1000)")
    parser.add_argument("--events", type=int, help="experiments 3 to 5 (default 30)")
    parser.add_argument("--subscribers", type=int, help="experiment 4, per topic (default 50)")
    parser.add_argument("--publish-window", type=float,
                        help="experiments 3 to 5: seconds of publishing (default 10)")
    parser.add_argument("--drain", type=float,
                        help="experiments 3 to 5: seconds after the last publish (default 15)")
    parser.add_argument("--active-sizes", type=lambda v: [int(x) for x in v.split(",")],
                        help="experiment 3: HyParView active views to run (default 5,10)")
    parser.add_argument("--crash-nodes", type=int, help="experiment 6 (default 1000)")
    parser.add_argument("--crash-seeds", type=int, help="experiment 6 (default 3)")
    args = parser.parse_args()
    full = dict(rumor_nodes=10_000, rumor_events=3, demers_nodes=1000, demers_events=10,
                nodes=1000, events=30, subscribers=50, publish_window=10.0, drain=15.0,
                active_sizes=[5, 10], crash_nodes=1000, crash_seeds=3)
    quick = dict(rumor_nodes=200, rumor_events=2, demers_nodes=200, demers_events=2,
                 nodes=150, events=10, subscribers=10, publish_window=5.0, drain=10.0,
                 active_sizes=[5], crash_nodes=200, crash_seeds=1)
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    wanted = [int(x) for x in args.only.split(",") if x.strip()]
    sizes = {k: v for k, v in vars(args).items() if k in full}
    print(f"gossip_papers: {'quick' if args.quick else 'full'} run, {os.cpu_count()} cpus, "
          f"seed {args.seed}, sizes {sizes}", flush=True)
    started = time.perf_counter()
    for number in wanted:
        title, name, experiment = EXPERIMENTS[number]
        t0 = time.perf_counter()
        rows = experiment(args)
        show(f"{title}  ({time.perf_counter() - t0:.0f} s)", rows, args.out, name)
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
