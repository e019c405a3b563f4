"""Access predicates: simple conditions that a conjunction implies, which an index can
look up (an equality in a hash table, a range in a sorted list, the presence of an
attribute) and a summary can keep in a coarse form.

A conjunction's *plan* picks its most selective access and the predicates that remain
to be checked once the access holds; the access is exact for the predicates it
replaces, so the conjunction is TRUE exactly when the access holds and the rest are
TRUE.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from matching.ast import (
    MIRRORED,
    And,
    Attr,
    Between,
    Compare,
    Const,
    Expr,
    In,
    IsNull,
    Like,
    Lit,
    Or,
    Value,
    kind_of,
)
from matching.evaluate import like_parts

#: Tags booleans in hash keys: Python has True == 1, the filter language does not.
BOOL_TAG = "\x00bool"
ValueKey = str | int | float | tuple[str, bool]


def value_key(value: Value) -> ValueKey:
    """The hash key of a value: equal for values the language calls equal (1 and 1.0)."""
    return (BOOL_TAG, value) if isinstance(value, bool) else value


# Accesses and plans are named tuples, not frozen dataclasses: every filter added makes
# a few of each, and a frozen dataclass sets each field through object.__setattr__
# (timeit: a Range 2.8x as costly to make, an Equals about the same). None of them is
# compared with a plain tuple.


class Equals(NamedTuple):
    """The attribute equals one of ``keys`` (value keys)."""

    attr: str
    keys: frozenset[ValueKey]


class Range(NamedTuple):
    """The attribute is a value of ``kind`` ("num" or "str") within the bounds (None is
    unbounded)."""

    attr: str
    kind: str
    low: Value | None = None
    low_inclusive: bool = True
    high: Value | None = None
    high_inclusive: bool = True

    def is_empty(self) -> bool:
        if self.low is None or self.high is None:
            return False
        return self.low > self.high or (  # type: ignore[operator]  # a Range's bounds are of its one kind
            self.low == self.high and not (self.low_inclusive and self.high_inclusive))

    def intersect(self, other: Range) -> Range:
        low, low_inclusive = self.low, self.low_inclusive
        if other.low is not None and (low is None or other.low > low or (  # type: ignore[operator]  # a Range's bounds are of its one kind
                other.low == low and not other.low_inclusive)):
            low, low_inclusive = other.low, other.low_inclusive
        high, high_inclusive = self.high, self.high_inclusive
        if other.high is not None and (high is None or other.high < high or (  # type: ignore[operator]  # a Range's bounds are of its one kind
                other.high == high and not other.high_inclusive)):
            high, high_inclusive = other.high, other.high_inclusive
        return Range(self.attr, self.kind, low, low_inclusive, high, high_inclusive)


class Present(NamedTuple):
    """The attribute is present with a non-null value."""

    attr: str


Access = Equals | Range | Present

_RANGE_OPERATORS = ("<", "<=", ">", ">=")


def _compare_access(expr: Compare) -> tuple[Access, bool] | None:
    left, op, right = expr.left, expr.op, expr.right
    if isinstance(left, Lit) and isinstance(right, Attr):
        left, right, op = right, left, MIRRORED[op]
    if not isinstance(left, Attr):
        return None
    if not isinstance(right, Lit):
        return Present(left.name), False
    value, kind = right.value, kind_of(right.value)
    if op == "=":
        return Equals(left.name, frozenset([value_key(value)])), True
    if kind == "bool" and op in ("<>", "!="):  # b <> TRUE is b = FALSE
        return Equals(left.name, frozenset([value_key(not value)])), True
    if kind in ("num", "str") and op in _RANGE_OPERATORS:
        if op in (">", ">="):
            return Range(left.name, kind, low=value, low_inclusive=op == ">="), True
        return Range(left.name, kind, high=value, high_inclusive=op == "<="), True
    return Present(left.name), False


def access_of(pred: Expr) -> tuple[Access, bool] | None:
    """What a negation-normal predicate implies, and whether exactly (the access holds
    only when the predicate is TRUE); None when it implies nothing (``IS NULL``)."""
    if isinstance(pred, Compare):
        return _compare_access(pred)
    if isinstance(pred, In) and not pred.negated:
        return Equals(pred.attr.name, frozenset(value_key(v.value) for v in pred.values)), True
    if isinstance(pred, Between) and not pred.negated:
        return Range(pred.attr.name, "num", pred.low.value, True, pred.high.value, True), True
    if isinstance(pred, Like) and not pred.negated:
        parts = like_parts(pred.pattern, pred.escape)
        if len(parts) == 1 and parts[0]:  # no wildcard: an equality
            return Equals(pred.attr.name, frozenset([parts[0]])), True
    if isinstance(pred, IsNull):
        return (Present(pred.attr.name), True) if pred.negated else None
    if isinstance(pred, (Between, In, Like)):  # a tuple: ``|`` makes a union per call
        return Present(pred.attr.name), False
    return None


#: What tells a predicate's access: :func:`access_of` itself, or a :func:`remembered_access`.
AccessOf = Callable[[Expr], tuple[Access, bool] | None]


def remembered_access() -> AccessOf:
    """:func:`access_of`, worked out once per predicate for every step of one ``add``
    that asks (the plan, its pair and pending check, the bulk index's atoms): each asks
    of the same predicates, at about 1 us a time. A closure, not an object with
    ``__call__``: CPython calls those through a slow path, several times per add."""
    #: id(pred) -> (pred, its access): the predicate is kept, so its id stays its own.
    known: dict[int, tuple[Expr, tuple[Access, bool] | None]] = {}

    def remembered(pred: Expr) -> tuple[Access, bool] | None:
        found = known.get(id(pred))
        if found is None:
            found = known[id(pred)] = (pred, access_of(pred))
        return found[1]
    return remembered




class Plan(NamedTuple):
    """How to find a conjunction: ``access`` (None: nothing to look up, check it on
    every event), then ``rest`` must all be TRUE. ``never``: it can never be TRUE."""

    access: Access | None
    rest: tuple[Expr, ...]
    never: bool = False


def plan(conjunction: Sequence[Expr], access_of: AccessOf = access_of) -> Plan:
    """The most selective access of a conjunction of negation-normal predicates:
    an equality (fewest values), else a numeric interval (bounds on one attribute
    merged), else a string range, else presence."""
    # One pass over the predicates (run for every conjunction an index files).
    found: list[tuple[Expr, Access, bool]] = []
    fewest: tuple[Expr, Equals] | None = None
    for pred in conjunction:
        known = access_of(pred)
        if known is None:
            continue
        access, exact = known
        if exact and isinstance(access, Equals) and (
                fewest is None or len(access.keys) < len(fewest[1].keys)):
            fewest = (pred, access)  # the first of the fewest values
        found.append((pred, access, exact))
    if fewest is not None:
        chosen = fewest[0]
        return Plan(fewest[1], tuple([p for p in conjunction if p is not chosen]))
    numeric: dict[str, tuple[Range, list[Expr]]] = {}
    string_range: tuple[Expr, Access] | None = None
    present: tuple[Expr, Access, bool] | None = None
    for pred, access, exact in found:
        if isinstance(access, Range) and access.kind == "num":
            merged = numeric.get(access.attr)
            numeric[access.attr] = (access, [pred]) if merged is None else \
                (merged[0].intersect(access), [*merged[1], pred])
        elif isinstance(access, Range):
            string_range = string_range or (pred, access)
        elif present is None or (exact and not present[2]):
            present = (pred, access, exact)
    if numeric:
        # A bounded interval is the most selective; then any one-sided one.
        interval, covered = min(numeric.values(),
                                key=lambda rp: (rp[0].low is None or rp[0].high is None))
        if interval.is_empty():
            return Plan(None, (), never=True)
        return Plan(interval, tuple(p for p in conjunction if p not in covered))
    if string_range is not None:
        pred, access = string_range
        return Plan(access, tuple(p for p in conjunction if p is not pred))
    if present is not None:
        pred, access, exact = present
        return Plan(access, tuple(p for p in conjunction if not (exact and p is pred)))
    return Plan(None, tuple(conjunction))


def _weakness(accesses: list[Access]) -> tuple[int, int]:
    rank = max((0 if isinstance(a, Equals) else 1 if isinstance(a, Range) else 2
                for a in accesses), default=0)
    return rank, len(accesses)


def necessary_accesses(expr: Expr) -> list[Access] | None:
    """Accesses one of which holds whenever the negation-normal ``expr`` is TRUE, for
    filters too large to split into conjunctions; None when there are none."""
    if isinstance(expr, Or):
        out: list[Access] = []
        for operand in expr.operands:
            part = necessary_accesses(operand)
            if part is None:
                return None
            out += part
        return out
    if isinstance(expr, And):
        options = [p for p in map(necessary_accesses, expr.operands) if p is not None]
        return min(options, key=_weakness) if options else None
    if isinstance(expr, Const):
        return None if expr.value else []  # FALSE is never TRUE: it needs nothing
    found = access_of(expr)
    return None if found is None else [found[0]]
