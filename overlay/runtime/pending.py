"""Reliable publishes waiting for the core's ``published`` notice, without a task each.

A waiter is a callback: it is called exactly once, with the publish's
:class:`PublishResult` when the notice comes, with the :class:`ApiError` of a
``refused`` notice (the root cannot store the event: ``storage_error``), or with a
``timeout`` :class:`ApiError` once ``timeout`` seconds have passed without either.
Every waiter has the same timeout, so their deadlines come in the order they were
added: one task (:meth:`run`) sleeps until the oldest deadline, and a notice also drops
the answered waiters at the front.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import trio

from overlay.runtime.api import ApiError, PublishResult
from overlay.runtime.api.requests import STORAGE_ERROR, TIMEOUT
from overlay.runtime.api.service import Done


@dataclass(slots=True, eq=False)
class Waiter:
    key: tuple[str, str]
    done: Done
    deadline: float
    finished: bool = False


class PendingPublishes:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.timeouts = 0
        #: (topic, msg_id) -> its waiters (a client may publish one msg_id again).
        self._by_key: dict[tuple[str, str], list[Waiter]] = {}
        #: Every unanswered waiter, oldest first (answered ones until they reach the front).
        self._queue: deque[Waiter] = deque()
        self._added = trio.Event()

    def __len__(self) -> int:
        return sum(len(waiters) for waiters in self._by_key.values())

    def add(self, topic: str, msg_id: str, done: Done, now: float) -> Waiter:
        """Register before publishing: the notice may come during the publish call.
        ``now``: trio's clock (read once for a burst of publishes)."""
        key = (topic, msg_id)
        waiter = Waiter(key, done, now + self.timeout)
        self._by_key.setdefault(key, []).append(waiter)
        return waiter

    def watch(self, waiter: Waiter) -> None:
        """The publish call returned without an answer: time it out if none comes."""
        if not waiter.finished:
            self._queue.append(waiter)
            self._added.set()

    def discard(self, waiter: Waiter) -> None:
        """The publish call failed: the waiter's caller answers it."""
        waiter.finished = True
        waiters = self._by_key.get(waiter.key)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._by_key[waiter.key]

    def published(self, topic: str, msg_id: str, seq: int | None) -> None:
        """The core's ``published`` notice: answer everyone waiting for that event."""
        self._answer(topic, msg_id, PublishResult(msg_id, seq))

    def refused(self, topic: str, msg_id: str, reason: str) -> None:
        """The core's ``refused`` notice: the root could not store the event."""
        self._answer(topic, msg_id, ApiError(
            STORAGE_ERROR, f"the topic's root cannot store the event ({reason}); it is not "
            f"acknowledged: publish it again later, with msg_id {msg_id}", msg_id=msg_id))

    def _answer(self, topic: str, msg_id: str, outcome: PublishResult | ApiError) -> None:
        for waiter in self._by_key.pop((topic, msg_id), ()):
            waiter.finished = True
            waiter.done(outcome)
        queue = self._queue
        while queue and queue[0].finished:
            queue.popleft()

    async def run(self) -> None:
        """Answer the waiters whose deadline passed (until cancelled)."""
        queue = self._queue
        while True:
            while queue and queue[0].finished:
                queue.popleft()
            if not queue:
                self._added = trio.Event()
                await self._added.wait()
                continue
            await trio.sleep_until(queue[0].deadline)
            now = trio.current_time()
            while queue and (queue[0].finished or queue[0].deadline <= now):
                waiter = queue.popleft()
                if not waiter.finished:
                    self._expire(waiter)

    def _expire(self, waiter: Waiter) -> None:
        self.timeouts += 1
        self.discard(waiter)
        waiter.done(ApiError(TIMEOUT, f"the overlay did not take the event within "
                             f"{self.timeout:g} s; it may still be numbered: publish again "
                             f"with msg_id {waiter.key[1]} (the root numbers it once)",
                             msg_id=waiter.key[1]))
