"""Conjunctions filed under a numeric interval: which may contain an event's value.

A :class:`Segment` holds the intervals of one attribute of one shape, sorted by one
double key, so that the candidates for a value ``v`` are one window of the sorted keys:

- bounded intervals, by width class (a factor of 256 in width):
  key ``low``; an interval containing ``v`` has ``v - reach <= low <= v``, ``reach``
  the widest member (widened a little, so that rounding never leaves one out);
- intervals bounded below only: key ``low``, every ``low <= v``;
- intervals bounded above only: key ``-high``, every ``-high <= -v``.

A window may hold intervals that end before ``v``: the index checks every candidate's
interval anyway (:mod:`matching.arrays`), so a window need only never miss one.

Keys and conjunction ids live in numpy arrays, searched with ``searchsorted``. New
entries wait in a short unsorted list (every one a candidate) and are merged in by
batches (and before a batch of events: there every one would be a candidate for
each event); removed ones stay as tombstones (the index masks dead conjunctions) until a
quarter of the segment is dead, so adding and removing cost O(1) amortized, not a copy
of the arrays each.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right

import numpy as np

#: Entries waiting unsorted before they are merged into the sorted arrays: each one is
#: a candidate for every event, so few; each merge copies the arrays, so not too few.
RECENT_MAX = 16
#: Width classes span this many powers of two.
CLASS_BITS = 8
#: Widths are widened by this share of the bounds' magnitude (and queries by this share
#: of the value's), so that float rounding never leaves an interval out of a window.
SLACK = 2.0**-40

#: (attribute, width class)
SegmentKey = tuple[str, int]
#: Width classes of the two one-sided shapes.
ABOVE, BELOW = 10_000, -10_000


def segment_key(attr: str, low: float, high: float) -> tuple[SegmentKey, float, float]:
    """The segment of an interval, its sort key and its reach."""
    if high == math.inf:
        return (attr, ABOVE), low, math.inf
    if low == -math.inf:
        return (attr, BELOW), -high, math.inf
    width = high - low + (abs(low) + abs(high)) * SLACK
    if width == math.inf or width != width:  # beyond doubles: filed as if unbounded
        return (attr, ABOVE), low, math.inf
    width_class = math.frexp(width)[1] // CLASS_BITS if width > 0 else -1
    return (attr, width_class), low, width


class Segment:
    __slots__ = ("below", "check_highs", "checked", "conj", "dead", "dead_ids", "highs", "key_view",
                 "keys", "reach", "recent_array", "recent_conj", "recent_highs", "recent_keys")

    def __init__(self, below: bool, checked: bool) -> None:
        #: Keys are ``-high`` (intervals bounded above only).
        self.below = below
        #: The entries have more to check than their interval; if not, what a window
        #: holds (high ends filtered) is matched, with no check. A segment holds one
        #: kind only: one checked entry among many would have them all checked.
        self.checked = checked
        #: Some high end is finite (and not the key): a window is filtered by them.
        self.check_highs = False
        self.keys = np.empty(0, np.float64)
        #: The keys as Python floats, for bisect on one value: 3x cheaper than numpy's
        #: call for a scalar.
        self.key_view = memoryview(self.keys)  # type: ignore[arg-type]  # numpy arrays are buffers; its stubs do not say so
        self.highs = np.empty(0, np.float64)
        self.conj = np.empty(0, np.int64)
        self.recent_keys: list[float] = []
        self.recent_highs: list[float] = []
        self.recent_conj: list[int] = []
        self.recent_array: np.ndarray | None = None  # of recent_conj, made on demand
        #: Tombstones in the sorted arrays, and their ids (reusable once compacted away).
        self.dead = 0
        self.dead_ids: list[int] = []
        self.reach = 0.0

    def __len__(self) -> int:
        return len(self.keys) - self.dead + len(self.recent_conj)

    def add(self, key: float, high: float, conj: int, reach: float, alive: np.ndarray
            ) -> list[int]:
        """File ``conj`` under ``key``; returns the ids that became free (a merge may
        compact tombstones away)."""
        self.reach = max(self.reach, reach)
        self.check_highs = self.check_highs or (not self.below and high != math.inf)
        self.recent_keys.append(key)
        self.recent_highs.append(high)
        self.recent_conj.append(conj)
        self.recent_array = None
        if len(self.recent_conj) > RECENT_MAX:
            return self.merge(alive)
        return []

    def remove(self, conj: int, alive: np.ndarray) -> list[int]:
        """Forget ``conj`` (the caller marks it dead in ``alive`` first); returns the ids
        that became free."""
        try:
            i = self.recent_conj.index(conj)
        except ValueError:
            self.dead += 1
            self.dead_ids.append(conj)
            if self.dead * 4 > len(self.keys):
                return self.merge(alive)
            return []
        del self.recent_conj[i], self.recent_keys[i], self.recent_highs[i]
        self.recent_array = None
        return [conj]

    def merge(self, alive: np.ndarray) -> list[int]:
        """Sort the recent entries in and drop tombstones; returns the ids that became
        free."""
        keys, highs, conj = self.keys, self.highs, self.conj
        freed = self.dead_ids
        if self.dead:
            live = alive[conj]
            keys, highs, conj = keys[live], highs[live], conj[live]
        recent_keys = np.array(self.recent_keys, np.float64)
        order = np.argsort(recent_keys, kind="stable")
        at = np.searchsorted(keys, recent_keys[order])
        self.keys = np.insert(keys, at, recent_keys[order])
        self.key_view = memoryview(self.keys)  # type: ignore[arg-type]  # numpy arrays are buffers; its stubs do not say so
        self.highs = np.insert(highs, at, np.array(self.recent_highs, np.float64)[order])
        self.conj = np.insert(conj, at, np.array(self.recent_conj, np.int64)[order])
        self.recent_keys, self.recent_highs, self.recent_conj = [], [], []
        self.recent_array = None
        self.dead, self.dead_ids = 0, []
        return freed

    def recent_ids(self) -> np.ndarray:
        if self.recent_array is None:
            self.recent_array = np.array(self.recent_conj, np.int64)
        return self.recent_array

    def window(self, value: float) -> tuple[int, int]:
        """:meth:`windows` for one value that is a double, in scalar arithmetic."""
        if self.below:
            value = -value
        keys = self.key_view
        end = bisect_right(keys, value)
        if self.reach == math.inf:
            return 0, end
        low_key = value - self.reach - abs(value) * SLACK
        if low_key != low_key:  # inf - inf: an infinite value, in no bounded interval
            return 0, 0
        return bisect_left(keys, low_key, 0, end), end

    def windows(self, lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Start and end of the sorted entries that may contain each value, given the
        lowest and highest the value may be (equal unless it is not a double)."""
        if self.below:
            lower, upper = -upper, -lower
        ends = np.searchsorted(self.keys, upper, "right")
        if self.reach == math.inf:  # one-sided: a prefix (and inf - inf is NaN)
            return np.zeros_like(ends), ends
        with np.errstate(invalid="ignore"):  # inf - inf for an infinite value: no window
            low_keys = lower - self.reach - np.abs(lower) * SLACK
        return np.searchsorted(self.keys, low_keys, "left"), ends
