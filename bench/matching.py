"""Matching throughput: the index against one-by-one evaluation, and summary precision.

Workload (seeded, the same on every run):

- 10 attributes per event: s0..s5 strings, values drawn Zipf(1.2) from 1,000 values
  ("v0".."v999"); n0..n3 numbers uniform in [0, 1000);
- each subscription a conjunction of 1-3 predicates on distinct attributes, each
  predicate 80% an equality on a string attribute (value uniform over the 1,000:
  subscribers name values evenly, events repeat the popular ones) and 20% a narrow
  numeric range (``n > c`` with c in [980, 1000), ``n < c`` with c in [0, 20), or
  ``n BETWEEN a AND a+w`` with w in [1, 20]); 5% of subscriptions are an OR of two
  such conjunctions;
- every event carries all 10 attributes.

Reported per subscription count (1k, 10k, 100k): events/s through ``Index.match`` and
through evaluating every filter (``Filter.matches``; on a sample of events), their
ratio, the measured match rate (matches / (events x subscriptions)), the index's memory
(tracemalloc, filters excluded), and the cost of ``add`` and ``remove`` per operation
(10% of the subscriptions removed and added back). Times are CPU time of this
single-threaded process (``time.process_time``: one core), so that other work on a
shared machine does not count; the index's wall-clock rate and the load average are
printed beside them (on a loaded machine CPU time still suffers from shared caches and
cores: compare runs taken back to back). Then, for summaries at their size bound (64
exact filters; coarse beyond), of N subscriptions and of a merge of 10 such summaries:
the false-positive rate (``Summary.precision``: yes answers on events no filter
matches), the CBOR size and the build time.

Skewed workloads (``--skewed``, also part of a full run): popular values appear in many
filters and many events, so far more subscriptions match each event. Five string
attributes whose values follow a Zipf law (in subscriptions and events alike), five
numeric ones uniform in [0, 1000); each subscription a conjunction of 1-3 predicates on
distinct attributes, three quarters string equalities, one quarter ``BETWEEN`` ranges,
5% an OR of two conjunctions. Four settings of value count, Zipf exponent and range
width give match rates from about 0.01% to 2% (:data:`SKEWED`). For each: events/s one
event at a time (``Index.match``: a set of keys) and in batches
(``Index.match_many``, when the index has it), in CPU and wall time, each in steady
state (timed on a second pass over the events: the first makes the arrays of the
postings they meet, as the bulk index does once per change), matches per
event, microseconds per match, one-by-one evaluation on a sample, and add/remove costs
(add: building the index; an index with ``match_many`` makes its bulk copy at the first
batch, whose cost per filter is printed beside; re-add and remove come after the
batches, with that copy kept), then the ratio of those costs to an index of the same
filters without the copy, in alternated pairs (``bulk/plain``).

Run: .venv/bin/python bench/matching.py [--quick] [--skewed] [--count N] [--batch N]
(--quick: 1k and 10k subscriptions, fewer events, summaries up to 1,000 filters;
--skewed: only the skewed workloads, at --count subscriptions, 100,000 by default;
--batch: events per ``match_many`` call, 64 by default. The daemon matches what it has
at hand in one call (a fill, a run of held copies, a release), so its batches vary:
at 100,000 filters numpy's fixed costs come to about 300 us a call, so that 16 events a
call run at about 70% of 64's rate and 256 at about 110%.)
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cbor2

# Run as a script, this file's folder comes first on sys.path, and this file's name
# would hide the ``matching`` package it measures.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]

from matching import Filter, Index, Summary, parse  # noqa: E402

STRING_ATTRS = [f"s{i}" for i in range(6)]
NUMBER_ATTRS = [f"n{i}" for i in range(4)]
VALUES = 1000
ZIPF_WEIGHTS = [1 / k**1.2 for k in range(1, VALUES + 1)]
Event = dict[str, object]


def pick_attributes(rng: random.Random, strings: list[str], numbers: list[str],
                    string_share: float, size: int | None = None) -> list[str]:
    """``size`` distinct attributes, each a string one with probability
    ``string_share``; with no ``size``, a size of 1-3 drawn again at each step (how the
    first workload always drew them: kept, so that its figures stay comparable)."""
    chosen: list[str] = []
    while len(chosen) < (rng.randint(1, 3) if size is None else size):
        attr = rng.choice(strings if rng.random() < string_share else numbers)
        if attr not in chosen:
            chosen.append(attr)
    return chosen


def conjunction(rng: random.Random) -> str:
    preds = []
    for attr in pick_attributes(rng, STRING_ATTRS, NUMBER_ATTRS, 0.8):
        if attr.startswith("s"):
            preds.append(f"{attr} = 'v{rng.randrange(VALUES)}'")
        elif (form := rng.randrange(3)) == 0:
            preds.append(f"{attr} > {rng.uniform(980, 1000):.1f}")
        elif form == 1:
            preds.append(f"{attr} < {rng.uniform(0, 20):.1f}")
        else:
            low = rng.uniform(0, 1000)
            preds.append(f"{attr} BETWEEN {low:.1f} AND {low + rng.uniform(1, 20):.1f}")
    return " AND ".join(preds)


def subscription(rng: random.Random) -> str:
    if rng.random() < 0.05:
        return f"({conjunction(rng)}) OR ({conjunction(rng)})"
    return conjunction(rng)


def event(rng: random.Random) -> Event:
    attrs: Event = {a: f"v{rng.choices(range(VALUES), ZIPF_WEIGHTS)[0]}"
                    for a in STRING_ATTRS}
    attrs.update({a: rng.uniform(0, 1000) for a in NUMBER_ATTRS})
    return attrs


@dataclass(frozen=True)
class Skew:
    """One skewed workload: string values v0..v{values-1} drawn Zipf(exponent), range
    widths uniform in [width_low, width_high]."""

    name: str
    values: int
    exponent: float
    width_low: float
    width_high: float


#: Match rates measured at 100k subscriptions: about 0.01%, 0.12%, 0.6% and 2%.
SKEWED = [Skew("0.01%", 10_000, 0.3, 0.1, 2.0), Skew("0.1%", 1000, 0.3, 1.0, 20.0),
          Skew("0.6%", 1000, 0.7, 5.0, 100.0), Skew("2%", 1000, 1.15, 5.0, 100.0)]
SKEWED_STRINGS = [f"s{i}" for i in range(5)]
SKEWED_NUMBERS = [f"n{i}" for i in range(5)]


class SkewedWorkload:
    def __init__(self, skew: Skew, rng: random.Random) -> None:
        self.skew, self.rng = skew, rng
        self.values = [f"v{k}" for k in range(skew.values)]
        self.cumulative = list(itertools.accumulate(
            1 / k**skew.exponent for k in range(1, skew.values + 1)))

    def value(self) -> str:
        return self.rng.choices(self.values, cum_weights=self.cumulative)[0]

    def conjunction(self) -> str:
        rng, preds = self.rng, []
        for attr in pick_attributes(rng, SKEWED_STRINGS, SKEWED_NUMBERS, 0.75,
                                    rng.randint(1, 3)):
            if attr.startswith("s"):
                preds.append(f"{attr} = '{self.value()}'")
            else:
                width = rng.uniform(self.skew.width_low, self.skew.width_high)
                low = rng.uniform(0, 1000 - width)
                preds.append(f"{attr} BETWEEN {low:.2f} AND {low + width:.2f}")
        return " AND ".join(preds)

    def subscription(self) -> str:
        if self.rng.random() < 0.05:
            return f"({self.conjunction()}) OR ({self.conjunction()})"
        return self.conjunction()

    def event(self) -> Event:
        attrs: Event = {a: self.value() for a in SKEWED_STRINGS}
        attrs.update({a: self.rng.uniform(0, 1000) for a in SKEWED_NUMBERS})
        return attrs


def rates(run: Callable[[], object], events: int) -> tuple[float, float]:
    """Events/s of ``run`` (which handles ``events`` events) in CPU and in wall time."""
    gc.collect()  # see churn
    start, cpu = time.perf_counter(), time.process_time()
    run()
    return events / (time.process_time() - cpu), events / (time.perf_counter() - start)


def measure_skewed(skew: Skew, count: int, events: int, sample: int, rng: random.Random,
                   batch: int) -> None:
    workload = SkewedWorkload(skew, rng)
    filters = [parse(workload.subscription()) for _ in range(count)]
    evs = [workload.event() for _ in range(events)]
    index, add_us = build(filters)
    match_many = getattr(index, "match_many", None)
    bulk_us = None
    if match_many is not None:  # the first batch makes the bulk copy: its cost per filter
        cpu = time.process_time()
        match_many(evs[:1])
        bulk_us = (time.process_time() - cpu) / count * 1e6
    match_one = index.match
    # Steady state: each way of matching runs over the events once untimed first (the
    # bulk index makes a posting's arrays at its first use after a change; a daemon's
    # filters change far less often than its events arrive).
    matched = sum(len(match_one(e)) for e in evs)

    def one_at_a_time() -> None:
        nonlocal matched
        matched = sum(len(match_one(e)) for e in evs)
    single_cpu, single_wall = rates(one_at_a_time, events)
    line = (f"{skew.name:>5} skewed {count:>7,} subs | one at a time {single_cpu:>7,.0f} ev/s "
            f"CPU ({single_wall:>7,.0f} wall)")
    batch_cpu = None
    if match_many is not None:
        def batches() -> None:
            for i in range(0, events, batch):
                match_many(evs[i:i + batch])
        batches()  # untimed: see above
        batch_cpu, batch_wall = rates(batches, events)
        line += (f" | batches of {batch} {batch_cpu:>7,.0f} ev/s CPU "
                 f"({batch_wall:>7,.0f} wall)")
    per_event = matched / events
    sample_evs = evs[:sample]
    cpu = time.process_time()
    one_by_one = [{k for k, f in enumerate(filters) if f.matches(e)} for e in sample_evs]
    brute_rate = len(sample_evs) / (time.process_time() - cpu)
    assert one_by_one == [index.match(e) for e in sample_evs], "index disagrees"
    if match_many is not None:
        assert one_by_one == [set(m) for m in match_many(sample_evs)], "batch disagrees"
    remove_us, readd_us = churn(index, filters)
    assert one_by_one == [index.match(e) for e in sample_evs], "index disagrees after churn"
    cost_note = ""
    if match_many is not None:  # the bulk copy's price: against an index that has none
        cost_note = churn_against_plain(index, filters)
        assert one_by_one == [index.match(e) for e in sample_evs], "index disagrees"
    batch_note = "" if batch_cpu is None else \
        f" ({1e6 / batch_cpu / max(per_event, 1):.3f} in batches)"
    bulk_note = "" if bulk_us is None else f" (+{bulk_us:4.1f} at the first batch)"
    print(line + f" | one-by-one {brute_rate:,.1f} ev/s ({len(sample_evs)} ev) | "
          f"x{single_cpu / brute_rate:,.0f} | {per_event:,.0f} matches/ev (rate "
          f"{per_event / count:.3%}) | {1e6 / single_cpu / max(per_event, 1):.3f} us/match"
          f"{batch_note} | add {add_us:4.1f} us{bulk_note} | re-add {readd_us:4.1f} us | "
          f"remove {remove_us:4.1f} us{cost_note}", flush=True)


#: Rounds of :func:`churn_against_plain`: the two indexes take turns (A B A B).
CHURN_PAIRS = 4


def churn_against_plain(index: Index, filters: list[Filter]) -> str:
    """Remove and re-add costs of ``index`` (its bulk copy kept) against an index of the
    same filters that never had a batch (no bulk copy: what adding cost before bulk
    copies), in alternated rounds on disjoint twentieths of the filters; per pair the
    ratio bulk/plain, printed with the median and range."""
    plain, _ = build(filters)
    remove_ratios, readd_ratios = [], []
    for round_ in range(CHURN_PAIRS):
        plain_remove, plain_readd = churn(plain, filters, round_, 20)
        bulk_remove, bulk_readd = churn(index, filters, round_, 20)
        remove_ratios.append(bulk_remove / plain_remove)
        readd_ratios.append(bulk_readd / plain_readd)

    def spread(ratios: list[float]) -> str:
        ratios = sorted(ratios)
        return f"x{ratios[len(ratios) // 2]:.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"
    return (f" | bulk/plain over {CHURN_PAIRS} pairs: re-add {spread(readd_ratios)}, "
            f"remove {spread(remove_ratios)}")


def churn(index: Index, filters: list[Filter], start: int = 0, step: int = 10
          ) -> tuple[float, float]:
    """Microseconds per ``remove`` and per ``add`` back, for every ``step``-th filter
    from ``start``."""
    removed = range(start, len(filters), step)
    # A full collection first: one that earlier allocations made due would otherwise
    # run inside this section and be charged to it (a pass over every object of the
    # 100,000 filters: it made the first re-add after the batches cost 4x the others).
    gc.collect()
    cpu = time.process_time()
    for key in removed:
        index.remove(key)
    remove_us = (time.process_time() - cpu) / len(removed) * 1e6
    cpu = time.process_time()
    for key in removed:
        index.add(key, filters[key])
    return remove_us, (time.process_time() - cpu) / len(removed) * 1e6


def build(filters: list[Filter]) -> tuple[Index, float]:
    index = Index()
    start = time.process_time()
    for key, f in enumerate(filters):
        index.add(key, f)
    return index, (time.process_time() - start) / len(filters) * 1e6


def index_memory(filters: list[Filter]) -> int:
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index, _ = build(filters)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del index
    return used


def measure_index(count: int, events: int, sample: int, rng: random.Random) -> None:
    filters = [parse(subscription(rng)) for _ in range(count)]
    evs = [event(rng) for _ in range(events)]
    index, add_us = build(filters)

    start, cpu = time.perf_counter(), time.process_time()
    matched = sum(len(index.match(e)) for e in evs)
    index_rate = events / (time.process_time() - cpu)
    wall_rate = events / (time.perf_counter() - start)

    sample_evs = evs[:sample]
    cpu = time.process_time()
    one_by_one = [{k for k, f in enumerate(filters) if f.matches(e)} for e in sample_evs]
    brute_rate = len(sample_evs) / (time.process_time() - cpu)
    assert one_by_one == [index.match(e) for e in sample_evs], "index disagrees"

    remove_us, readd_us = churn(index, filters)
    assert one_by_one == [index.match(e) for e in sample_evs], "index disagrees after churn"

    memory = index_memory(filters)
    print(f"{count:>7,} subs | index {index_rate:>7,.0f} ev/s (wall {wall_rate:>7,.0f}) | "
          f"one-by-one {brute_rate:>7,.1f} ev/s ({len(sample_evs)} ev) | "
          f"x{index_rate / brute_rate:>5,.0f} | match rate {matched / events / count:.3%} | "
          f"index memory {memory / 2**20:5.1f} MiB | add {add_us:4.1f} us "
          f"(re-add {readd_us:4.1f}) | remove {remove_us:4.1f} us")


def measure_summary(count: int, rng: random.Random) -> None:
    texts = [subscription(rng) for _ in range(count)]
    filters = [parse(t) for t in texts]
    evs = [event(rng) for _ in range(2000)]
    start = time.perf_counter()
    summary = Summary.of(filters)
    build_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    parts = [Summary.of(filters[i::10]) for i in range(10)]
    merged = parts[0].merge(*parts[1:])
    merge_ms = (time.perf_counter() - start) * 1e3
    for name, s, ms in (("of", summary, build_ms), ("merge of 10", merged, merge_ms)):
        p = s.precision(filters, evs)
        assert p.false_negatives == 0, "a summary said no to a matching event"
        shape = f"coarse, {len(s.filters)} exact" if s.coarse else f"{len(s.filters)} exact"
        print(f"summary {name:<11} of {count:>7,} filters ({shape:<15}): false-positive rate "
              f"{p.false_positive_rate:6.1%} over {p.events - p.matching:>4} non-matching events"
              f" | {len(cbor2.dumps(s.to_wire())):>6,} B CBOR | built in {ms:7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--skewed", action="store_true", help="only the skewed workloads")
    parser.add_argument("--count", type=int, default=100_000,
                        help="subscriptions of the skewed workloads")
    parser.add_argument("--batch", type=int, default=64, help="events per match_many call")
    args = parser.parse_args()
    rng = random.Random(7)
    print(f"Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} cores; events/s per CPU second of this process")
    count = 10_000 if args.quick and not args.skewed else args.count
    for skew in SKEWED:
        measure_skewed(skew, count, 1000 if args.quick else 5000, 10, random.Random(11),
                       args.batch)
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    if args.skewed:
        return
    for count in [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]:
        events = 1000 if args.quick else 5000
        sample = {1_000: 200, 10_000: 50, 100_000: 10}[count]
        measure_index(count, events, sample, rng)
    for count in [64, 200, 1_000] if args.quick else [64, 200, 1_000, 10_000, 100_000]:
        measure_summary(count, rng)


if __name__ == "__main__":
    main()
