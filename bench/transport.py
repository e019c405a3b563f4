"""Transport and simulator throughput.

Measures, between two processes on loopback (this one and a sink it starts):
- one-way frames per second, for 100-byte and 4 KiB payloads: the sender keeps a
  window of frames outstanding, the sink acknowledges cumulatively every 512 frames;
- round-trip latency (p50, p99) of one ping answered by one pong, no other traffic;
and, in this process, how many events per second the simulator processes (ping-pong
cores on a 100-node simulated network).

Run: .venv/bin/python bench/transport.py [--frames N] [--rtts N] [--key]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from pathlib import Path

import trio

from overlay.core.messages import Message, message
from overlay.core.protocol import CoreBase
from overlay.runtime.crypto import generate_key
from overlay.runtime.driver import CoreDriver
from overlay.runtime.transport import Inbound, Transport, TransportConfig, Unreachable
from overlay.sim.engine import Simulator
from overlay.testing.pingpong import Ping, PingPongCore, Pong

ACK_EVERY = 512


@message("bench.data")
class Data(Message):
    seq: int
    payload: bytes


@message("bench.ack")
class Ack(Message):
    upto: int


class SinkCore(CoreBase):
    """Counts data frames and acknowledges every ACK_EVERY; answers pings."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.counts: dict[str, int] = {}

    def on_message(self, now: float, src: str, msg: Message) -> None:
        if isinstance(msg, Data):
            count = self.counts[src] = self.counts.get(src, 0) + 1
            if count % ACK_EVERY == 0:
                self.send(src, Ack(count))
        elif isinstance(msg, Ping):
            self.send(src, Pong(msg.seq))

    def on_timer(self, now: float) -> None: ...

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None: ...

    def next_deadline(self) -> float | None:
        return None


class BlastCore(CoreBase):
    """Sends ``total`` data frames keeping at most ``window`` unacknowledged."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.sent = 0
        self.acked = 0
        self.total = 0
        self.window = 0
        self.payload = b""
        self.peer = ""
        self.done = trio.Event()
        self.lost = 0

    def start(self, now: float, peer: str, total: int, window: int, payload: bytes) -> None:
        self.peer, self.total, self.window, self.payload = peer, total, window, payload
        self._fill()

    def _fill(self) -> None:
        while self.sent < self.total and self.sent - self.acked < self.window:
            self.send(self.peer, Data(self.sent, self.payload))
            self.sent += 1

    def on_message(self, now: float, src: str, msg: Message) -> None:
        if isinstance(msg, Ack):
            self.acked = max(self.acked, msg.upto)
            self._fill()
            if self.acked >= self.total - self.total % ACK_EVERY:
                self.done.set()

    def on_timer(self, now: float) -> None: ...

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        self.lost += 1

    def next_deadline(self) -> float | None:
        return None


async def run_node(core_factory, config: TransportConfig, nursery: trio.Nursery):
    send_channel, receive_channel = trio.open_memory_channel[Inbound | Unreachable](math.inf)
    transport = Transport(config, send_channel)
    addr = await nursery.start(transport.run)
    core = core_factory(addr)
    driver = CoreDriver(core, transport)
    nursery.start_soon(driver.run, receive_channel)
    return core, driver


async def sink_main(key_hex: str | None) -> None:
    config = TransportConfig(cluster_key=bytes.fromhex(key_hex) if key_hex else None)
    async with trio.open_nursery() as nursery:
        core, _ = await run_node(SinkCore, config, nursery)
        print(core.address, flush=True)
        await trio.sleep_forever()


async def sender_main(args: argparse.Namespace, sink_addr: str, key: bytes | None) -> None:
    config = TransportConfig(cluster_key=key)
    async with trio.open_nursery() as nursery:
        # one-way throughput
        for size in (100, 4096):
            core, driver = await run_node(BlastCore, config, nursery)
            total = args.frames if size == 100 else args.frames // 4
            total -= total % ACK_EVERY
            start = time.perf_counter()
            driver.call(lambda c, now, s=size, t=total: c.start(now, sink_addr, t, 8192, b"x" * s))
            with trio.fail_after(120):
                await core.done.wait()
            elapsed = time.perf_counter() - start
            print(f"one-way {size:>5} B payload: {total / elapsed:>10,.0f} frames/s "
                  f"({total * size / elapsed / 1e6:,.1f} MB/s payload, {total} frames, "
                  f"unreachable {core.lost})")
        # round-trip latency
        pinger, driver = await run_node(lambda a: PingPongCore(a, timeout=5.0), config, nursery)
        for size in (100, 4096):
            pinger.rtts.clear()
            pinger.next_seq = 0
            driver.call(lambda c, now, s=size: c.start(now, sink_addr, args.rtts, 1, b"x" * s))
            with trio.fail_after(120):
                while not pinger.done:
                    await trio.sleep(0.01)
            rtts = sorted(pinger.rtts.values())
            print(f"round trip {size:>5} B payload: p50 {percentile(rtts, 50) * 1e6:,.0f} us, "
                  f"p99 {percentile(rtts, 99) * 1e6:,.0f} us ({len(rtts)} pings)")
        nursery.cancel_scope.cancel()


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def bench_simulator(nodes: int = 100, pings: int = 200) -> None:
    sim = Simulator(seed=1)
    addrs = [f"10.0.{i // 250}.{i % 250}:7000" for i in range(nodes)]
    for addr in addrs:
        sim.add_node(PingPongCore(addr), addr)
    for i, addr in enumerate(addrs):
        peer = addrs[(i * 7 + 3) % nodes]
        sim.invoke(addr, lambda core, now, p=peer: core.start(now, p, count=pings, window=4))
    start = time.perf_counter()
    sim.run()
    elapsed = time.perf_counter() - start
    print(f"simulator: {sim.stats.events / elapsed:,.0f} events/s "
          f"({sim.stats.events} events, {nodes} nodes, {elapsed:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--rtts", type=int, default=2000)
    parser.add_argument("--key", action="store_true", help="seal frames with a cluster key")
    parser.add_argument("--role", choices=["sender", "sink"], default="sender",
                        help=argparse.SUPPRESS)
    parser.add_argument("--key-hex", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "sink":
        trio.run(sink_main, args.key_hex)
        return
    key = generate_key() if args.key else None
    cmd = [sys.executable, str(Path(__file__).resolve()), "--role", "sink"]
    if key:
        cmd += ["--key-hex", key.hex()]
    sink = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None
        sink_addr = sink.stdout.readline().strip()
        print(f"transport: sender -> sink process at {sink_addr}, "
              f"cluster key {'on' if key else 'off'}")
        trio.run(sender_main, args, sink_addr, key)
    finally:
        sink.terminate()
        sink.wait(timeout=10)
    bench_simulator()


if __name__ == "__main__":
    main()
