"""A tiny sans-IO core used to check drivers: one node pings, the other answers.

The pinger keeps ``window`` pings in flight, resends a ping whose pong has not come
back within ``timeout`` (timers), and records the round-trip time of each. Both the
simulator and the TCP transport must drive it to the same outcome.
"""

from __future__ import annotations

from overlay.core.messages import Message, message
from overlay.core.protocol import CoreBase
from overlay.core.timers import Timers


@message("test.ping")
class Ping(Message):
    seq: int
    payload: bytes = b""


@message("test.pong")
class Pong(Message):
    seq: int


class PingPongCore(CoreBase):
    def __init__(self, address: str, timeout: float = 1.0) -> None:
        super().__init__(address)
        self.timeout = timeout
        self.timers = Timers()
        self.peer: str | None = None
        self.payload = b""
        self.window = 1
        self.remaining = 0
        self.next_seq = 0
        self.sent_at: dict[int, float] = {}
        self.rtts: dict[int, float] = {}
        self.pings_answered = 0
        self.unreachable: list[tuple[str, int]] = []

    # application call
    def start(self, now: float, peer: str, count: int, window: int = 1,
              payload: bytes = b"") -> None:
        self.peer, self.payload, self.window, self.remaining = peer, payload, window, count
        for _ in range(min(window, count)):
            self._ping_next(now)

    @property
    def done(self) -> bool:
        return self.remaining == 0 and not self.sent_at

    def _ping_next(self, now: float) -> None:
        seq = self.next_seq
        self.next_seq += 1
        self.remaining -= 1
        self._send_ping(now, seq)

    def _send_ping(self, now: float, seq: int) -> None:
        assert self.peer is not None
        self.sent_at[seq] = now
        self.timers.set(("retry", seq), now + self.timeout)
        self.send(self.peer, Ping(seq, self.payload))

    def on_message(self, now: float, src: str, msg: Message) -> None:
        if isinstance(msg, Ping):
            self.pings_answered += 1
            self.trace("ping", seq=msg.seq, **{"from": src})
            self.send(src, Pong(msg.seq))
        elif isinstance(msg, Pong) and msg.seq in self.sent_at:
            self.rtts[msg.seq] = now - self.sent_at.pop(msg.seq)
            self.timers.cancel(("retry", msg.seq))
            self.trace("pong", seq=msg.seq)
            if self.remaining > 0:
                self._ping_next(now)

    def on_timer(self, now: float) -> None:
        for name in self.timers.pop_due(now):
            _, seq = name  # type: ignore[misc]  # timer names here are (kind, seq) pairs
            if seq in self.sent_at:
                self._send_ping(now, seq)

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        seq = msg.seq if isinstance(msg, Ping | Pong) else -1
        self.unreachable.append((dest, seq))

    def next_deadline(self) -> float | None:
        return self.timers.next_deadline()
