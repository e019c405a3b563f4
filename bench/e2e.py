"""End-to-end publish-to-notify throughput and latency through Python clients: the
overlay daemons against Mosquitto (MQTT QoS 0) and Redis pub/sub.

What this measures is mostly the Python clients' own cost (raw frames, paho-mqtt,
redis-py): they are the bottleneck on every side, so its ratios say little about the
systems. The fair comparison, every system driven from one Node.js harness with the
brokers' native tools as ceilings, is bench/throughput/ (run.mjs).

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
publisher is this process. Per setup, every system is up at once; per system: probes
until every subscriber hears one, a warm-up of ``--warmup`` events, then
  throughput  ``--events`` events as fast as the publisher can send them: overlay
              publishes pipelined on one raw API connection (``--window`` requests
              outstanding, replies read as they come), Redis PUBLISH in pipelines of
              ``--window`` commands, MQTT QoS 0 publishes (no acknowledgement exists).
              events/s = events received per subscriber / (last receipt - first send),
              run ``--rounds`` times, interleaved: each round runs every system once
              (in an order rotated per round), so that the machine's load moving
              during the benchmark falls on all of them alike; the median is reported,
              with the slowest and fastest round beside it, and each overlay / broker
              ratio also per round ("paired": median and range);
              "burst p50/p99" are the latencies of those events (mostly queueing);
  latency     ``--latency-events`` events paced at ``--latency-rate`` per second,
              each timed from its send to its receipt: "p50"/"p99".
The overlay runs twice: ``reliable=False`` and ``reliable=True`` (reply once the topic's
root has numbered the event). Ratios are overlay / broker (throughput: > 1 means the
overlay is faster; latency: > 1 means the overlay is slower).

Defaults: 10000 events in 5 rounds, 1000 warm-up, 500 paced at 50/s; ``--quick``: 2000 in
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
from bench.e2e_measure import (  # noqa: E402
    Contender,
    Params,
    Row,
    compare,
    probe,
    progress,
    report,
)
from bench.e2e_publishers import MqttPublisher, OverlayPublisher, RedisPublisher  # noqa: E402
from bench.e2e_workload import Subscribers  # noqa: E402
from deploy import cluster  # noqa: E402

BROKERS = {"mosquitto": ("mqtt", "mosquitto QoS0", MqttPublisher),
           "redis": ("redis", "redis pub/sub", RedisPublisher)}


def bench_setup(setup: str, nodes: int, nsubs: int, ports: dict[str, int], p: Params,
                work: Path) -> list[Row]:
    """The overlay (``nodes`` daemons) and every broker of ``ports``, all up together,
    compared round by round (e2e_measure.compare)."""
    with ExitStack() as stack:
        progress(f"{setup}: starting {nodes} daemon(s)")
        inventory = cluster.up(work / f"cluster-{nodes}", nodes, timeout=120.0)
        stack.callback(_down, setup, inventory)
        progress(f"{setup}: {nodes} daemon(s) ready")
        api = [node.api for node in inventory.nodes]
        targets = [api[0]] if nodes == 1 else [api[1 + i % (nodes - 1)] for i in range(nsubs)]
        # Every subscriber process is forked before any publisher starts a thread.
        subs = {"overlay": Subscribers("overlay", targets)}
        stack.callback(subs["overlay"].close)
        for name, port in ports.items():
            subs[name] = Subscribers(BROKERS[name][0], [port] * len(targets))
            stack.callback(subs[name].close)
        progress(f"{setup}: {len(targets)} subscriber(s) per system subscribed")
        overlay = OverlayPublisher(api[0])
        stack.callback(overlay.close)
        contenders = [Contender(Row(setup, f"overlay reliable={reliable}", len(targets)),
                                subs["overlay"], overlay, reliable)
                      for reliable in (False, True)]
        for name, port in ports.items():
            _, system, publisher_class = BROKERS[name]
            publisher: Any = publisher_class(port)
            stack.callback(publisher.close)
            contenders.append(Contender(Row(setup, system, len(targets)), subs[name],
                                        publisher))
        for c in contenders[1:]:  # the overlay's two rows share a publisher
            probe(c.subs, c.publisher)
        progress(f"{setup}: every subscriber heard a probe")
        return compare(contenders, p)


def _down(setup: str, inventory: Any) -> None:
    outcome = cluster.down(inventory)
    if any(v == "killed" for v in outcome.values()):
        progress(f"{setup}: some daemons had to be killed: {outcome}")


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
                        help="throughput runs per system, median reported (default 5; "
                             "--quick: 1)")
    parser.add_argument("--single", action="store_true",
                        help="only the 1-daemon setup (and its Mosquitto and Redis rows)")
    args = parser.parse_args(argv)
    quick = args.quick
    p = Params(events=args.events or (2_000 if quick else 10_000),
               warmup=args.warmup or (200 if quick else 1_000), window=args.window,
               latency_events=args.latency_events or (100 if quick else 500),
               latency_rate=args.latency_rate, idle=5.0,
               rounds=args.rounds or (1 if quick else 5))
    nsubs = args.subscribers or max(1, args.nodes - 1)
    wide = f"{args.nodes} daemons"
    load_start = os.getloadavg()[0]
    progress(f"{os.cpu_count()} CPUs, load average {load_start:.2f} at start")
    rows: list[Row] = []
    began = time.monotonic()
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="e2e-")))
        ports = {}
        for name in BROKERS:
            port = stack.enter_context(broker(name, work))
            if port is not None:
                ports[name] = port
        rows += bench_setup("1 daemon", 1, 1, ports, p, work)
        if not args.single:
            rows += bench_setup(wide, args.nodes, nsubs, ports, p, work)
    progress(f"done in {time.monotonic() - began:.0f} s, load average "
             f"{os.getloadavg()[0]:.2f} at the end")
    print(f"\n{os.cpu_count()} CPUs; load average {load_start:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end (loadavg column: when each row's "
          "throughput run began)")
    report(rows, p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
