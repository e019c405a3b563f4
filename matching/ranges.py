"""Interval stabbing per attribute: which stored ranges contain a value.

One table holds ranges of one kind (numbers, or strings). Per attribute:

- ranges bounded below only (``x > c``) that contain ``v`` form a prefix of the list
  sorted by bound, so one bisection finds them all;
- ranges bounded above only (``x < c``) form a suffix of theirs;
- bounded ranges (numbers only) are grouped by width class (powers of two), each group
  sorted by low end; a group is scanned back from ``v`` no further than its widest
  member reaches. Members of a group are at least half as wide as the widest, so most
  of what is scanned is a hit: one very wide range does not slow the others down.

Each sorted list keeps its bounds, full keys and items in parallel lists: bisection
runs on plain numbers, and a prefix or suffix of hits is copied at C speed. Adding and
removing is a bisection and a list insert or delete.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable
from dataclasses import dataclass, field

from matching.access import Range


@dataclass
class _Sorted:
    #: (bound, flag, ...): the order; ``bounds[i]`` is ``keys[i][0]``.
    keys: list[tuple] = field(default_factory=list)
    bounds: list = field(default_factory=list)
    items: list[Hashable] = field(default_factory=list)
    #: Bounded groups: the widest member ever added (removals never shrink it: safe).
    reach: float = 0.0

    def insert(self, key: tuple, item: Hashable) -> None:
        i = bisect.bisect_left(self.keys, key)
        self.keys.insert(i, key)
        self.bounds.insert(i, key[0])
        self.items.insert(i, item)

    def delete(self, key: tuple) -> None:
        i = bisect.bisect_left(self.keys, key)
        if i < len(self.keys) and self.keys[i] == key:
            del self.keys[i], self.bounds[i], self.items[i]


@dataclass
class _AttrRanges:
    above: _Sorted = field(default_factory=_Sorted)  # keys (low, exclusive, seq)
    below: _Sorted = field(default_factory=_Sorted)  # keys (high, inclusive, seq)
    #: width class -> keys (low, low exclusive, high, high inclusive, seq)
    bounded: dict[int, _Sorted] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not self.above.keys and not self.below.keys and not self.bounded


Handle = tuple[str, str, int, tuple]


def _width(low: float, high: float) -> float:
    try:
        return float(high) - float(low)
    except OverflowError:  # integers beyond float range
        return math.inf


def _width_class(width: float) -> int:
    return math.frexp(width)[1] if 0 < width < math.inf else (0 if width <= 0 else 10_000)


def _reach_back(value: float, reach: float) -> float:
    try:
        return value - reach
    except OverflowError:
        return -math.inf


class RangeTable:
    def __init__(self) -> None:
        self._attrs: dict[str, _AttrRanges] = {}
        self._seq = 0  # makes every key unique, so a removal finds exactly its entry

    def add(self, rng: Range, item: Hashable) -> Handle:
        """Store ``item`` under ``rng``; returns the handle that removes it."""
        self._seq += 1
        ranges = self._attrs.setdefault(rng.attr, _AttrRanges())
        if rng.high is None:
            assert rng.low is not None
            # ``not inclusive`` sorts an inclusive bound first: it contains its bound.
            key: tuple = (rng.low, not rng.low_inclusive, self._seq)
            ranges.above.insert(key, item)
            return ("above", rng.attr, 0, key)
        if rng.low is None:
            key = (rng.high, rng.high_inclusive, self._seq)
            ranges.below.insert(key, item)
            return ("below", rng.attr, 0, key)
        assert rng.kind == "num", "only numeric ranges have both bounds"
        width = _width(rng.low, rng.high)  # type: ignore[arg-type]
        group = ranges.bounded.setdefault(_width_class(width), _Sorted())
        group.reach = max(group.reach, width)
        key = (rng.low, not rng.low_inclusive, rng.high, rng.high_inclusive, self._seq)
        group.insert(key, item)
        return ("bounded", rng.attr, _width_class(width), key)

    def remove(self, handle: Handle) -> None:
        where, attr, group_class, key = handle
        ranges = self._attrs[attr]
        if where == "bounded":
            ranges.bounded[group_class].delete(key)
            if not ranges.bounded[group_class].keys:
                del ranges.bounded[group_class]  # its reach goes with it
        else:
            (ranges.above if where == "above" else ranges.below).delete(key)
        if ranges.is_empty():
            del self._attrs[attr]

    def stab(self, attr: str, value: object, out: list[Hashable]) -> None:
        """Append the item of every range of ``attr`` that contains ``value``."""
        ranges = self._attrs.get(attr)
        if ranges is None:
            return
        above = ranges.above
        if above.keys:  # low < value, or low == value and inclusive (sorted first)
            bounds, keys = above.bounds, above.keys
            end = bisect.bisect_left(bounds, value)
            while end < len(bounds) and bounds[end] == value and not keys[end][1]:
                end += 1
            out.extend(above.items[:end])
        below = ranges.below
        if below.keys:  # high > value, or high == value and inclusive (sorted last)
            bounds, keys = below.bounds, below.keys
            start = bisect.bisect_right(bounds, value)
            while start > 0 and bounds[start - 1] == value and keys[start - 1][1]:
                start -= 1
            out.extend(below.items[start:])
        for group in ranges.bounded.values():
            lows, keys = group.bounds, group.keys
            start = bisect.bisect_left(lows, _reach_back(value, group.reach))  # type: ignore[arg-type]
            for i in range(start, bisect.bisect_right(lows, value)):
                low, low_exclusive, high, high_inclusive, _ = keys[i]
                if (value < high or (high_inclusive and value == high)) and not (  # type: ignore[operator]
                        low_exclusive and value == low):
                    out.append(group.items[i])
