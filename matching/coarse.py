"""The coarse form of many filters: bounded in size, never says no wrongly.

Each conjunction contributes what its access predicate (:func:`matching.access.plan`)
needs to hold, as one of:

- an equality: its values go into a Bloom filter keyed by attribute and value; when the
  conjunction has a second equality, the *pair* of values goes in instead (far more
  selective: ``sym = 'A' AND venue = 'X'`` no longer lets every 'A' event through);
- a numeric range: a closed interval of the attribute, merged with the others and, past
  :data:`MAX_INTERVALS`, widened by closing the smallest gaps;
- anything else that needs the attribute present (a string range, ``LIKE '%x'``...):
  the attribute's name.

A filter too large to split into conjunctions contributes every access of a set it
implies. A conjunction without any access has no coarse form; the summary keeps such
filters exactly (:mod:`matching.summary`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from matching.access import BOOL_TAG, Access, Equals, Range, ValueKey, access_of, plan
from matching.ast import Expr, Value, kind_of
from matching.bloom import Bloom, name_bytes, value_bytes
from matching.normal import Conjunction

MAX_INTERVALS = 16
#: Equalities with more value combinations than this go in as single values.
MAX_PAIR_COMBINATIONS = 16
MAX_ATTRS = 256
#: Most UTF-8 bytes of attribute names one coarse part carries, so that a summary fits
#: the smallest messages that carry it whatever names its filters use.
MAX_NAME_BYTES = 8192

Interval = tuple[Value | None, Value | None]  # closed; None is unbounded


def _key_value(key: ValueKey) -> Value:
    return key[1] if isinstance(key, tuple) and key[0] == BOOL_TAG else key  # type: ignore[return-value]  # a boolean key holds its bool second


def single_item(attr: str, value: Value) -> bytes:
    return name_bytes(attr) + b"\x00" + value_bytes(value)


def pair_item(first: tuple[str, Value], second: tuple[str, Value]) -> bytes:
    (a, x), (b, y) = sorted([first, second], key=lambda av: av[0])
    return single_item(a, x) + b"\x01" + single_item(b, y)


def _gap(left: Interval, right: Interval) -> float:
    try:
        return float(right[0]) - float(left[1])  # type: ignore[arg-type]  # gaps are measured between numeric intervals only, bounded on these sides
    except OverflowError:
        return math.inf


def merge_intervals(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    """Union of closed intervals, widened to at most MAX_INTERVALS (never narrower)."""
    def low_first(iv: Interval) -> tuple[bool, float | int]:
        return (iv[0] is not None, iv[0] if iv[0] is not None else 0)  # type: ignore[return-value]  # an attribute's intervals are all numbers
    merged: list[Interval] = []
    for low, high in sorted(intervals, key=low_first):
        if merged and (merged[-1][1] is None or low is None
                       or low <= merged[-1][1]):  # type: ignore[operator]  # one attribute's bounds are all numbers or all texts
            last_high = merged[-1][1]
            wider = None if last_high is None or high is None else max(last_high, high)
            merged[-1] = (merged[-1][0], wider)
        else:
            merged.append((low, high))
    while len(merged) > MAX_INTERVALS:
        gaps = [_gap(merged[i], merged[i + 1]) for i in range(len(merged) - 1)]
        i = gaps.index(min(gaps))
        merged[i:i + 2] = [(merged[i][0], merged[i + 1][1])]
    return tuple(merged)


@dataclass(frozen=True)
class Coarse:
    bloom: Bloom | None  # None when no equality went in
    single_attrs: frozenset[str] = frozenset()
    pair_attrs: frozenset[tuple[str, str]] = frozenset()
    intervals: tuple[tuple[str, tuple[Interval, ...]], ...] = ()
    present: frozenset[str] = frozenset()

    def attr_count(self) -> int:
        return (len(self.single_attrs) + len(self.pair_attrs) + len(self.intervals)
                + len(self.present))

    def name_bytes(self) -> int:
        """UTF-8 bytes of the attribute names it carries (its size on the wire grows
        with them)."""
        names = [*self.single_attrs, *(n for pair in self.pair_attrs for n in pair),
                 *(name for name, _ in self.intervals), *self.present]
        return sum(len(name.encode()) for name in names)

    def may_match(self, attrs: Mapping[str, Value]) -> bool:
        if any(attrs.get(name) is not None for name in self.present):
            return True
        for name, intervals in self.intervals:
            value = attrs.get(name)
            if kind_of(value) == "num" and any(
                    (low is None or low <= value) and (high is None or value <= high)  # type: ignore[operator]  # kind_of(value) == "num" and the intervals are numeric
                    for low, high in intervals):
                return True
        bloom = self.bloom
        if bloom is None:
            return False
        for name in self.single_attrs:
            value = attrs.get(name)
            if kind_of(value) is not None and single_item(name, value) in bloom:  # type: ignore[arg-type]  # kind_of(value) is not None: a Value
                return True
        for a, b in self.pair_attrs:
            x, y = attrs.get(a), attrs.get(b)
            if kind_of(x) is not None and kind_of(y) is not None and \
                    pair_item((a, x), (b, y)) in bloom:  # type: ignore[arg-type]  # kind_of(x), kind_of(y) not None: Values
                return True
        return False


class CoarseBuilder:
    """Accumulates coarse contributions; ``build`` returns None past MAX_ATTRS."""

    def __init__(self, bloom_bytes: int) -> None:
        self.bloom_bytes = bloom_bytes
        self.bloom: Bloom | None = None
        self.items: list[bytes] = []
        self.single_attrs: set[str] = set()
        self.pair_attrs: set[tuple[str, str]] = set()
        self.intervals: dict[str, list[Interval]] = {}
        self.present: set[str] = set()

    def absorb(self, coarse: Coarse) -> None:
        if coarse.bloom is not None:
            self.bloom = coarse.bloom if self.bloom is None else self.bloom.union(coarse.bloom)
        self.single_attrs |= coarse.single_attrs
        self.pair_attrs |= coarse.pair_attrs
        for name, intervals in coarse.intervals:
            self.intervals.setdefault(name, []).extend(intervals)
        self.present |= coarse.present

    def add_access(self, access: Access) -> None:
        if isinstance(access, Equals):
            self.single_attrs.add(access.attr)
            self.items.extend(single_item(access.attr, _key_value(k)) for k in access.keys)
        elif isinstance(access, Range) and access.kind == "num":
            self.intervals.setdefault(access.attr, []).append((access.low, access.high))
        else:
            self.present.add(access.attr)

    def add_conjunction(self, conjunction: Conjunction) -> bool:
        """Add what the conjunction needs; False when it has no access (needs exact)."""
        how = plan(conjunction)
        if how.never:
            return True
        if how.access is None:
            return False
        first = how.access
        second = next((a for a in map(_equality_of, how.rest)
                       if a is not None and isinstance(first, Equals) and a.attr != first.attr),
                      None)
        if second is None or not isinstance(first, Equals) or \
                len(first.keys) * len(second.keys) > MAX_PAIR_COMBINATIONS:
            self.add_access(first)
            return True
        self.pair_attrs.add(tuple(sorted((first.attr, second.attr))))  # type: ignore[arg-type]  # sorted() of two names gives two
        self.items.extend(pair_item((first.attr, _key_value(x)), (second.attr, _key_value(y)))
                          for x in first.keys for y in second.keys)
        return True

    def build(self) -> Coarse | None:
        bloom = self.bloom
        if self.items:
            # A peer's larger filter sets the size; ours is unfolded to it, never shrunk.
            bloom = (bloom or Bloom.empty(self.bloom_bytes)).union(
                Bloom.empty(self.bloom_bytes)).with_items(self.items)
        coarse = Coarse(
            bloom, frozenset(self.single_attrs),
            frozenset(self.pair_attrs),
            tuple(sorted((name, merge_intervals(ivs)) for name, ivs in self.intervals.items())),
            frozenset(self.present))
        if coarse.attr_count() > MAX_ATTRS or coarse.name_bytes() > MAX_NAME_BYTES:
            return None  # the summary then matches everything: bounded, never refused
        return coarse


def _equality_of(pred: Expr) -> Equals | None:
    found = access_of(pred)
    return found[0] if found and isinstance(found[0], Equals) and found[1] else None
