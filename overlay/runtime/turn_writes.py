"""Writes deferred to the end of a step: the frames a step of the daemon causes on its
API connections (a reader's turn; a core step the driver carries out) are written when
the step ends, directly on the sockets, rather than by writer tasks woken for them
(:mod:`overlay.runtime.api.outbox`). Shared by the API server and the core driver,
which each give it the steps they run; only one step runs at a time (none awaits).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol


class DeferredWrite(Protocol):
    """What has frames to write at a step's end (an API connection's outbox)."""

    def write_now(self) -> None: ...


class TurnWrites:
    """The writers with frames to write when the current step ends."""

    def __init__(self) -> None:
        self._pending: list[DeferredWrite] | None = None

    @property
    def under_way(self) -> bool:
        """Whether a step is under way (a nested one would write nothing itself)."""
        return self._pending is not None

    @contextlib.contextmanager
    def turn(self, last: DeferredWrite | None = None) -> Iterator[None]:
        """A step: the frames it causes are written when it ends, ``last``'s after the
        others' (a reader's own replies after the notifies its publishes caused). Steps
        do not nest: code that may run inside one checks :attr:`under_way` and lets that
        one write (the driver, inside a reader's turn)."""
        if self._pending is not None:
            raise RuntimeError("a step began inside another: check under_way first")
        pending: list[DeferredWrite] = []
        self._pending = pending
        try:
            yield
        finally:
            self._pending = None
            for writer in pending:
                if writer is not last:
                    writer.write_now()
            if last is not None and last in pending:
                last.write_now()

    def defer(self, writer: DeferredWrite) -> bool:
        """Whether ``writer`` will write when the current step ends (False: no step is
        under way; the caller has it written otherwise)."""
        if self._pending is None:
            return False
        self._pending.append(writer)
        return True
