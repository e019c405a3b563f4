"""Interval stabbing per attribute: which stored ranges contain a value.

One table holds ranges of one kind (numbers, or strings). Per attribute:

- ranges bounded below only (``x > c``) that contain ``v`` form a prefix of the list
  sorted by bound, so one bisection finds them all;
- ranges bounded above only (``x < c``) form a suffix of theirs;
- bounded ranges (numbers only) are grouped by width class (a factor of 64 in width)
  and by whether the high end is inclusive, each group sorted by low end. The ranges
  that can contain ``v`` start no further back than the group's widest member reaches;
  of those, the ones whose high end reaches ``v`` are picked by a plain loop over the
  parallel list of high ends. A group costs two bisections, about as much as looking
  at ten high ends: wide classes keep the groups few, and one very wide range does not
  slow down a group of narrow ones.

Each sorted list keeps its bounds, full keys and items in parallel lists: bisection
runs on plain numbers, and a prefix or suffix of hits is copied at C speed. Adding and
removing is a bisection and a list insert or delete.
"""

from __future__ import annotations

import bisect
import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from matching.access import Range

#: Widths are widened by this share of the bounds' magnitude, so that float rounding
#: (of the width, and of ``value - reach`` when stabbing) never leaves a range out.
_SLACK = 2.0**-40
#: Width classes of bounded ranges span this many powers of two: the widest member of a
#: class is at most 2**_CLASS_BITS times as wide as the narrowest. Fewer classes mean
#: fewer bisections per event; wider ones, more high ends compared.
_CLASS_BITS = 6
#: A sorted entry: (bound, flag[, high], seq). Bounds are numbers or texts, one kind per
#: table, so keys of one list always compare.
_Key = tuple[Any, ...]
#: Bounds: doubles in an array while each one is exactly a double, else a list. (A
#: string: array is not subscriptable at run time before Python 3.12.)
_Column: TypeAlias = "array[float] | list[Any]"
#: Integers up to this size are exactly doubles.
_EXACT_INT = 2**53


def _exact_double(value: object) -> bool:
    """Whether a bound is exactly a C double, so that an array can hold it."""
    cls = value.__class__
    return cls is float or (cls is int and -_EXACT_INT <= value <= _EXACT_INT)  # type: ignore[operator]  # cls is int


def _column() -> _Column:
    return array("d")


@dataclass
class _Sorted:
    #: (bound, flag, ...): the order; ``bounds[i]`` is ``keys[i][0]``.
    keys: list[_Key] = field(default_factory=list)
    #: An array of doubles while every bound is one (a list once one is not): bisection
    #: then reads contiguous memory instead of chasing a pointer to a float per step,
    #: which at 100k subscriptions is mostly cache misses.
    bounds: _Column = field(default_factory=_column)
    items: list[Hashable] = field(default_factory=list)
    #: Bounded groups: the high ends (as ``bounds``), which items are pending (1) rather
    #: than direct (0) and how many, and the widest member ever added (removals never
    #: shrink it: safe).
    highs: _Column = field(default_factory=_column)
    pending: bytearray = field(default_factory=bytearray)
    pending_count: int = 0
    reach: float = 0.0

    def insert(self, key: _Key, item: Hashable, high: Any = None, pending: bool = False
               ) -> None:
        i = bisect.bisect_left(self.keys, key)
        self.keys.insert(i, key)
        if isinstance(self.bounds, array) and not _exact_double(key[0]):
            self.bounds = list(self.bounds)
        self.bounds.insert(i, key[0])
        self.items.insert(i, item)
        if high is not None:
            if isinstance(self.highs, array) and not _exact_double(high):
                self.highs = list(self.highs)
            self.highs.insert(i, high)
            self.pending.insert(i, pending)
            self.pending_count += pending

    def delete(self, key: _Key) -> None:
        i = bisect.bisect_left(self.keys, key)
        if i < len(self.keys) and self.keys[i] == key:
            del self.keys[i], self.bounds[i], self.items[i]
            if self.highs:
                del self.highs[i]
                self.pending_count -= self.pending.pop(i)

    def end_of_low(self, value: object) -> int:
        """Index past the entries whose low bound admits ``value``: below it, or equal
        and inclusive (inclusive sorts first: the flag is ``exclusive``)."""
        bounds, keys = self.bounds, self.keys
        end = bisect_left(bounds, value)
        while end < len(bounds) and bounds[end] == value and not keys[end][1]:
            end += 1
        return end

    def prefix_into(self, value: object, out: list[Hashable]) -> None:
        """Ranges bounded below: those whose low end admits ``value``."""
        bounds = self.bounds
        if value < bounds[0]:  # type: ignore[operator]  # below them all: no bisection
            return
        end = bisect_left(bounds, value)
        if end < len(bounds) and bounds[end] == value:
            end = self.end_of_low(value)
        out.extend(self.items[:end])

    def suffix_into(self, value: object, out: list[Hashable]) -> None:
        """Ranges bounded above: high > value, or high == value and inclusive (sorted
        last: the flag is ``inclusive``)."""
        bounds = self.bounds
        if value > bounds[-1]:  # type: ignore[operator]  # above them all: no bisection
            return
        start = bisect_right(bounds, value)
        if start and bounds[start - 1] == value:
            keys = self.keys
            while start > 0 and bounds[start - 1] == value and keys[start - 1][1]:
                start -= 1
        out.extend(self.items[start:])


@dataclass
class _AttrRanges:
    #: Direct items, then pending ones: keys (low, exclusive, seq)
    above: tuple[_Sorted, _Sorted] = field(default_factory=lambda: (_Sorted(), _Sorted()))
    #: Direct items, then pending ones: keys (high, inclusive, seq)
    below: tuple[_Sorted, _Sorted] = field(default_factory=lambda: (_Sorted(), _Sorted()))
    #: (width class, high inclusive) -> keys (low, low exclusive, high, seq); both forms
    bounded: dict[tuple[int, bool], _Sorted] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not any(s.keys for s in self.above + self.below) and not self.bounded


#: (where, attribute, group or form, key)
Handle = tuple[str, str, tuple[int, bool] | int, _Key]


def _width(low: float, high: float) -> float:
    """``high - low``, widened by the slack; inf when it does not fit a float."""
    try:
        low, high = float(low), float(high)
        width = high - low + (abs(low) + abs(high)) * _SLACK
    except OverflowError:  # integers beyond float range
        return math.inf
    return math.inf if math.isnan(width) else width


def _width_class(width: float) -> int:
    if 0 < width < math.inf:
        return math.frexp(width)[1] // _CLASS_BITS
    return -10_000 if width <= 0 else 10_000


class RangeTable:
    """Ranges with an item each, in one of two forms: direct or pending (the index's
    conjunctions decided by their range alone, and the others); a stab hands the items
    of each form to its own list."""

    def __init__(self) -> None:
        self._attrs: dict[str, _AttrRanges] = {}
        self._seq = 0  # makes every key unique, so a removal finds exactly its entry

    def __bool__(self) -> bool:
        return bool(self._attrs)

    def add(self, rng: Range, item: Hashable, pending: bool = False) -> Handle:
        """Store ``item`` under ``rng``; returns the handle that removes it."""
        self._seq += 1
        ranges = self._attrs.setdefault(rng.attr, _AttrRanges())
        if rng.high is None:
            assert rng.low is not None
            # ``not inclusive`` sorts an inclusive bound first: it contains its bound.
            key: _Key = (rng.low, not rng.low_inclusive, self._seq)
            ranges.above[pending].insert(key, item)
            return ("above", rng.attr, int(pending), key)
        if rng.low is None:
            key = (rng.high, rng.high_inclusive, self._seq)
            ranges.below[pending].insert(key, item)
            return ("below", rng.attr, int(pending), key)
        assert rng.kind == "num", "only numeric ranges have both bounds"
        width = _width(rng.low, rng.high)  # type: ignore[arg-type]  # numeric range with both bounds (asserted above)
        group_key = (_width_class(width), rng.high_inclusive)
        group = ranges.bounded.setdefault(group_key, _Sorted())
        group.reach = max(group.reach, width)
        key = (rng.low, not rng.low_inclusive, rng.high, self._seq)
        group.insert(key, item, rng.high, pending)
        return ("bounded", rng.attr, group_key, key)

    def remove(self, handle: Handle) -> None:
        where, attr, place, key = handle
        ranges = self._attrs[attr]
        if where == "bounded":
            group = ranges.bounded[place]  # type: ignore[index]  # a "bounded" handle holds its group key
            group.delete(key)
            if not group.keys:
                del ranges.bounded[place]  # type: ignore[arg-type]  # its reach goes too
        else:
            (ranges.above if where == "above" else ranges.below)[place].delete(key)  # type: ignore[index]  # an "above"/"below" handle holds the form 0 or 1
        if ranges.is_empty():
            del self._attrs[attr]

    def stab(self, attr: str, value: object, hits: list[Hashable], pending: list[Any]) -> None:
        """Append the item of every range of ``attr`` that contains ``value`` to
        ``hits`` (direct items) or ``pending``."""
        ranges = self._attrs.get(attr)
        if ranges is None:
            return
        above, above_pending = ranges.above
        if above.keys:
            above.prefix_into(value, hits)
        if above_pending.keys:
            above_pending.prefix_into(value, pending)
        below, below_pending = ranges.below
        if below.keys:
            below.suffix_into(value, hits)
        if below_pending.keys:
            below_pending.suffix_into(value, pending)
        for (_, high_inclusive), group in ranges.bounded.items():
            lows = group.bounds
            try:
                start = bisect_left(lows, value - group.reach)  # type: ignore[operator]  # bounded groups exist only in the numeric table
            except OverflowError:  # an integer beyond float range
                start = 0
            end = bisect_left(lows, value, start)
            if end < len(lows) and lows[end] == value:
                end = group.end_of_low(value)
            if start >= end:
                continue
            # Plain loops: in CPython 3.11 their specialized float comparisons and list
            # indexing beat compress() over a map of a partial.
            highs, items = group.highs, group.items
            if group.pending_count:
                flags = group.pending
                if high_inclusive:
                    for i in range(start, end):
                        if value <= highs[i]:  # type: ignore[operator]  # numeric table: value is a number
                            (pending if flags[i] else hits).append(items[i])
                else:
                    for i in range(start, end):
                        if value < highs[i]:  # type: ignore[operator]  # numeric table: value is a number
                            (pending if flags[i] else hits).append(items[i])
            elif high_inclusive:
                append = hits.append
                for i in range(start, end):
                    if value <= highs[i]:  # type: ignore[operator]  # numeric table: value is a number
                        append(items[i])
            else:
                append = hits.append
                for i in range(start, end):
                    if value < highs[i]:  # type: ignore[operator]  # numeric table: value is a number
                        append(items[i])
