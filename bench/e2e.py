"""End-to-end publish-to-notify throughput and latency: the overlay daemons against
Mosquitto (MQTT QoS 0) and Redis pub/sub, same workload, same machine, same run.

Setups:
  1 daemon     one ``overlay daemon``; the publisher and one subscriber on its local API
  10 daemons   a ring of ``--nodes`` daemons (``deploy.cluster``); the publisher on n00,
               ``--subscribers`` subscribers, each on another daemon (n01, n02, ...)
and the same publisher and subscriber counts on one Mosquitto broker and on one Redis
server, both started here on free loopback ports and stopped at the end (skipped, with a
message, when ``mosquitto`` or ``redis-server`` is not installed).

Workload: one topic, events with a 100-byte payload whose first 16 bytes carry the
send time (``time.monotonic``, system-wide on Linux), a run number and a sequence number;
no attributes, empty filter. Every subscriber is its own process (one connection), the
publisher is this process. Per system: probes until every subscriber hears one, a
warm-up of ``--warmup`` events, then
  throughput  ``--events`` events as fast as the publisher can send them: overlay
              publishes pipelined on one raw API connection (``--window`` requests
              outstanding, replies read as they come), Redis PUBLISH in pipelines of
              ``--window`` commands, MQTT QoS 0 publishes (no acknowledgement exists).
              events/s = events received per subscriber / (last receipt - first send),
              run ``--rounds`` times: the median is reported, with the slowest and
              fastest run beside it (one run moved by up to 40% on this shared machine);
              "burst p50/p99" are the latencies of those events (mostly queueing);
  latency     ``--latency-events`` events paced at ``--latency-rate`` per second,
              each timed from its send to its receipt: "p50"/"p99".
The overlay runs twice: ``reliable=False`` and ``reliable=True`` (reply once the topic's
root has numbered the event). Ratios are overlay / broker (throughput: > 1 means the
overlay is faster; latency: > 1 means the overlay is slower).

Defaults: 10000 events in 3 rounds, 1000 warm-up, 500 paced at 50/s; ``--quick``: 2000 in
1 round, 200, 100.
The overlay's 10-daemon cluster uses the default protocol periods. Receipt time is when
the subscriber's read returned (before decoding). The table's loadavg column is the
machine's 1-minute load average when the row's throughput run began: other work on the
machine shows in the figures.

All clients are Python (raw frames for the overlay, paho-mqtt, redis-py): client cost
is in every figure. Needs the ``bench`` extra (``pip install -e .[bench]``).

Run: .venv/bin/python bench/e2e.py [--quick] [--events N] [--nodes 10] [--subscribers 9]
     [--single]   (only the 1-daemon setup)

Parts: bench/e2e_workload.py (payload, subscriber processes), e2e_publishers.py,
e2e_brokers.py (Mosquitto, Redis), e2e_measure.py (runs, table, ratios).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path: take it out (its modules
# must not hide packages: bench/scribe.py, bench/matching.py) and put the repository root
# in; this benchmark's own modules are then ``bench.e2e_*``.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.e2e_brokers import broker  # noqa: E402
from bench.e2e_measure import Params, Row, measure, probe, progress, report  # noqa: E402
from bench.e2e_publishers import MqttPublisher, OverlayPublisher, RedisPublisher  # noqa: E402
from bench.e2e_workload import Subscribers  # noqa: E402
from deploy import cluster  # noqa: E402


def bench_overlay(setup: str, nodes: int, nsubs: int, p: Params, work: Path) -> list[Row]:
    progress(f"{setup}: starting {nodes} daemon(s)")
    inventory = cluster.up(work / f"cluster-{nodes}", nodes, timeout=120.0)
    progress(f"{setup}: {nodes} daemon(s) ready")
    rows = []
    try:
        api = [node.api for node in inventory.nodes]
        targets = [api[0]] if nodes == 1 else [api[1 + i % (nodes - 1)] for i in range(nsubs)]
        subs = Subscribers("overlay", targets)
        progress(f"{setup}: {len(targets)} subscriber(s) subscribed")
        publisher = OverlayPublisher(api[0])
        try:
            probe(subs, publisher)
            progress(f"{setup}: every subscriber heard a probe")
            for i, reliable in enumerate((False, True)):
                publisher.reliable = reliable
                name = f"overlay reliable={reliable}"
                progress(f"{setup}: {name}, {len(targets)} subscriber(s)")
                rows.append(measure(Row(setup, name, len(targets)), subs, publisher, p,
                                    warm=i == 0))
        finally:
            publisher.close()
            subs.close()
    finally:
        outcome = cluster.down(inventory)
        if any(v == "killed" for v in outcome.values()):
            progress(f"{setup}: some daemons had to be killed: {outcome}")
    return rows


def bench_broker(name: str, port: int, setup: str, nsubs: int, p: Params) -> Row:
    kind = "mqtt" if name == "mosquitto" else "redis"
    system = "mosquitto QoS0" if name == "mosquitto" else "redis pub/sub"
    progress(f"{setup}: {system}, {nsubs} subscriber(s)")
    subs = Subscribers(kind, [port] * nsubs)
    publisher: Any = MqttPublisher(port) if name == "mosquitto" else RedisPublisher(port)
    try:
        probe(subs, publisher)
        return measure(Row(setup, system, nsubs), subs, publisher, p, warm=True)
    finally:
        publisher.close()
        subs.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="2000 events, 200 warm-up, 100 paced")
    parser.add_argument("--events", type=int, help="throughput events (default 10000)")
    parser.add_argument("--warmup", type=int, help="warm-up events (default 1000)")
    parser.add_argument("--window", type=int, default=256,
                        help="outstanding publishes / pipeline depth (default 256)")
    parser.add_argument("--latency-events", type=int, help="paced events (default 500)")
    parser.add_argument("--latency-rate", type=float, default=50.0,
                        help="paced events per second (default 50)")
    parser.add_argument("--nodes", type=int, default=10, help="daemons of the overlay setup")
    parser.add_argument("--subscribers", type=int,
                        help="subscribers of the overlay setup (default nodes - 1)")
    parser.add_argument("--rounds", type=int,
                        help="throughput runs per system, median reported (default 3; "
                             "--quick: 1)")
    parser.add_argument("--single", action="store_true",
                        help="only the 1-daemon setup (and its Mosquitto and Redis rows)")
    args = parser.parse_args(argv)
    quick = args.quick
    p = Params(events=args.events or (2_000 if quick else 10_000),
               warmup=args.warmup or (200 if quick else 1_000), window=args.window,
               latency_events=args.latency_events or (100 if quick else 500),
               latency_rate=args.latency_rate, idle=5.0,
               rounds=args.rounds or (1 if quick else 3))
    nsubs = args.subscribers or max(1, args.nodes - 1)
    wide = f"{args.nodes} daemons"
    load_start = os.getloadavg()[0]
    progress(f"{os.cpu_count()} CPUs, load average {load_start:.2f} at start")
    rows: list[Row] = []
    began = time.monotonic()
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="e2e-")))
        rows += bench_overlay("1 daemon", 1, 1, p, work)
        if not args.single:
            rows += bench_overlay(wide, args.nodes, nsubs, p, work)
        for name in ("mosquitto", "redis"):
            with broker(name, work) as port:
                if port is not None:
                    rows.insert(sum(r.setup == "1 daemon" for r in rows),
                                bench_broker(name, port, "1 daemon", 1, p))
                    if not args.single:
                        rows.append(bench_broker(name, port, wide, nsubs, p))
    progress(f"done in {time.monotonic() - began:.0f} s, load average "
             f"{os.getloadavg()[0]:.2f} at the end")
    print(f"\n{os.cpu_count()} CPUs; load average {load_start:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end (loadavg column: when each row's "
          "throughput run began)")
    report(rows, p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
