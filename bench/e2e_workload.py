"""bench/e2e.py's workload and subscribers: the event payload, and one process per
subscriber (overlay raw API frames, paho-mqtt, redis-py) recording what it receives."""

from __future__ import annotations

import multiprocessing as mp
import socket
import struct
import threading
import time
from array import array
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from overlay.core.framing import FrameDecoder, decode_map, encode_frame

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
