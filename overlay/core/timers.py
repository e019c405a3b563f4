"""Named one-shot timers for sans-IO cores (the aioquic ``get_timer``/``handle_timer`` idea).

A core schedules ``timers.set(name, at)``; the driver asks ``next_deadline()`` and calls
the core's ``on_timer(now)``, which takes ``timers.pop_due(now)`` and acts on each name.
Names are any hashable (``"stabilize"``, ``("retry", msg_id)``).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable


class Timers:
    def __init__(self) -> None:
        self._deadline: dict[Hashable, float] = {}
        # Lazy-deletion heap: entries whose time no longer matches _deadline are stale.
        self._heap: list[tuple[float, int, Hashable]] = []
        self._counter = 0

    def __contains__(self, name: Hashable) -> bool:
        return name in self._deadline

    def __len__(self) -> int:
        return len(self._deadline)

    def set(self, name: Hashable, at: float) -> None:
        """Schedule (or reschedule) ``name`` to fire at time ``at``."""
        self._deadline[name] = at
        self._counter += 1
        heapq.heappush(self._heap, (at, self._counter, name))
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._deadline):
            self._compact()

    def set_if_absent(self, name: Hashable, at: float) -> None:
        if name not in self._deadline:
            self.set(name, at)

    def cancel(self, name: Hashable) -> None:
        self._deadline.pop(name, None)

    def deadline(self, name: Hashable) -> float | None:
        return self._deadline.get(name)

    def next_deadline(self) -> float | None:
        heap = self._heap
        while heap:
            at, _, name = heap[0]
            if self._deadline.get(name) == at:
                return at
            heapq.heappop(heap)
        return None

    def pop_due(self, now: float) -> list[Hashable]:
        """Names whose time has come, earliest first; they are removed."""
        due = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, _, name = heapq.heappop(heap)
            if self._deadline.get(name) == at:
                del self._deadline[name]
                due.append(name)
        return due

    def _compact(self) -> None:
        self._heap = [entry for entry in self._heap if self._deadline.get(entry[2]) == entry[0]]
        heapq.heapify(self._heap)
