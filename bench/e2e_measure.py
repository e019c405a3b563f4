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
    #: 1-minute load average of the machine when the throughput run started.
    load: float = 0.0
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
    rounds: int = 3


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


def measure(row: Row, subs: Subscribers, publisher: Any, p: Params, warm: bool) -> Row:
    nsubs = len(subs.pipes)
    if warm:
        run = RUNS.new()
        publisher.burst(run, p.warmup, p.window)
        collect(subs, run, p.warmup, p.idle, 120)
    row.load = os.getloadavg()[0]
    rates: list[float] = []
    delivered: list[float] = []
    burst: list[float] = []
    for _ in range(max(1, p.rounds)):
        run = RUNS.new()
        start = publisher.burst(run, p.events, p.window)
        total, last, lats = collect(subs, run, p.events, p.idle, 300)
        progress(f"  throughput run: {time.monotonic() - start:.1f} s")
        rates.append(total / nsubs / max(last - start, 1e-9) if total else 0.0)
        delivered.append(total / (p.events * nsubs))
        burst += lats
    row.throughput = statistics.median(rates)
    row.throughput_min, row.throughput_max = min(rates), max(rates)
    row.delivered = min(delivered)
    burst.sort()
    row.burst_p50, row.burst_p99 = percentile(burst, 0.50), percentile(burst, 0.99)
    run = RUNS.new()
    start = publisher.paced(run, p.latency_events, p.latency_rate)
    total, _, lats = collect(subs, run, p.latency_events, p.idle, 120)
    row.lat_delivered = total / (p.latency_events * nsubs)
    progress(f"  latency run: {time.monotonic() - start:.1f} s")
    row.p50, row.p99 = percentile(lats, 0.50), percentile(lats, 0.99)
    if publisher.errors:
        row.notes.append(f"publish errors {dict(publisher.errors)}")
        publisher.errors.clear()
    return row


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
    head = (f"{'setup':<11} {'overlay':<24} {'vs':<15} {'events/s':>9} {'p50':>8} "
            f"{'p99':>8}")
    print(head)
    print("-" * len(head))
    for setup in dict.fromkeys(r.setup for r in rows):
        overlay = [r for r in rows if r.setup == setup and r.system.startswith("overlay")]
        brokers = [r for r in rows if r.setup == setup and not r.system.startswith("overlay")]
        for o in overlay:
            for b in brokers:
                print(f"{setup:<11} {o.system:<24} {b.system:<15} "
                      f"{ratio(o.throughput, b.throughput):>9} {ratio(o.p50, b.p50):>8} "
                      f"{ratio(o.p99, b.p99):>8}")
