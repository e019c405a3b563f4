"""CPU cost of one event through one daemon, without the client processes.

One process runs a real structured-mode node (``build_node``: Chord ring of one, Scribe,
traces to a temporary directory) and its API server; a publisher and a subscriber talk
to it over Unix socket pairs as ordinary API connections. The publisher's frames are
encoded before the clock starts and the clients do not decode what they read, so
nearly all of the process's CPU time is the daemon's: receiving and parsing requests,
numbering at the topic's root, matching, trace records, pushes and replies.

Per run: ``--events`` publishes of 100-byte payloads, pipelined (``--window``
outstanding, 64 per write), to one topic with one subscriber (empty filter) or none;
the batched setups send them 64 to a publish request, to a subscriber that takes
batched notifies (docs/API.md: publish_batch, notify_batch).
Reported: events per second (wall) and process CPU microseconds per event; each
setup runs ``--repeat`` times and the minimum and median are printed (other work on the
machine only ever adds time). Also the cycle collections during the measured phases, by
generation, and the longest one (CPU time of its thread: the daemon stands still that
long, a tail of its latency that ``overlay.commands.daemon.GC_YOUNG_THRESHOLD`` sets).
``bench/e2e.py`` measures the same path end to end with separate client processes,
against Mosquitto and Redis.

Run: .venv/bin/python bench/daemon_path.py [--events 30000] [--repeat 5] [--setup N]
[--lone] [--storage always|interval:<ms>|never|off]

``--storage``: the daemon's ``[storage] sync`` (default ``always``, the daemon's
default), or ``off`` (no topic log): run a setup both ways to see what persisting
costs an event.

``--lone``: one event at a time instead of pipelined: each publish is written alone and
the next waits for its reply and its notify (an application publishing now and then,
the paced phase of bench/throughput/). Every event then pays what a burst shares (a
read, a turn, the writes, the scheduler's steps), which the pipelined runs hide.
Reported: CPU microseconds per event and the wall time per round trip, p50 and p99
(clients and daemon share this process's thread: the latency of the daemon alone is
bench/throughput/'s paced figure).

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
once. On a busy machine start-up's periodic work alone moved the difference by 50k
instructions per event; ``--callgrind-phase`` counts the measured phase only, in one run
(callgrind_control zeroes the counters as it starts and dumps them as it ends):

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out .venv/bin/python \
        bench/daemon_path.py --setup 0 --repeat 1 --events 4000 --window 1000000 \
        --callgrind-phase
    grep summary: /tmp/cg.out.1    # the measured phase: divide by --events
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import trio

# This file's folder must not hide packages (bench/scribe.py, bench/matching.py); the
# repository it is in comes first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.transport import percentile  # noqa: E402
from overlay.commands.daemon import tune_gc  # noqa: E402
from overlay.core.framing import FrameDecoder, decode_map, encode_frame  # noqa: E402
from overlay.core.storage import SyncPolicy  # noqa: E402
from overlay.runtime.api.connection import ApiConnection  # noqa: E402
from overlay.runtime.api.outgoing import NOTIFY_BATCH_HEAD  # noqa: E402
from overlay.runtime.config import build_config  # noqa: E402
from overlay.runtime.serve import Node, build_node  # noqa: E402

TOPIC = "bench"
PAYLOAD = bytes(100)


class GcPauses:
    """The cycle collections inside :meth:`watching`: each one's generation and the CPU
    time of the thread it ran in (the daemon stops for that long: a tail of its latency)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, float]] = []
        self._started = 0.0

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Collections are noted only in here: the gc callback is registered only then
        (not for whoever imports this module, such as bench/peer_path.py)."""
        gc.callbacks.append(self)
        try:
            yield
        finally:
            gc.callbacks.remove(self)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.seen.append((info["generation"], time.thread_time() - self._started))

    def summary(self) -> str:
        counts = [sum(1 for g, _ in self.seen if g == gen) for gen in (0, 1, 2)]
        longest = max((t for _, t in self.seen), default=0.0)
        return f"{counts[0]}/{counts[1]}/{counts[2]}, longest {longest * 1e3:.1f} ms"


GC_PAUSES = GcPauses()


@dataclass(frozen=True)
class Setup:
    name: str
    reliable: bool
    subscriber: bool
    #: Events per publish request (batched publish when > 1, and then the subscriber
    #: asks for batched notifies: docs/API.md).
    batch: int = 1


SETUPS = (
    Setup("unreliable, 1 subscriber", False, True),
    Setup("reliable, 1 subscriber", True, True),
    Setup("unreliable, no subscriber", False, False),
    Setup("unreliable, 1 sub, batched", False, True, 64),
    Setup("reliable, 1 sub, batched", True, True, 64),
)

def events_in(body: bytes) -> int:
    """Events a push carries, read from its array's head: not decoded, so that the
    client's cost stays small."""
    if not body.startswith(NOTIFY_BATCH_HEAD):
        return 1
    at = len(NOTIFY_BATCH_HEAD)
    if body[at] < 0x98:
        return body[at] - 0x80
    width = {0x98: 1, 0x99: 2, 0x9a: 4}[body[at]]
    return int.from_bytes(body[at + 1:at + 1 + width], "big")


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

    async def publish_pipelined(self, frames: list[bytes], per_frame: int, window: int) -> None:
        """Write ``frames`` (see :func:`publishes`) of ``per_frame`` events each, 64 events
        per write, at most ``window`` events unanswered (``count_events`` running for
        this client counts the answers)."""
        sent, total = 0, len(frames)
        step = max(1, 64 // per_frame)
        while sent < total:
            if (sent * per_frame) - self.seen >= window:
                await trio.sleep(0)
                continue
            k = min(step, total - sent)
            await self.stream.send_all(b"".join(frames[sent:sent + k]))
            sent += k

    async def count_events(self, n: int, per_frame: int | None, done: trio.Event) -> None:
        """Read until ``n`` events were answered or pushed: ``per_frame`` each (replies),
        or as many as each push carries (None)."""
        self.seen = 0
        while self.seen < n:
            self.decoder.feed(await self.stream.receive_some(1 << 18))
            bodies = self.decoder.bodies()
            self.seen += (len(bodies) * per_frame if per_frame is not None
                          else sum(map(events_in, bodies)))
        done.set()


async def lone(pub: Client, subs: list[Client], frames: list[bytes],
               callgrind_phase: bool = False) -> tuple[float, float, list[float]]:
    """Each of ``frames`` written alone, the next once its reply and its notifies are
    in: (events per second, process CPU microseconds per event, round trips in
    seconds)."""

    async def next_frame(client: Client) -> None:
        while client.decoder.next_body() is None:
            client.decoder.feed(await client.stream.receive_some(1 << 16))

    if callgrind_phase:
        await callgrind("z")
    trips = []
    started, cpu_started = time.monotonic(), time.process_time()
    with GC_PAUSES.watching(), trio.fail_after(120):
        for frame in frames:
            sent = time.perf_counter()
            await pub.stream.send_all(frame)
            for client in (pub, *subs):
                await next_frame(client)
            trips.append(time.perf_counter() - sent)
    wall, cpu = time.monotonic() - started, time.process_time() - cpu_started
    if callgrind_phase:
        await callgrind("d", "measured")
    return len(frames) / wall, cpu / len(frames) * 1e6, trips


def publishes(topic: str, events: int, reliable: bool, batch: int) -> list[bytes]:
    """Publish requests of ``PAYLOAD``, ``batch`` events each, encoded before the clock
    starts."""
    if batch == 1:
        return [encode_frame({"op": "publish", "rid": 10 + i, "topic": topic, "attrs": {},
                              "payload": PAYLOAD, "reliable": reliable}) for i in range(events)]
    event = {"topic": topic, "attrs": {}, "payload": PAYLOAD}
    return [encode_frame({"op": "publish_batch", "rid": 10 + i, "reliable": reliable,
                          "events": [event] * batch}) for i in range(events // batch)]


async def callgrind(command: str, *args: str) -> None:
    """Ask the callgrind this process runs under to ``command`` (zero, dump) its counts."""
    await trio.run_process(["callgrind_control", f"-{command}", *args, str(os.getpid())],
                           stdout=subprocess.DEVNULL)


async def measure(nursery: trio.Nursery, pub: Client, subs: list[Client],
                  frames: list[bytes], per_frame: int, window: int,
                  callgrind_phase: bool = False) -> tuple[float, float]:
    """Publish ``frames`` and wait until the publisher has an answer and each subscriber
    a push for every event: (events per second, process CPU microseconds per event).
    ``callgrind_phase``: callgrind counts from here to the end only (a dump then)."""
    if callgrind_phase:
        await callgrind("z")
    events = len(frames) * per_frame
    counted = [trio.Event() for _ in (pub, *subs)]
    nursery.start_soon(pub.count_events, events, per_frame, counted[0])
    for client, done in zip(subs, counted[1:], strict=True):
        nursery.start_soon(client.count_events, events, None, done)
    started, cpu_started = time.monotonic(), time.process_time()
    with GC_PAUSES.watching():
        await pub.publish_pipelined(frames, per_frame, window)
        with trio.fail_after(120):
            for done in counted:
                await done.wait()
    wall, cpu = time.monotonic() - started, time.process_time() - cpu_started
    if callgrind_phase:
        await callgrind("d", "measured")
    return events / wall, cpu / events * 1e6


async def connect(node: Node, nursery: trio.Nursery, conn_id: int,
                  batch_notify: bool = False) -> Client:
    ours, theirs = trio.socket.socketpair()
    nursery.start_soon(ApiConnection(node.api, trio.SocketStream(theirs), conn_id).serve)
    client = Client(trio.SocketStream(ours))
    reply = await client.request({"op": "hello", "rid": 1, "version": 1,
                                  "batch_notify": batch_notify})
    assert reply["ok"], reply
    return client


async def one_run(setup: Setup, events: int, window: int, callgrind_phase: bool = False,
                  alone: bool = False, storage: str = "always"
                  ) -> tuple[float, float, list[float]]:
    """(events per second, CPU microseconds per event, round trips of ``alone`` events)
    of one fresh daemon; ``storage``: its ``[storage] sync``, or ``off``."""
    with tempfile.TemporaryDirectory() as tmp:
        config = build_config(None, {}, {"bind": "127.0.0.1:0", "state_dir": tmp})
        stored = (dataclasses.replace(config.storage, enabled=False) if storage == "off"
                  else dataclasses.replace(config.storage, sync=SyncPolicy.parse(storage)))
        node = build_node(dataclasses.replace(config, storage=stored))
        tune_gc()
        async with trio.open_nursery() as nursery:
            await nursery.start(node.daemon.run)
            while not node.service.ready:
                await trio.sleep(0.02)
            subs: list[Client] = []
            if setup.subscriber:
                sub = await connect(node, nursery, 1, batch_notify=setup.batch > 1)
                reply = await sub.request({"op": "subscribe", "rid": 2, "topic": TOPIC,
                                           "filter": ""})
                assert reply["ok"], reply
                subs.append(sub)
            pub = await connect(node, nursery, 2)
            frames = publishes(TOPIC, events, setup.reliable, setup.batch)
            result: tuple[float, float, list[float]]
            if alone:
                result = await lone(pub, subs, frames, callgrind_phase)
            else:
                result = (*await measure(nursery, pub, subs, frames, setup.batch, window,
                                         callgrind_phase), [])
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
    p.add_argument("--callgrind-phase", action="store_true",
                   help="under callgrind: count the measured phase only (module docs)")
    p.add_argument("--lone", action="store_true",
                   help="one event at a time, each waiting for the last (module docs)")
    p.add_argument("--storage", default="always",
                   help="the daemon's [storage] sync (always, interval:<ms>, never), or off: "
                        "what the topic log costs an event")
    args = p.parse_args(argv)
    if args.storage != "off":
        try:
            SyncPolicy.parse(args.storage)
        except ValueError as exc:
            p.error(f"--storage: {exc} (or off)")
    with open("/proc/loadavg", encoding="ascii") as fh:
        load = fh.read().split()[0]
    print(f"{args.events} events per run, {args.repeat} runs per setup, storage "
          f"{args.storage}, load average {load}")
    trips_head = "  round trip p50/p99 (us, all runs)" if args.lone else ""
    print(f"{'setup':28s} {'us/event min':>13s} {'median':>8s} {'events/s max':>13s}  "
          f"cycle collections young/older/full (all runs){trips_head}")
    for setup in SETUPS if args.setup is None else SETUPS[args.setup:args.setup + 1]:
        if args.lone and setup.batch > 1:
            continue  # a batch is many events at once
        GC_PAUSES.seen.clear()
        runs = [trio.run(one_run, setup, args.events, args.window, args.callgrind_phase,
                         args.lone, args.storage) for _ in range(args.repeat)]
        costs = [c for _, c, _ in runs]
        trips = sorted(t for _, _, run in runs for t in run)
        tail = (f"  {percentile(trips, 50) * 1e6:.0f}/{percentile(trips, 99) * 1e6:.0f}"
                if trips else "")
        print(f"{setup.name:28s} {min(costs):13.1f} {statistics.median(costs):8.1f} "
              f"{max(r for r, _, _ in runs):13,.0f}  {GC_PAUSES.summary()}{tail}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
