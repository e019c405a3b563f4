"""How the index files one conjunction: its cluster (access) and the form of its check.

After :func:`matching.access.plan` picked a conjunction's most selective access,

- :func:`pair_plan` adds a second exact equality on another attribute, so that the
  conjunction sits in a cluster keyed by two values (multi-attribute hashing, Fabret et
  al. 2001) and is not looked at until both hold;
- :func:`pending_item` turns the rest into what the index checks: one numeric interval
  on one attribute (the commonest rest: ``sym = 'A' AND px > 3``), tested inline from
  plain data, and a compiled closure for anything else, called only when the interval
  holds;
- :class:`Bucket` holds a cluster's conjunctions: those decided by the access, and the
  pending ones.

Both indexes (:mod:`matching.clustered`, :mod:`matching.arrays`) keep their clusters in
nested dicts (attribute, value[, attribute, value]), filed, pruned and looked up by
:func:`leaf`, :func:`drop_from_leaf` and :func:`paired_leaves`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from matching.access import AccessOf, Equals, Range, access_of
from matching.ast import Expr
from matching.evaluate import Test, compile_conjunction

#: A pair access files a conjunction under every combination of its two value sets;
#: past this many it keeps the one-attribute access.
MAX_PAIR_KEYS = 16

#: What a conjunction needs once its access holds: attribute, low, low inclusive, high,
#: high inclusive, filter key, compiled check. TRUE when the attribute holds a number
#: within the bounds (an unbounded side is an inclusive infinity; no attribute: no
#: interval) and the check (None: none) is True. The interval is tested inline from
#: plain data, and the check called only when it holds.
Pending = tuple[str | None, float, bool, float, bool, Hashable, Test | None]


class Pair(NamedTuple):
    """Both equalities hold: ``first.attr`` sorts before ``second.attr``. (A named
    tuple, as :class:`~matching.access.Equals`: made for many an add.)"""

    first: Equals
    second: Equals


def pair_plan(access: Equals, rest: Sequence[Expr], access_of: AccessOf = access_of
              ) -> tuple[Pair, tuple[Expr, ...]] | None:
    """A second exact equality among ``rest``, on another attribute, to cluster on
    together with ``access`` (the one with fewest values); None when there is none."""
    best: tuple[Expr, Equals] | None = None
    for pred in rest:
        found = access_of(pred)
        if found is None or not found[1] or not isinstance(other := found[0], Equals):
            continue
        if other.attr != access.attr and len(other.keys) * len(access.keys) <= MAX_PAIR_KEYS \
                and (best is None or len(other.keys) < len(best[1].keys)):
            best = (pred, other)
    if best is None:
        return None
    pred, other = best
    pair = Pair(access, other) if access.attr < other.attr else Pair(other, access)
    return pair, tuple([p for p in rest if p is not pred])


def pending_item(rest: Sequence[Expr], key: Hashable, access_of: AccessOf = access_of
                 ) -> Pending:
    """What the index checks for a conjunction of which ``rest`` remains once its access
    holds: the numeric interval of the first attribute ``rest`` bounds (all its bounds
    merged), inline, then a compiled check of what else remains (None: nothing)."""
    interval: Range | None = None
    covered: list[Expr] = []
    for pred in rest:
        found = access_of(pred)
        if found is not None and found[1] and isinstance(rng := found[0], Range) \
                and rng.kind == "num" and (interval is None or rng.attr == interval.attr):
            interval = rng if interval is None else interval.intersect(rng)
            covered.append(pred)
    others: list[Expr] = []
    for pred in rest:  # loops, not comprehensions: this runs for every conjunction added
        for done in covered:
            if pred is done:
                break
        else:
            others.append(pred)
    check = compile_conjunction(others) if others else None
    if interval is None:
        return (None, -math.inf, True, math.inf, True, key, check)
    low, low_inclusive = (-math.inf, True) if interval.low is None else (
        interval.low, interval.low_inclusive)
    high, high_inclusive = (math.inf, True) if interval.high is None else (
        interval.high, interval.high_inclusive)
    return (interval.attr, low, low_inclusive, high, high_inclusive,  # type: ignore[return-value]  # numeric interval (kind "num"): its bounds are numbers
            key, check)


class Bucket:
    """Conjunctions filed under one access, by entry number: the keys of those the
    access decides alone, and the pending checks of the others. Each dict exists only
    while it has members."""

    __slots__ = ("direct", "pending")

    def __init__(self) -> None:
        self.direct: dict[int, Hashable] | None = None
        self.pending: dict[int, Pending] | None = None

    def put(self, entry: int, item: Hashable | Pending, direct: bool) -> None:
        if direct:
            if self.direct is None:
                self.direct = {}
            self.direct[entry] = item
        else:
            if self.pending is None:
                self.pending = {}
            self.pending[entry] = item  # type: ignore[assignment]  # not direct: a Pending, by the callers

    def drop(self, entry: int) -> bool:
        """Forget ``entry``; whether the bucket is now empty."""
        if self.direct is not None and entry in self.direct:
            del self.direct[entry]
            if not self.direct:
                self.direct = None
        if self.pending is not None and entry in self.pending:
            del self.pending[entry]
            if not self.pending:
                self.pending = None
        return self.direct is None and self.pending is None


#: Nested dicts whose depth is the length of the paths filed in them.
Nested = dict[Any, Any]


class Leaf(Protocol):
    def drop(self, entry: int) -> bool:
        """Forget ``entry``; whether the leaf is now empty."""
        ...


LeafT = TypeVar("LeafT", bound=Leaf)


def leaf(root: Nested, path: tuple[Hashable, ...], make: Callable[[], LeafT]) -> LeafT:
    """The leaf at ``path`` (attribute, value[, attribute, value]) of nested dicts,
    made when missing."""
    node = root
    for step in path[:-1]:
        # Not setdefault(step, {}): that makes (and drops) a dict at every step.
        inner = node.get(step)
        if inner is None:
            inner = node[step] = {}
        node = inner
    found: LeafT | None = node.get(path[-1])
    if found is None:
        found = node[path[-1]] = make()
    return found


def drop_from_leaf(root: Nested, path: tuple[Hashable, ...], entry: int) -> None:
    """Drop ``entry`` from the leaf at ``path``, pruning what is left empty."""
    if len(path) == 2:  # (attribute, value): the commonest, unrolled
        by_value = root[path[0]]
        if by_value[path[1]].drop(entry):
            del by_value[path[1]]
            if not by_value:
                del root[path[0]]
        return
    if len(path) == 4:  # a pair's (attribute, value, attribute, value), unrolled too
        first, key, second, other = path
        by_key = root[first]
        by_second = by_key[key]
        by_other = by_second[second]
        if by_other[other].drop(entry):
            del by_other[other]
            if not by_other:
                del by_second[second]
                if not by_second:
                    del by_key[key]
                    if not by_key:
                        del root[first]
        return
    nodes = [root]
    for step in path[:-1]:
        nodes.append(nodes[-1][step])
    if not nodes[-1][path[-1]].drop(entry):
        return
    del nodes[-1][path[-1]]
    for node, step in zip(reversed(nodes[:-1]), reversed(path[:-1]), strict=True):
        if node[step]:  # a dict with other entries
            break
        del node[step]


_MISSING = object()


def paired_leaves(pairs: Nested, keyed: Mapping[str, Hashable]) -> Iterator[Any]:
    """The leaves of ``pairs`` (attribute, value, later attribute, value) whose two
    values the event has (``keyed``: its value keys); an event whose value of the first
    attribute no pair names costs two lookups."""
    for first, key in keyed.items():
        by_value = pairs.get(first)
        if by_value is None or (by_second := by_value.get(key)) is None:
            continue
        for second, table in by_second.items():
            other = keyed.get(second, _MISSING)
            if other is not _MISSING and (found := table.get(other)) is not None:
                yield found
