"""bench/e2e.py's measurements (throughput and paced latency runs against the
subscriber processes) and its report (the table and the overlay / broker ratios)."""

from __future__ import annotations

import os
import statistics
import sys
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from bench.e2e_workload import PAYLOAD_SIZE, PROBE_RUN, Subscribers


@dataclass
class Row:
    setup: str
    system: str
    subscribers: int
    #: Median over the throughput rounds, and the slowest and fastest round.
    throughput: float = 0.0
    throughput_min: float = 0.0
    throughput_max: float = 0.0
    delivered: float = 0.0
    burst_p50: float = float("nan")
    burst_p99: float = float("nan")
    p50: float = float("nan")
    p99: float = float("nan")
    lat_delivered: float = 0.0
    #: 1-minute load average of the machine when the first throughput round started.
    load: float = 0.0
    #: Events per second of each throughput round, in round order.
    rates: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * len(values)))]


@dataclass
class Params:
    events: int
    warmup: int
    window: int
    latency_events: int
    latency_rate: float
    idle: float
    #: Throughput runs per system; the median is reported (the machine is shared).
    rounds: int = 5


class Runs:
    def __init__(self) -> None:
        self.next = PROBE_RUN + 1

    def new(self) -> int:
        run = self.next
        self.next += 1
        return run


RUNS = Runs()


def collect(subs: Subscribers, run: int, n: int, idle: float,
            cap: float) -> tuple[int, float, list[float]]:
    """Wait for ``run``; total events received, last receipt, sorted latencies (ms)."""
    subs.wait(run, n, idle, cap)
    total, last, lats = 0, 0.0, array("d")
    for count, last_at, raw in subs.ask("stats", run):
        total += count
        last = max(last, last_at)
        lats.frombytes(raw)
    return total, last, sorted(x * 1e3 for x in lats)


def probe(subs: Subscribers, publisher: Any, timeout: float = 60.0) -> None:
    """Publish probes until every subscriber heard one (overlay JOINs take a moment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        publisher.burst(PROBE_RUN, 1, 1)
        time.sleep(0.2)
        if min(c for c, _ in subs.ask("count", PROBE_RUN)) > 0:
            subs.ask("stats", PROBE_RUN)
            return
    raise RuntimeError("the subscribers did not hear the probes within "
                       f"{timeout:.0f} s")


@dataclass
class Contender:
    """One system of a setup, up at the same time as the others: its row, its subscriber
    processes and its publisher (the overlay's two rows share one publisher, each in its
    own mode)."""

    row: Row
    subs: Subscribers
    publisher: Any
    reliable: bool | None = None
    delivered: list[float] = field(default_factory=list)
    burst: list[float] = field(default_factory=list)

    def take_turn(self) -> None:
        if self.reliable is not None:
            self.publisher.reliable = self.reliable


def warm(c: Contender, p: Params) -> None:
    c.take_turn()
    run = RUNS.new()
    c.publisher.burst(run, p.warmup, p.window)
    collect(c.subs, run, p.warmup, p.idle, 120)


def throughput_round(c: Contender, p: Params) -> None:
    """One burst of ``p.events``: its rate joins the row's rounds."""
    c.take_turn()
    nsubs = len(c.subs.pipes)
    if not c.row.rates:
        c.row.load = os.getloadavg()[0]
    run = RUNS.new()
    start = c.publisher.burst(run, p.events, p.window)
    total, last, lats = collect(c.subs, run, p.events, p.idle, 300)
    rate = total / nsubs / max(last - start, 1e-9) if total else 0.0
    progress(f"  {c.row.system}: {rate:,.0f} events/s "
             f"({time.monotonic() - start:.1f} s, load {os.getloadavg()[0]:.2f})")
    c.row.rates.append(rate)
    c.delivered.append(total / (p.events * nsubs))
    c.burst += lats


def latency_run(c: Contender, p: Params) -> None:
    c.take_turn()
    nsubs = len(c.subs.pipes)
    run = RUNS.new()
    start = c.publisher.paced(run, p.latency_events, p.latency_rate)
    total, _, lats = collect(c.subs, run, p.latency_events, p.idle, 120)
    c.row.lat_delivered = total / (p.latency_events * nsubs)
    progress(f"  {c.row.system}: latency run {time.monotonic() - start:.1f} s")
    c.row.p50, c.row.p99 = percentile(lats, 0.50), percentile(lats, 0.99)


def compare(contenders: list[Contender], p: Params) -> list[Row]:
    """Every contender's warm-up, then the throughput rounds interleaved: each round runs
    every contender once, starting one further along the list each time, so that the
    machine's load moving during the benchmark falls on every system alike (run one
    system's rounds after another's, and a ratio compared two different machines);
    then the paced latency runs."""
    for c in contenders:
        warm(c, p)
    n = len(contenders)
    for r in range(max(1, p.rounds)):
        progress(f"throughput round {r + 1} of {p.rounds}")
        for i in range(n):
            throughput_round(contenders[(r + i) % n], p)
    for c in contenders:
        latency_run(c, p)
        row = c.row
        row.throughput = statistics.median(row.rates)
        row.throughput_min, row.throughput_max = min(row.rates), max(row.rates)
        row.delivered = min(c.delivered)
        c.burst.sort()
        row.burst_p50, row.burst_p99 = percentile(c.burst, 0.50), percentile(c.burst, 0.99)
        if c.publisher.errors:
            row.notes.append(f"publish errors {dict(c.publisher.errors)}")
            c.publisher.errors.clear()
    return [c.row for c in contenders]


def paired(a: Row, b: Row) -> list[float]:
    """Per round, ``a``'s rate over ``b``'s (the two ran within one round, minutes apart
    at most: the fairest comparison on a shared machine)."""
    return sorted(x / y for x, y in zip(a.rates, b.rates, strict=True) if y > 0)


def progress(text: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def fmt(x: float, digits: int = 2) -> str:
    return "-" if x != x else f"{x:.{digits}f}"


def ratio(a: float, b: float) -> str:
    return "-" if not (a == a and b == b) or b == 0 else f"{a / b:.3f}"


def report(rows: list[Row], p: Params) -> None:
    print()
    print(f"publish-to-notify, {PAYLOAD_SIZE}-byte payloads: throughput over {p.events} "
          f"events (window {p.window}), median of {p.rounds} runs (min-max beside it); "
          f"p50/p99 over {p.latency_events} events paced at {p.latency_rate:g}/s; burst "
          "p50/p99 (ms) = latency of the throughput events")
    head = (f"{'setup':<11} {'system':<24} {'subs':>4} {'events/s':>9} {'min-max':>13} "
            f"{'deliv':>6} {'p50 ms':>8} {'p99 ms':>8} {'burst p50':>9} {'burst p99':>9} "
            f"{'loadavg':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        deliv = min(r.delivered, r.lat_delivered)
        notes = f"  {'; '.join(r.notes)}" if r.notes else ""
        spread = f"{r.throughput_min:.0f}-{r.throughput_max:.0f}"
        print(f"{r.setup:<11} {r.system:<24} {r.subscribers:>4} {r.throughput:>9.0f} "
              f"{spread:>13} {deliv:>6.1%} {fmt(r.p50, 3):>8} {fmt(r.p99, 3):>8} "
              f"{fmt(r.burst_p50, 1):>9} {fmt(r.burst_p99, 1):>9} {r.load:>7.2f}{notes}")
    print()
    print("ratios overlay / broker (events/s: > 1 = overlay faster; p50, p99: > 1 = overlay "
          "slower)")
    head = (f"{'setup':<11} {'overlay':<24} {'vs':<15} {'events/s':>9} {'paired':>7} "
            f"{'min-max':>11} {'p50':>8} {'p99':>8}")
    print(head)
    print("-" * len(head))
    for setup in dict.fromkeys(r.setup for r in rows):
        overlay = [r for r in rows if r.setup == setup and r.system.startswith("overlay")]
        brokers = [r for r in rows if r.setup == setup and not r.system.startswith("overlay")]
        for o in overlay:
            for b in brokers:
                pairs = paired(o, b)
                mid = f"{statistics.median(pairs):.3f}" if pairs else "-"
                spread = f"{pairs[0]:.2f}-{pairs[-1]:.2f}" if pairs else "-"
                print(f"{setup:<11} {o.system:<24} {b.system:<15} "
                      f"{ratio(o.throughput, b.throughput):>9} {mid:>7} {spread:>11} "
                      f"{ratio(o.p50, b.p50):>8} {ratio(o.p99, b.p99):>8}")
    print("events/s: ratio of the medians; paired: median (min-max) over the rounds of "
          "the ratio within one round")
