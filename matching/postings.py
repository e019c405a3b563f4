"""What the array index keeps per access and per batch: posting lists of conjunction
ids as numpy arrays, the candidates a batch of events gathers, and dense codes for the
attribute names and values that checks name (:mod:`matching.arrays`)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

import numpy as np

_NO_IDS = np.empty(0, np.int64)
_NO_IDS.flags.writeable = False  # shared by every empty posting


class Posting:
    """The conjunctions filed under one access, split into those it decides alone and
    those to check; each set as a dict (O(1) add and remove) and an array, made again
    on first use after a change (:meth:`Found.gather`)."""

    __slots__ = ("checked", "checked_ids", "direct", "direct_ids")

    def __init__(self) -> None:
        self.direct: dict[int, None] = {}
        self.checked: dict[int, None] = {}
        #: The arrays of ``direct`` and ``checked`` (empty when they are), or None
        #: after a change.
        self.direct_ids: np.ndarray | None = None
        self.checked_ids: np.ndarray | None = None

    def put(self, conj: int, direct: bool) -> None:
        if direct:
            self.direct[conj] = None
        else:
            self.checked[conj] = None
        self.direct_ids = self.checked_ids = None

    def drop(self, conj: int) -> bool:
        """Forget ``conj``; whether the posting is now empty."""
        if self.direct.pop(conj, 0) is None or self.checked.pop(conj, 0) is None:
            self.direct_ids = self.checked_ids = None
        return not self.direct and not self.checked

    def refresh(self) -> None:
        """Make the arrays of the sets again."""
        # An empty set shares one empty array (most postings have only one kind): a
        # change then drops, and a refresh makes, one array instead of two.
        self.direct_ids = np.fromiter(self.direct, np.int64, len(self.direct)) \
            if self.direct else _NO_IDS
        self.checked_ids = np.fromiter(self.checked, np.int64, len(self.checked)) \
            if self.checked else _NO_IDS


class Found:
    """Candidates of a batch: arrays of conjunction ids and the event of each."""

    __slots__ = ("checked", "checked_events", "direct", "direct_events", "ranged",
                 "ranged_direct", "ranged_direct_events", "ranged_events")

    def __init__(self) -> None:
        self.direct: list[np.ndarray] = []
        self.direct_events: list[int] = []
        self.checked: list[np.ndarray] = []
        self.checked_events: list[int] = []
        #: From interval windows, to check and direct (which may hold tombstones): an
        #: array of events per array of ids (none when matching one event).
        self.ranged: list[np.ndarray] = []
        self.ranged_events: list[np.ndarray] = []
        self.ranged_direct: list[np.ndarray] = []
        self.ranged_direct_events: list[np.ndarray] = []

    def gather(self, hits: list[Posting], events: list[int]) -> None:
        """Take the postings ``hits``, found for ``events`` (one each), as candidates."""
        direct, direct_events = self.direct, self.direct_events
        checked, checked_events = self.checked, self.checked_events
        for posting, event in zip(hits, events, strict=True):
            if posting.direct_ids is None:
                posting.refresh()
            if posting.direct:
                direct.append(posting.direct_ids)  # type: ignore[arg-type]  # refreshed above
                direct_events.append(event)
            if posting.checked:
                checked.append(posting.checked_ids)  # type: ignore[arg-type]  # as above
                checked_events.append(event)


#: What :class:`Codes` code: attribute names, value keys.
CodeKey = TypeVar("CodeKey", bound=Hashable)


class Codes(Generic[CodeKey]):
    """Dense codes for keys (attribute names, value keys), counted so that they are
    freed, and reused, once no check names them."""

    __slots__ = ("code", "free", "refs")

    def __init__(self) -> None:
        self.code: dict[CodeKey, int] = {}
        self.refs: dict[CodeKey, int] = {}
        self.free: list[int] = []

    def acquire(self, key: CodeKey) -> int:
        if key in self.refs:
            self.refs[key] += 1
            return self.code[key]
        self.refs[key] = 1
        code = self.code[key] = self.free.pop() if self.free else len(self.code)
        return code

    def release(self, key: CodeKey) -> None:
        self.refs[key] -= 1
        if not self.refs[key]:
            del self.refs[key]
            self.free.append(self.code.pop(key))

    def span(self) -> int:
        """One past the highest code in use (or freed)."""
        return len(self.code) + len(self.free)
