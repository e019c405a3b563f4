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
              events/s = events received per subscriber / (last receipt - first send);
              "burst p50/p99" are the latencies of those events (mostly queueing);
  latency     ``--latency-events`` events paced at ``--latency-rate`` per second,
              each timed from its send to its receipt: "p50"/"p99".
The overlay runs twice: ``reliable=False`` and ``reliable=True`` (reply once the topic's
root has numbered the event). Ratios are overlay / broker (throughput: > 1 means the
overlay is faster; latency: > 1 means the overlay is slower).

Defaults: 10000 events, 1000 warm-up, 500 paced at 50/s; ``--quick``: 2000, 200, 100.
The overlay's 10-daemon cluster uses the default protocol periods. Receipt time is when
the subscriber's read returned (before decoding). The table's loadavg column is the
machine's 1-minute load average when the row's throughput run began: other work on the
machine shows in the figures.

All clients are Python (raw frames for the overlay, paho-mqtt, redis-py): client cost
is in every figure. Needs the ``bench`` extra (``pip install -e .[bench]``).

Run: .venv/bin/python bench/e2e.py [--quick] [--events N] [--nodes 10] [--subscribers 9]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import selectors
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path: take it out (its modules
# must not hide packages) and put the repository root in.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deploy import cluster  # noqa: E402
from overlay.core.framing import FrameDecoder, decode_map, encode_frame  # noqa: E402

PAYLOAD_SIZE = 100
#: send time (monotonic seconds), run number, sequence number; then zero padding.
HEADER = struct.Struct("<dII")
PADDING = bytes(PAYLOAD_SIZE - HEADER.size)
TOPIC = "bench"
PROBE_RUN = 0


def payload(run: int, seq: int) -> bytes:
    return HEADER.pack(time.monotonic(), run, seq) + PADDING


# -- subscribers: one process each ------------------------------------------------------


class Recorder:
    """Per run: events received, last receipt time, latencies (seconds)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: dict[int, list[Any]] = {}

    def add(self, data: bytes, now: float) -> None:
        sent, run, _seq = HEADER.unpack_from(data)
        with self.lock:
            entry = self.runs.get(run)
            if entry is None:
                entry = self.runs[run] = [0, 0.0, array("d")]
            entry[0] += 1
            entry[1] = now
            entry[2].append(now - sent)

    def count(self, run: int) -> tuple[int, float]:
        with self.lock:
            entry = self.runs.get(run)
            return (0, 0.0) if entry is None else (entry[0], entry[1])

    def stats(self, run: int) -> tuple[int, float, bytes]:
        with self.lock:
            entry = self.runs.pop(run, None)
            return (0, 0.0, b"") if entry is None else (entry[0], entry[1], entry[2].tobytes())


def _overlay_subscriber(api: str, rec: Recorder, ready: threading.Event) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(api)
    decoder = FrameDecoder(1 << 24)
    sock.sendall(encode_frame({"op": "hello", "rid": 1, "version": 1, "client": "bench-sub"}))
    rid = 1
    subscribed = False
    while not subscribed:  # retried while the node is not ready yet
        rid += 1
        sock.sendall(encode_frame({"op": "subscribe", "rid": rid, "topic": TOPIC,
                                   "filter": ""}))
        while True:
            msg = _read_one(sock, decoder)
            if msg.get("rid") == rid:
                break
        if msg.get("ok"):
            subscribed = True
        elif msg["error"]["code"] == "not_ready":
            time.sleep(0.2)
        else:
            raise RuntimeError(f"subscribe failed: {msg['error']}")
    ready.set()
    while True:
        data = sock.recv(1 << 18)
        now = time.monotonic()
        if not data:
            return
        decoder.feed(data)
        for body in decoder.bodies():
            msg = decode_map(body)
            if msg.get("event") == "notify":
                rec.add(msg["payload"], now)


def _read_one(sock: socket.socket, decoder: FrameDecoder) -> dict[str, Any]:
    while (body := decoder.next_body()) is None:
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the daemon closed the connection")
        decoder.feed(data)
    return decode_map(body)


def _mqtt_subscriber(port: int, rec: Recorder, ready: threading.Event) -> None:
    import paho.mqtt.client as mqtt

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    client.on_connect = lambda c, *_: c.subscribe(TOPIC, qos=0)
    client.on_subscribe = lambda *_: ready.set()
    client.on_message = lambda _c, _u, m: rec.add(m.payload, time.monotonic())
    client.connect("127.0.0.1", port)
    client.loop_forever()


def _redis_subscriber(port: int, rec: Recorder, ready: threading.Event) -> None:
    import redis

    pubsub = redis.Redis(host="127.0.0.1", port=port).pubsub()
    pubsub.subscribe(TOPIC)
    for msg in pubsub.listen():
        if msg["type"] == "message":
            rec.add(msg["data"], time.monotonic())
        elif msg["type"] == "subscribe":
            ready.set()


SUBSCRIBERS: dict[str, Callable[[Any, Recorder, threading.Event], None]] = {
    "overlay": _overlay_subscriber, "mqtt": _mqtt_subscriber, "redis": _redis_subscriber}


def subscriber_main(kind: str, target: Any, pipe: Any) -> None:
    """Child process: one subscription read by a thread; commands from the pipe."""
    rec = Recorder()
    ready = threading.Event()
    failure: list[str] = []

    def read() -> None:
        try:
            SUBSCRIBERS[kind](target, rec, ready)
        except Exception as exc:
            failure.append(f"{type(exc).__name__}: {exc}")
            ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(60)
    pipe.send(("ready", failure[0] if failure else None))
    while True:
        cmd, *args = pipe.recv()
        if cmd == "count":
            pipe.send(rec.count(args[0]))
        elif cmd == "stats":
            pipe.send(rec.stats(args[0]))
        else:
            return


class Subscribers:
    """The subscriber processes of one system."""

    def __init__(self, kind: str, targets: list[Any]) -> None:
        # fork: the children need no fresh interpreter and imports (this process runs no
        # threads when they are made: publishers are created after their subscribers).
        ctx = mp.get_context("fork")
        self.procs = []
        self.pipes = []
        for target in targets:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=subscriber_main, args=(kind, target, child), daemon=True)
            proc.start()
            self.procs.append(proc)
            self.pipes.append(parent)
        for pipe in self.pipes:
            if not pipe.poll(90):
                raise RuntimeError(f"a {kind} subscriber did not subscribe within 90 s")
            _, failure = pipe.recv()
            if failure:
                raise RuntimeError(f"{kind} subscriber failed: {failure}")

    def ask(self, *cmd: Any) -> list[Any]:
        for pipe in self.pipes:
            pipe.send(cmd)
        return [pipe.recv() for pipe in self.pipes]

    def wait(self, run: int, n: int, idle: float, cap: float) -> None:
        """Until every subscriber has ``n`` events of ``run``, or no progress for ``idle`` s."""
        start = last_progress = time.monotonic()
        seen = -1
        while True:
            counts = [c for c, _ in self.ask("count", run)]
            if min(counts) >= n:
                return
            now = time.monotonic()
            if sum(counts) != seen:
                seen, last_progress = sum(counts), now
            if now - last_progress > idle or now - start > cap:
                return
            time.sleep(0.05)

    def close(self) -> None:
        for pipe in self.pipes:
            with suppress(OSError):
                pipe.send(("stop",))
        for proc in self.procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()


# -- publishers (this process) -----------------------------------------------------------


class OverlayPublisher:
    """Raw frames on one API connection: requests pipelined, replies read in order."""

    def __init__(self, api: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(api)
        self.decoder = FrameDecoder(1 << 24)
        self.rid = 0
        self.reliable = False
        self.errors: Counter[str] = Counter()
        self.sent = self.acked = 0
        self._send({"op": "hello", "version": 1, "client": "bench-pub"})
        self._drain(block=True)

    def _send(self, req: dict[str, Any]) -> None:
        self.rid += 1
        self.sent += 1
        self.sock.sendall(encode_frame({**req, "rid": self.rid}))

    def _frame(self, run: int, seq: int) -> bytes:
        self.rid += 1
        return encode_frame({"op": "publish", "rid": self.rid, "topic": TOPIC, "attrs": {},
                             "payload": payload(run, seq), "reliable": self.reliable})

    def _drain(self, block: bool) -> None:
        """Read what replies have come (at least one when ``block``)."""
        self.sock.setblocking(block)
        try:
            data = self.sock.recv(1 << 18)
        except BlockingIOError:
            return
        finally:
            self.sock.setblocking(True)
        if not data:
            raise ConnectionError("the daemon closed the publisher's connection")
        self.decoder.feed(data)
        for body in self.decoder.bodies():
            msg = decode_map(body)
            if "rid" in msg:
                self.acked += 1
                if not msg.get("ok"):
                    self.errors[msg["error"]["code"]] += 1

    def burst(self, run: int, n: int, window: int) -> float:
        start = time.monotonic()
        seq = 0
        while seq < n:
            room = min(window - (self.sent - self.acked), n - seq, 64)
            if room > 0:
                frames = [self._frame(run, seq + i) for i in range(room)]
                self.sock.sendall(b"".join(frames))
                self.sent += room
                seq += room
            else:
                self._drain(block=True)
        self.settle()
        return start

    def paced(self, run: int, n: int, rate: float) -> float:
        start = next_at = time.monotonic()
        for seq in range(n):
            while (wait := next_at - time.monotonic()) > 0:
                if select_readable(self.sock, wait):
                    self._drain(block=False)
            self.sock.sendall(self._frame(run, seq))
            self.sent += 1
            next_at += 1 / rate
            self._drain(block=False)
        self.settle()
        return start

    def settle(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.acked < self.sent and time.monotonic() < deadline:
            if select_readable(self.sock, deadline - time.monotonic()):
                self._drain(block=False)

    def close(self) -> None:
        self.sock.close()


def select_readable(sock: socket.socket, timeout: float) -> bool:
    with selectors.DefaultSelector() as sel:
        sel.register(sock, selectors.EVENT_READ)
        return bool(sel.select(max(0.0, timeout)))


class MqttPublisher:
    def __init__(self, port: int) -> None:
        import paho.mqtt.client as mqtt

        self.errors: Counter[str] = Counter()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        connected = threading.Event()
        self.client.on_connect = lambda *_: connected.set()
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        if not connected.wait(10):
            raise RuntimeError("the MQTT publisher could not connect")

    def _publish(self, run: int, seq: int) -> Any:
        info = self.client.publish(TOPIC, payload(run, seq), qos=0)
        if info.rc != 0:
            self.errors[f"rc{info.rc}"] += 1
        return info

    def burst(self, run: int, n: int, window: int) -> float:
        start = time.monotonic()
        info = None
        for seq in range(n):
            info = self._publish(run, seq)
        if info is not None:
            info.wait_for_publish(30)
        return start

    def paced(self, run: int, n: int, rate: float) -> float:
        start = next_at = time.monotonic()
        for seq in range(n):
            if (wait := next_at - time.monotonic()) > 0:
                time.sleep(wait)
            self._publish(run, seq)
            next_at += 1 / rate
        return start

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


class RedisPublisher:
    def __init__(self, port: int) -> None:
        import redis

        self.errors: Counter[str] = Counter()
        self.client = redis.Redis(host="127.0.0.1", port=port)

    def burst(self, run: int, n: int, window: int) -> float:
        start = time.monotonic()
        for first in range(0, n, window):
            pipe = self.client.pipeline(transaction=False)
            for seq in range(first, min(n, first + window)):
                pipe.publish(TOPIC, payload(run, seq))
            pipe.execute()
        return start

    def paced(self, run: int, n: int, rate: float) -> float:
        start = next_at = time.monotonic()
        for seq in range(n):
            if (wait := next_at - time.monotonic()) > 0:
                time.sleep(wait)
            self.client.publish(TOPIC, payload(run, seq))
            next_at += 1 / rate
        return start

    def close(self) -> None:
        self.client.close()


# -- measuring ---------------------------------------------------------------------------


@dataclass
class Row:
    setup: str
    system: str
    subscribers: int
    throughput: float = 0.0
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
    run = RUNS.new()
    row.load = os.getloadavg()[0]
    start = publisher.burst(run, p.events, p.window)
    total, last, lats = collect(subs, run, p.events, p.idle, 300)
    progress(f"  throughput run: {time.monotonic() - start:.1f} s")
    if total:
        row.throughput = total / nsubs / max(last - start, 1e-9)
    row.delivered = total / (p.events * nsubs)
    row.burst_p50, row.burst_p99 = percentile(lats, 0.50), percentile(lats, 0.99)
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


# -- brokers -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout:.0f} s")


@contextmanager
def broker(name: str, work: Path) -> Iterator[int | None]:
    """Start ``mosquitto`` or ``redis-server`` on a free loopback port; None if missing."""
    exe = "mosquitto" if name == "mosquitto" else "redis-server"
    path = shutil.which(exe) or next((f"{d}/{exe}" for d in ("/usr/sbin", "/usr/bin")
                                      if os.access(f"{d}/{exe}", os.X_OK)), None)
    if path is None:
        print(f"{exe} is not installed: {name} skipped", flush=True)
        yield None
        return
    port = free_port()
    if name == "mosquitto":
        conf = work / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n")
        argv = [path, "-c", str(conf)]
    else:
        argv = [path, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(work)]
    with open(work / f"{name}.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_port(port, proc, exe)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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


# -- report ----------------------------------------------------------------------------------


def fmt(x: float, digits: int = 2) -> str:
    return "-" if x != x else f"{x:.{digits}f}"


def ratio(a: float, b: float) -> str:
    return "-" if not (a == a and b == b) or b == 0 else f"{a / b:.3f}"


def report(rows: list[Row], p: Params) -> None:
    print()
    print(f"publish-to-notify, {PAYLOAD_SIZE}-byte payloads: throughput over {p.events} "
          f"events (window {p.window}); p50/p99 over {p.latency_events} events paced at "
          f"{p.latency_rate:g}/s; burst p50/p99 (ms) = latency of the throughput events")
    head = (f"{'setup':<11} {'system':<24} {'subs':>4} {'events/s':>9} {'deliv':>6} "
            f"{'p50 ms':>8} {'p99 ms':>8} {'burst p50':>9} {'burst p99':>9} {'loadavg':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        deliv = min(r.delivered, r.lat_delivered)
        notes = f"  {'; '.join(r.notes)}" if r.notes else ""
        print(f"{r.setup:<11} {r.system:<24} {r.subscribers:>4} {r.throughput:>9.0f} "
              f"{deliv:>6.1%} {fmt(r.p50, 3):>8} {fmt(r.p99, 3):>8} {fmt(r.burst_p50, 1):>9} "
              f"{fmt(r.burst_p99, 1):>9} {r.load:>7.2f}{notes}")
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
    args = parser.parse_args(argv)
    quick = args.quick
    p = Params(events=args.events or (2_000 if quick else 10_000),
               warmup=args.warmup or (200 if quick else 1_000), window=args.window,
               latency_events=args.latency_events or (100 if quick else 500),
               latency_rate=args.latency_rate, idle=5.0)
    nsubs = args.subscribers or max(1, args.nodes - 1)
    wide = f"{args.nodes} daemons"
    load_start = os.getloadavg()[0]
    progress(f"{os.cpu_count()} CPUs, load average {load_start:.2f} at start")
    rows: list[Row] = []
    began = time.monotonic()
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="e2e-")))
        rows += bench_overlay("1 daemon", 1, 1, p, work)
        rows += bench_overlay(wide, args.nodes, nsubs, p, work)
        for name in ("mosquitto", "redis"):
            with broker(name, work) as port:
                if port is not None:
                    rows.insert(sum(r.setup == "1 daemon" for r in rows),
                                bench_broker(name, port, "1 daemon", 1, p))
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
