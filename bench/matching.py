"""Matching throughput: the index against one-by-one evaluation, and summary precision.

Workload (seeded):
- 10 attributes: s0..s5 strings with values drawn Zipf(1.2) from 1,000 values
  ("v0".."v999"), n0..n3 numbers uniform in [0, 1000);
- each subscription a conjunction of 1-3 predicates on distinct attributes: 80%
  equality on a string attribute (value uniform over the 1,000), 20% a numeric range
  (`n > c` with c in [980, 1000), `n < c` with c in [0, 20), or `n BETWEEN a AND a+w`
  with w in [1, 20]); 5% of subscriptions are an OR of two such conjunctions;
- events carry all 10 attributes.
Reported: events/s for the index and for one-by-one evaluation (on a sample), the
measured match rate, index memory (tracemalloc), add and remove cost, and the false-
positive rate of a summary of N filters at its size bound.

Run: .venv/bin/python bench/matching.py [--quick]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import tracemalloc
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path, and this file's name
# would hide the ``matching`` package it measures.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]

from matching import Index, Summary, parse  # noqa: E402

STRING_ATTRS = [f"s{i}" for i in range(6)]
NUMBER_ATTRS = [f"n{i}" for i in range(4)]
VALUES = 1000


def zipf_weights(n: int, s: float = 1.2) -> list[float]:
    return [1 / (k**s) for k in range(1, n + 1)]


def conjunction(rng: random.Random) -> str:
    count = rng.randint(1, 3)
    chosen: list[str] = []
    while len(chosen) < count:
        attr = rng.choice(STRING_ATTRS if rng.random() < 0.8 else NUMBER_ATTRS)
        if attr not in chosen:
            chosen.append(attr)
    preds = []
    for attr in chosen:
        if attr.startswith("s"):
            # Subscribers name values uniformly; events are Zipf (popular values are
            # published often): this puts the match rate in the 0.1-1% band.
            preds.append(f"{attr} = 'v{rng.randrange(VALUES)}'")
        else:
            # Narrow ranges: thresholds in the outer 2% and windows of 1-20 units.
            c = rng.uniform(0, 1000)
            form = rng.randrange(3)
            if form == 0:
                preds.append(f"{attr} > {rng.uniform(980, 1000):.1f}")
            elif form == 1:
                preds.append(f"{attr} < {rng.uniform(0, 20):.1f}")
            else:
                preds.append(f"{attr} BETWEEN {c:.1f} AND {c + rng.uniform(1, 20):.1f}")
    return " AND ".join(preds)


def subscription(rng: random.Random, weights: list[float]) -> str:
    # Mostly equality: draw attributes so that ~80% of predicates are string equality.
    if rng.random() < 0.05:
        return f"({conjunction(rng)}) OR ({conjunction(rng)})"
    return conjunction(rng)


def event(rng: random.Random, weights: list[float]) -> dict[str, object]:
    attrs: dict[str, object] = {a: f"v{rng.choices(range(VALUES), weights)[0]}"
                                for a in STRING_ATTRS}
    attrs.update({a: rng.uniform(0, 1000) for a in NUMBER_ATTRS})
    return attrs


def run(count: int, events: int, sample: int, rng: random.Random, weights: list[float]) -> None:
    texts = [subscription(rng, weights) for _ in range(count)]
    parsed = [parse(t) for t in texts]
    evs = [event(rng, weights) for _ in range(events)]

    tracemalloc.start()
    index = Index()
    start = time.perf_counter()
    for key, f in enumerate(parsed):
        index.add(key, f)
    add_us = (time.perf_counter() - start) / count * 1e6
    memory = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()

    start = time.perf_counter()
    matched = sum(len(index.match(e)) for e in evs)
    index_rate = events / (time.perf_counter() - start)

    sample_evs = evs[:sample]
    start = time.perf_counter()
    brute = [sum(f.matches(e) for f in parsed) for e in sample_evs]
    brute_rate = len(sample_evs) / (time.perf_counter() - start)
    assert brute == [len(index.match(e)) for e in sample_evs], "index disagrees"

    start = time.perf_counter()
    for key in range(0, count, 10):
        index.remove(key)
    remove_us = (time.perf_counter() - start) / len(range(0, count, 10)) * 1e6
    print(f"{count:>7} subs: index {index_rate:>9,.0f} ev/s | one-by-one {brute_rate:>8,.1f} "
          f"ev/s | x{index_rate / brute_rate:>6,.0f} | match rate "
          f"{matched / events / count:.3%} | memory {memory / 2**20:6.1f} MiB | "
          f"add {add_us:5.1f} us | remove {remove_us:5.1f} us")


def summary_precision(rng: random.Random, weights: list[float], n: int) -> None:
    texts = [subscription(rng, weights) for _ in range(n)]
    summary = Summary.of(texts)
    parsed = [parse(t) for t in texts]
    evs = [event(rng, weights) for _ in range(2000)]
    truly = [any(f.matches(e) for f in parsed) for e in evs]
    says = [summary.may_match(e) for e in evs]
    assert all(s for s, t in zip(says, truly, strict=True) if t), "false negative"
    negatives = sum(1 for t in truly if not t)
    fp = sum(1 for s, t in zip(says, truly, strict=True) if s and not t)
    bloom_bytes = sum(len(v) for v in summary.to_wire().get("eq", {}).values())
    print(f"summary of {n:>6} filters (bound {summary.max_filters}, coarse={summary.coarse}): "
          f"false-positive rate {fp / max(negatives, 1):.3f} over {negatives} non-matching "
          f"events, {bloom_bytes} B of Bloom bits")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rng = random.Random(7)
    weights = zipf_weights(VALUES)
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    for count in sizes:
        run(count, 2000 if count < 100_000 else 5000, 20 if count >= 100_000 else 200, rng,
            weights)
    for n in (10, 64, 1000, 10_000):
        summary_precision(rng, weights, n)


if __name__ == "__main__":
    main()
