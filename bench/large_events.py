"""Large events through real daemons: MB/s and events/s from the first publish to the last
notify, for 64 KiB events and events at the payload limit, reliable and not, on 1 daemon
and on 4 (the subscriber on another daemon than the publisher, the topic's root a third
where the ring allows).

    .venv/bin/python bench/large_events.py [--events-64k 400] [--events-max 60]

Each row: daemons, size, reliable, events, seconds, events/s, MB/s (payload bytes), and
the events the subscriber got (all of them, or the row says how many were missing).
Publishes are pipelined (``--window`` in flight on one connection).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deploy import cluster
from overlay.client import connect
from overlay.core.ids import hash_id
from overlay.core.limits import SizeLimits


def topic_rooted_away(inventory: cluster.Inventory, avoid: set[str]) -> str:
    ids = sorted(int(n.node, 16) for n in inventory.nodes)
    for i in range(10_000):
        topic = f"large-{i}"
        key = hash_id(topic, 128)
        owner = next((x for x in ids if x >= key), ids[0])
        if f"{owner:032x}" not in avoid or len(ids) <= len(avoid):
            return topic
    raise RuntimeError("no topic rooted away from the publisher and subscriber")


async def one_run(inventory: cluster.Inventory, size: int, count: int, reliable: bool,
                  window: int) -> tuple[float, int]:
    nodes = inventory.nodes
    sub_node, pub_node = nodes[1 % len(nodes)], nodes[0]
    topic = topic_rooted_away(inventory, {sub_node.node, pub_node.node})
    payload = os.urandom(size)
    received = 0
    done = trio.Event()
    async with connect(sub_node.api) as sub_client, connect(pub_node.api) as pub, \
            sub_client.subscribe(topic) as sub:

        async def read() -> None:
            nonlocal received
            async for _ in sub:
                received += 1
                if received == count:
                    done.set()
                    return

        limiter = trio.CapacityLimiter(window)

        async def publish(i: int) -> None:
            async with limiter:
                await pub.publish(topic, payload, attrs={"i": i}, reliable=reliable)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            started = time.perf_counter()
            async with trio.open_nursery() as publishers:
                for i in range(count):
                    publishers.start_soon(publish, i)
            with trio.move_on_after(120):
                await done.wait()
            elapsed = time.perf_counter() - started
            nursery.cancel_scope.cancel()
    return elapsed, received


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events-64k", type=int, default=400)
    parser.add_argument("--events-max", type=int, default=60)
    parser.add_argument("--window", type=int, default=32)
    args = parser.parse_args()
    sizes = SizeLimits()
    print(f"load: {os.getloadavg()[0]:.2f}  max_payload {sizes.max_payload} B")
    print(f"{'daemons':>7} {'size':>9} {'reliable':>8} {'events':>6} {'s':>7} "
          f"{'events/s':>9} {'MB/s':>7} {'got':>5}")
    for daemons in (1, 4):
        with tempfile.TemporaryDirectory(prefix="large-events-") as tmp:
            inventory = cluster.up(Path(tmp) / "c", daemons, timeout=60.0)
            try:
                # Warm-up, not reported: the topic's tree forms and routes are learnt.
                trio.run(one_run, inventory, 100, 50, True, args.window)
                for size, count in ((64 << 10, args.events_64k),
                                    (sizes.max_payload, args.events_max)):
                    for reliable in (True, False):
                        elapsed, got = trio.run(one_run, inventory, size, count, reliable,
                                                args.window)
                        print(f"{daemons:>7} {size:>9} {reliable!s:>8} {count:>6} "
                              f"{elapsed:>7.2f} {got / elapsed:>9.1f} "
                              f"{got * size / elapsed / 1e6:>7.1f} {got:>5}", flush=True)
            finally:
                cluster.down(inventory, grace=10.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
