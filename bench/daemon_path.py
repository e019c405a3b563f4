"""CPU cost of one event through one daemon, without the client processes.

One process runs a real structured-mode node (``build_node``: Chord ring of one, Scribe,
traces to a temporary directory) and its API server; a publisher and a subscriber talk
to it over Unix socket pairs as ordinary API connections. The publisher's frames are
encoded before the clock starts and the clients do not decode what they read, so
nearly all of the process's CPU time is the daemon's: receiving and parsing requests,
numbering at the topic's root, matching, trace records, pushes and replies.

Per run: ``--events`` publishes of 100-byte payloads, pipelined (``--window``
outstanding, 64 per write), to one topic with one subscriber (empty filter) or none.
Reported: events per second (wall) and process CPU microseconds per event; each
setup runs ``--repeat`` times and the minimum and median are printed (other work on the
machine only ever adds time). ``bench/e2e.py`` measures the same path end to end with
separate client processes, against Mosquitto and Redis.

Run: .venv/bin/python bench/daemon_path.py [--events 30000] [--repeat 5] [--setup N]

Counts that do not move with the machine's load: instructions per event, from two runs
of one setup under valgrind (the difference removes start-up), e.g.

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        .venv/bin/python bench/daemon_path.py --setup 0 --repeat 1 --events 2000 \
        --window 1000000
    (again with --events 6000; instructions per event = (I6000 - I2000) / 4000)

``--window 1000000`` sends every request without waiting for replies: with a window the
publisher spins while it is full, and how often varies from run to run. The node's
periodic work (its ticks, the trace flushes) still grows with the run's wall time, which
under valgrind grows with the machine's load: compare two builds by running them at
once (two runs of one build then agree within a few hundred instructions).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import trio

# This file's folder must not hide packages (bench/scribe.py, bench/matching.py); the
# repository it is in comes first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from overlay.commands.daemon import tune_gc  # noqa: E402
from overlay.core.framing import FrameDecoder, decode_map, encode_frame  # noqa: E402
from overlay.runtime.api.connection import ApiConnection  # noqa: E402
from overlay.runtime.config import build_config  # noqa: E402
from overlay.runtime.serve import Node, build_node  # noqa: E402

TOPIC = "bench"
PAYLOAD = bytes(100)


@dataclass(frozen=True)
class Setup:
    name: str
    reliable: bool
    subscriber: bool


SETUPS = (
    Setup("unreliable, 1 subscriber", False, True),
    Setup("reliable, 1 subscriber", True, True),
    Setup("unreliable, no subscriber", False, False),
)


class Client:
    """One end of a socket pair whose other end the daemon's API serves."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(1 << 24)
        self.seen = 0

    async def request(self, req: dict[str, object]) -> dict[str, object]:
        await self.stream.send_all(encode_frame(req))
        while True:
            while (body := self.decoder.next_body()) is None:
                self.decoder.feed(await self.stream.receive_some(1 << 16))
            msg = decode_map(body)
            if msg.get("rid") == req["rid"]:
                return msg

    async def publish_pipelined(self, frames: list[bytes], window: int) -> None:
        """Write ``frames`` (see :func:`publishes`), 64 per write, at most ``window`` of
        them unanswered (``count_frames`` running for this client counts the answers)."""
        sent, events = 0, len(frames)
        while sent < events:
            if sent - self.seen >= window:
                await trio.sleep(0)
                continue
            k = min(64, events - sent)
            await self.stream.send_all(b"".join(frames[sent:sent + k]))
            sent += k

    async def count_frames(self, n: int, done: trio.Event) -> None:
        """Read until ``n`` frames came (not decoded: the client's cost stays small)."""
        self.seen = 0
        while self.seen < n:
            self.decoder.feed(await self.stream.receive_some(1 << 18))
            self.seen += len(self.decoder.bodies())
        done.set()


def publishes(topic: str, events: int, reliable: bool) -> list[bytes]:
    """Publish requests of ``PAYLOAD``, encoded before the clock starts."""
    return [encode_frame({"op": "publish", "rid": 10 + i, "topic": topic, "attrs": {},
                          "payload": PAYLOAD, "reliable": reliable}) for i in range(events)]


async def measure(nursery: trio.Nursery, pub: Client, subs: list[Client],
                  frames: list[bytes], window: int) -> tuple[float, float]:
    """Publish ``frames`` and wait until the publisher has a reply and each subscriber a
    push for every one: (events per second, process CPU microseconds per event)."""
    events = len(frames)
    counted = [trio.Event() for _ in (pub, *subs)]
    for client, done in zip((pub, *subs), counted, strict=True):
        nursery.start_soon(client.count_frames, events, done)
    started, cpu_started = time.monotonic(), time.process_time()
    await pub.publish_pipelined(frames, window)
    with trio.fail_after(120):
        for done in counted:
            await done.wait()
    wall, cpu = time.monotonic() - started, time.process_time() - cpu_started
    return events / wall, cpu / events * 1e6


async def connect(node: Node, nursery: trio.Nursery, conn_id: int) -> Client:
    ours, theirs = trio.socket.socketpair()
    nursery.start_soon(ApiConnection(node.api, trio.SocketStream(theirs), conn_id).serve)
    client = Client(trio.SocketStream(ours))
    reply = await client.request({"op": "hello", "rid": 1, "version": 1})
    assert reply["ok"], reply
    return client


async def one_run(setup: Setup, events: int, window: int) -> tuple[float, float]:
    """(events per second, CPU microseconds per event) of one fresh daemon."""
    with tempfile.TemporaryDirectory() as tmp:
        node = build_node(build_config(None, {}, {"bind": "127.0.0.1:0", "state_dir": tmp}))
        tune_gc()
        async with trio.open_nursery() as nursery:
            await nursery.start(node.daemon.run)
            while not node.service.ready:
                await trio.sleep(0.02)
            subs: list[Client] = []
            if setup.subscriber:
                sub = await connect(node, nursery, 1)
                reply = await sub.request({"op": "subscribe", "rid": 2, "topic": TOPIC,
                                           "filter": ""})
                assert reply["ok"], reply
                subs.append(sub)
            pub = await connect(node, nursery, 2)
            result = await measure(nursery, pub, subs, publishes(TOPIC, events, setup.reliable),
                                   window)
            node.daemon.stop()
            nursery.cancel_scope.cancel()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=30000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--setup", type=int, choices=range(len(SETUPS)), default=None,
                   help="only this setup: " + "; ".join(
                       f"{i} = {setup.name}" for i, setup in enumerate(SETUPS)))
    args = p.parse_args(argv)
    with open("/proc/loadavg", encoding="ascii") as fh:
        load = fh.read().split()[0]
    print(f"{args.events} events per run, {args.repeat} runs per setup, load average {load}")
    print(f"{'setup':28s} {'us/event min':>13s} {'median':>8s} {'events/s max':>13s}")
    for setup in SETUPS if args.setup is None else SETUPS[args.setup:args.setup + 1]:
        runs = [trio.run(one_run, setup, args.events, args.window) for _ in range(args.repeat)]
        costs = [c for _, c in runs]
        print(f"{setup.name:28s} {min(costs):13.1f} {statistics.median(costs):8.1f} "
              f"{max(r for r, _ in runs):13,.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
