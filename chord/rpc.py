"""Request/answer bookkeeping inside the core: request ids, callbacks and time-outs.

A call records what to do with the answer and what to do if none comes or the transport
reports the peer unreachable; exactly one of the two runs. A request without an answer
after ``timeout`` is sent again, up to ``attempts`` times in all (requests are idempotent
and answers carry the rid, so a duplicate answer is simply ignored): a lost message costs
a retry, not the peer's place in our tables. A report that the peer is unreachable fails
the call at once. Time-outs are named timers ``("rpc", rid)`` in the node's
:class:`~overlay.core.timers.Timers`, so nothing ever waits for ever.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from overlay.core.messages import Message
from overlay.core.timers import Timers

AnswerHandler = Callable[[float, Any], None]
FailureHandler = Callable[[float], None]
PeerFailed = Callable[[float, str], None]
Sender = Callable[[str, Message], None]


@dataclass(slots=True)
class PendingCall:
    dest: str
    request: Message
    answer_type: type[Message]
    on_answer: AnswerHandler
    on_failure: FailureHandler
    attempts_left: int


class Calls:
    def __init__(self, timers: Timers, timeout: float, attempts: int, send: Sender,
                 on_peer_failed: PeerFailed) -> None:
        self.timers = timers
        self.timeout = timeout
        self.attempts = attempts
        self.send = send
        #: Told first when a call fails, so the tables are clean before the caller
        #: decides what to do next (usually: try another node).
        self.on_peer_failed = on_peer_failed
        self.pending: dict[int, PendingCall] = {}
        self._next_rid = 0

    def new_rid(self) -> int:
        self._next_rid += 1
        return self._next_rid

    def call(self, now: float, dest: str, request: Callable[[int], Message],
             answer_type: type[Message], on_answer: AnswerHandler,
             on_failure: FailureHandler) -> int:
        """Send ``request(rid)`` to ``dest`` and wait for an ``answer_type`` with that rid."""
        rid = self.new_rid()
        msg = request(rid)
        self.pending[rid] = PendingCall(dest, msg, answer_type, on_answer, on_failure,
                                        self.attempts - 1)
        self.timers.set(("rpc", rid), now + self.timeout)
        self.send(dest, msg)
        return rid

    def answer(self, now: float, rid: int, msg: Message) -> None:
        """An answer arrived. Its sender is not compared with the address asked: a seed
        given as ``localhost:7400`` answers as ``127.0.0.1:7400``; rids are not reused."""
        call = self.pending.get(rid)
        if call is None or type(msg) is not call.answer_type:
            return  # late (after a time-out), duplicate, or not an answer to this call
        del self.pending[rid]
        self.timers.cancel(("rpc", rid))
        call.on_answer(now, msg)

    def timed_out(self, now: float, rid: int) -> None:
        """No answer to ``rid`` in time: send it again, or give up after the last try."""
        call = self.pending.get(rid)
        if call is not None and call.attempts_left > 0:
            call.attempts_left -= 1
            self.timers.set(("rpc", rid), now + self.timeout)
            self.send(call.dest, call.request)
        else:
            self.fail(now, rid)

    def fail(self, now: float, rid: int) -> None:
        """Request ``rid`` could not be delivered, or its last try timed out."""
        call = self.pending.pop(rid, None)
        if call is not None:
            self.timers.cancel(("rpc", rid))
            self.on_peer_failed(now, call.dest)
            call.on_failure(now)

    def cancel_all(self) -> None:
        for rid in self.pending:
            self.timers.cancel(("rpc", rid))
        self.pending.clear()
