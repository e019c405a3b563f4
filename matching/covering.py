"""Covering: filter G covers filter F when every event F matches, G matches too.

Decided on the conjunctions of both (after NOT is pushed down): G covers F when each
conjunction of F that can be TRUE has a conjunction of G whose every predicate is
implied by a predicate of F's. A predicate implies another when it is the same, or when
what it says of one attribute is narrower: ``x > 10`` implies ``x > 5`` and
``x IS NOT NULL``, ``x = 7`` implies ``x IN (7, 8)`` and ``x BETWEEN 0 AND 9``. This is
sound and deliberately partial: "no" only means "not shown", which costs a summary some
size, never a match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from matching.access import BOOL_TAG, Equals, Present, Range, ValueKey, access_of, plan
from matching.ast import Expr, kind_of
from matching.normal import Conjunction, conjunctions_of
from matching.parser import Filter


def _within(inner: Range, outer: Range) -> bool:
    if inner.kind != outer.kind:
        return False
    if outer.low is not None:
        if inner.low is None or inner.low < outer.low:  # type: ignore[operator]  # ranges of one kind: numbers or texts, never mixed
            return False
        if inner.low == outer.low and inner.low_inclusive and not outer.low_inclusive:
            return False
    if outer.high is not None:
        if inner.high is None or inner.high > outer.high:  # type: ignore[operator]  # ranges of one kind: numbers or texts, never mixed
            return False
        if inner.high == outer.high and inner.high_inclusive and not outer.high_inclusive:
            return False
    return True


def _key_in_range(key: ValueKey, rng: Range) -> bool:
    if isinstance(key, tuple) and key[0] == BOOL_TAG:
        return False
    return kind_of(key) == rng.kind and _within(
        Range(rng.attr, rng.kind, key, True, key, True), rng)  # type: ignore[arg-type]  # kind_of(key) == rng.kind: not a boolean key


def implies(p: Expr, q: Expr) -> bool:
    """Whether negation-normal predicate ``p`` TRUE makes ``q`` TRUE (sound, partial)."""
    if p == q:
        return True
    found_p, found_q = access_of(p), access_of(q)
    if found_p is None or found_q is None:
        return False
    (a, _), (b, q_exact) = found_p, found_q
    if not q_exact or a.attr != b.attr:
        return False
    if isinstance(b, Present):  # every access says the attribute has a value
        return True
    if isinstance(b, Equals):
        return isinstance(a, Equals) and a.keys <= b.keys
    if isinstance(a, Range):
        return _within(a, b)
    return isinstance(a, Equals) and all(_key_in_range(k, b) for k in a.keys)


def _conjunction_covers(general: Conjunction, specific: Conjunction) -> bool:
    return all(any(implies(p, q) for p in specific) for q in general)


def _attrs(conjunction: Conjunction) -> frozenset[str]:
    names = set()
    for pred in conjunction:
        found = access_of(pred)
        names.add(found[0].attr if found else "")  # "": reads more than one attribute
    return frozenset(names)


@dataclass(frozen=True)
class Shape:
    """A filter's conjunctions, those that can be TRUE, and their attribute sets; None
    conjunctions when the DNF is too large (then only equal texts cover)."""

    filter: Filter
    text: str
    conjunctions: tuple[Conjunction, ...] | None
    attr_sets: tuple[frozenset[str], ...] = ()

    @staticmethod
    def of(f: Filter) -> Shape:
        found = conjunctions_of(f.expr)
        if found is None:
            return Shape(f, str(f), None)
        live = tuple(c for c in found if not plan(c).never)
        return Shape(f, str(f), live, tuple(_attrs(c) for c in live))

    def always(self) -> bool:
        """Whether some conjunction is empty: the filter is TRUE on every event."""
        return self.conjunctions is not None and () in self.conjunctions

    def never(self) -> bool:
        return self.conjunctions == ()

    def covers(self, specific: Shape) -> bool:
        if self.text == specific.text:
            return True
        if self.conjunctions is None or specific.conjunctions is None:
            return False
        return all(
            any(g_attrs <= s_attrs and _conjunction_covers(g, s)
                for g, g_attrs in zip(self.conjunctions, self.attr_sets, strict=True))
            for s, s_attrs in zip(specific.conjunctions, specific.attr_sets, strict=True))


def covers(general: Filter, specific: Filter) -> bool:
    """Whether every event ``specific`` matches is matched by ``general`` (sound, partial)."""
    return Shape.of(general).covers(Shape.of(specific))


def uncovered(shapes: Sequence[Shape]) -> list[Shape]:
    """The filters no other one covers; of equivalent ones, the smallest text stays.
    Quadratic: callers bound the count."""
    return [s for s in shapes
            if not any(g is not s and g.covers(s) and (not s.covers(g) or g.text < s.text)
                       for g in shapes)]
