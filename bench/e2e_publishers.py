"""bench/e2e.py's publishers, in the benchmark's own process: raw overlay API frames
pipelined on one connection, paho-mqtt QoS 0, redis-py pipelines."""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench.e2e_workload import TOPIC, payload
from overlay.core.framing import FrameDecoder, decode_map, encode_frame


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


def pace(n: int, rate: float, send: Callable[[int], Any]) -> float:
    """``send(seq)`` for seq 0..n-1, ``rate`` per second (sleeping between); the start."""
    start = next_at = time.monotonic()
    for seq in range(n):
        if (wait := next_at - time.monotonic()) > 0:
            time.sleep(wait)
        send(seq)
        next_at += 1 / rate
    return start


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
        return pace(n, rate, lambda seq: self._publish(run, seq))

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
        return pace(n, rate, lambda seq: self.client.publish(TOPIC, payload(run, seq)))

    def close(self) -> None:
        self.client.close()
