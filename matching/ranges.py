"""Numeric interval stabbing per attribute: which stored intervals contain a value.

Three sorted lists per attribute. Lower-bound-only intervals (``x > c``) that contain
``v`` form a prefix of the list sorted by bound; upper-bound-only ones (``x < c``) a
prefix of the list sorted by negated bound; bounded intervals are sorted by their low
end and scanned back no further than the widest of them reaches. Adding and removing
are a bisection each.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Hashable
from typing import NamedTuple


class Interval(NamedTuple):
    attr: str
    low: float | None
    low_inclusive: bool
    high: float | None
    high_inclusive: bool


Handle = tuple[str, str, tuple]


class RangeTable:
    def __init__(self) -> None:
        self._above: dict[str, list[tuple]] = defaultdict(list)
        self._below: dict[str, list[tuple]] = defaultdict(list)
        self._between: dict[str, list[tuple]] = defaultdict(list)
        self._widest: dict[str, float] = defaultdict(float)
        self._seq = 0

    def add(self, interval: Interval, item: Hashable) -> Handle:
        """Store ``item`` under ``interval``; returns the handle that removes it."""
        self._seq += 1
        attr = interval.attr
        if interval.high is None:
            assert interval.low is not None
            # ``not inclusive`` sorts an inclusive bound before an exclusive one.
            entry: tuple = (interval.low, not interval.low_inclusive, self._seq, item)
            kind = "above"
        elif interval.low is None:
            entry = (-interval.high, not interval.high_inclusive, self._seq, item)
            kind = "below"
        else:
            self._widest[attr] = max(self._widest[attr], interval.high - interval.low)
            entry = (interval.low, interval.high, self._seq, item)
            kind = "between"
        bisect.insort(self._table(kind)[attr], entry)
        return (kind, attr, entry)

    def remove(self, handle: Handle) -> None:
        kind, attr, entry = handle
        entries = self._table(kind)[attr]
        i = bisect.bisect_left(entries, entry)
        if i < len(entries) and entries[i] == entry:
            del entries[i]

    def _table(self, kind: str) -> dict[str, list[tuple]]:
        return {"above": self._above, "below": self._below, "between": self._between}[kind]

    def stab(self, attr: str, v: float, out: list[Hashable]) -> None:
        """Append the item of every interval of ``attr`` that contains ``v``."""
        above = self._above.get(attr)
        if above:  # low < v, or low == v when inclusive
            out.extend(entry[3] for entry in above[:bisect.bisect_left(above, (v, True))])
        below = self._below.get(attr)
        if below:  # high > v, or high == v when inclusive
            out.extend(entry[3] for entry in below[:bisect.bisect_left(below, (-v, True))])
        between = self._between.get(attr)
        if between:
            start = bisect.bisect_left(between, (v - self._widest[attr],))
            end = bisect.bisect_right(between, (v, float("inf")))
            out.extend(e[3] for e in between[start:end] if e[0] <= v <= e[1])
