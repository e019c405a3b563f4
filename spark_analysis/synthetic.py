"""Seeded generator of realistic trace directories (TRACES.md records), for tests and bench.

It plays a small pub/sub run: nodes come up, topic trees form (real parents, children,
depths), subscriptions with filters in the FILTERS.md language come and go, events are
published with typed attrs and travel down the trees (or by push gossip on gossip
topics) as forward/recv/deliver records with hop counts. Faults are injected on
purpose: lost transmissions (missing deliveries), deliveries to non-matching
subscriptions (false), repeated deliveries (duplicates), a detached member and a
parent cycle, unparsable filters, lookups that fail, records of another run, rotated
files, a subdirectory, and malformed lines.

The generator decides deliveries with its own predicates for the few filters it uses;
the analysis and the tests evaluate filters with the ``matching`` package, so the two
are independent. Lines are formatted directly (no json.dumps per record) so that
millions of records take seconds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from spark_analysis.synthetic_model import FILTERS, MALFORMED, Info, Spec
from spark_analysis.synthetic_run import Run

__all__ = ["FILTERS", "MALFORMED", "Info", "Spec", "generate", "main"]


def generate(out_dir: str | Path, spec: Spec | None = None) -> Info:
    """Write a trace directory for ``spec`` into ``out_dir`` (created; must be empty)."""
    spec = spec or Spec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty")
    g = Run(spec, out)
    r = g.rng
    ts = g.setup(spec.start_ts)
    target = spec.records
    # Malformed lines land between records; with a target, spread over its range.
    span = target if target is not None else spec.events * 40
    g.w.malformed_at = set(r.sample(range(max(span, spec.malformed)), spec.malformed))
    tree_topics = [t for t in g.topics if t not in g.gossip]
    horizon = ts + (spec.events if target is None else target / 40) * 0.05
    for topic in tree_topics:
        for _ in range(3):
            g.at(r.uniform(ts, horizon), lambda t, tp=topic: g.move(t, tp))
        g.at(r.uniform(ts, horizon), lambda t, tp=topic: g.leave(t, tp))
        for _ in range(4):  # late subscriptions on members
            g.at(r.uniform(ts, horizon), lambda t, tp=topic: g.late_subscribe(t, tp))
    for _ in range(spec.other_run_records):
        g.other_run(r.uniform(ts, horizon))
    events = 0
    lookup_debt = 0.0
    while (target is None and events < spec.events) or (
        target is not None and g.w.counter < target
    ):
        ts += r.expovariate(20.0)
        g.run_due(ts)
        g.w.release(ts)
        g.event(ts)
        events += 1
        lookup_debt += spec.lookups_per_event
        while lookup_debt >= 1:
            lookup_debt -= 1
            g.lookup(ts + r.uniform(0, 0.05))
    g.run_due(float("inf"))
    for i in range(min(3, len(g.ids))):
        g.rec(ts + 5.0 + i, i, "node_down", ',"reason":"stop"')
    g.w.close()
    if spec.malformed:
        # A crash mid-write leaves a last line without its end.
        victim = g.w.paths[-1]
        with open(victim, "a", encoding="utf-8") as fh:
            fh.write('{"ts":1.0,"node":"' + g.ids[-1] + '","ev":"looku')
        g.w.bad += 1
    info = Info(out, records=g.w.written, bad_lines=g.w.bad, events=events, topics=g.topics)
    info.files = sorted(p for p in out.rglob("*.jsonl*"))
    return info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write a synthetic trace directory.")
    p.add_argument("out")
    p.add_argument("--records", type=int, default=None)
    p.add_argument("--events", type=int, default=300)
    p.add_argument("--nodes", type=int, default=48)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    info = generate(
        args.out, Spec(seed=args.seed, nodes=args.nodes, events=args.events, records=args.records)
    )
    print(
        f"{info.records} records, {info.bad_lines} malformed lines, {info.events} events, "
        f"{len(info.files)} files in {info.out_dir}"
    )
    return 0
