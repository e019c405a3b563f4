"""An index over many filters: which of them match an event, without evaluating each.

Each filter is split into conjunctions (disjunctive normal form, when that stays
small). Predicates that index well are equality (``attr = literal``, ``IN``: a hash
table per attribute) and numeric ranges (``>``, ``>=``, ``<``, ``<=``, ``BETWEEN``: a
:class:`~matching.ranges.RangeTable`). Three ways to place a filter:

- *counting* (every predicate of every conjunction indexes well): each predicate is
  indexed with its conjunction; an event counts the hits per conjunction, and a
  conjunction is TRUE exactly when all of its predicates were hit. No evaluation;
- *access* (every conjunction has at least one such predicate): one predicate per
  conjunction is indexed; its hits are candidates confirmed by evaluating the filter;
- *residual* (``LIKE``, ``IS NULL``, ``<>``, ``NOT``..., or a DNF that would blow up):
  evaluated on every event.

So the answer is always exactly the set of filters whose value is TRUE. Adding and
removing cost a bisection or a hash update per predicate, never a rebuild.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from matching.ast import And, Attr, Between, Compare, Expr, In, Lit, Or, Value, kind_of
from matching.parser import Filter
from matching.ranges import Handle, Interval, RangeTable

MAX_CONJUNCTIONS = 32


def to_dnf(expr: Expr) -> list[list[Expr]] | None:
    """Conjunctions whose OR equals ``expr``; None when it would exceed the bound.

    Only AND/OR are distributed: NOT and predicates stay leaves, so the result is exact.
    """
    if isinstance(expr, Or):
        out: list[list[Expr]] = []
        for operand in expr.operands:
            part = to_dnf(operand)
            if part is None:
                return None
            out += part
            if len(out) > MAX_CONJUNCTIONS:
                return None
        return out
    if isinstance(expr, And):
        acc: list[list[Expr]] = [[]]
        for operand in expr.operands:
            part = to_dnf(operand)
            if part is None or len(acc) * len(part) > MAX_CONJUNCTIONS:
                return None
            acc = [a + b for a in acc for b in part]
        return acc
    return [[expr]]


@dataclass(frozen=True)
class _Access:
    """How a conjunction is reached: equality values, or a numeric interval."""

    attr: str
    equals: tuple[Value, ...] = ()
    low: float | None = None
    low_inclusive: bool = True
    high: float | None = None
    high_inclusive: bool = True


def _access_of(pred: Expr) -> _Access | None:
    if isinstance(pred, In) and not pred.negated:
        return _Access(pred.attr.name, equals=tuple(v.value for v in pred.values))
    if isinstance(pred, Between) and not pred.negated:
        return _Access(pred.attr.name, low=float(pred.low.value), high=float(pred.high.value))
    if isinstance(pred, Compare):
        left, right, op = pred.left, pred.right, pred.op
        if isinstance(left, Lit) and isinstance(right, Attr):
            left, right = right, left
            op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
        if not (isinstance(left, Attr) and isinstance(right, Lit)):
            return None
        value = right.value
        if op == "=":
            return _Access(left.name, equals=(value,))
        if kind_of(value) == "num" and op in ("<", "<=", ">", ">="):
            if op in (">", ">="):
                return _Access(left.name, low=float(value), low_inclusive=op == ">=")
            return _Access(left.name, high=float(value), high_inclusive=op == "<=")
    return None


def _best_access(conjunction: list[Expr]) -> _Access | None:
    accesses = [a for a in map(_access_of, conjunction) if a is not None]
    # Equality is the most selective and the cheapest to probe; then bounded intervals.
    accesses.sort(key=lambda a: (not a.equals, a.low is None or a.high is None))
    return accesses[0] if accesses else None


def _interval(access: _Access) -> Interval:
    return Interval(access.attr, access.low, access.low_inclusive, access.high,
                    access.high_inclusive)


def _countable(conjunction: list[Expr]) -> list[_Access] | None:
    accesses = [_access_of(pred) for pred in conjunction]
    return None if any(a is None for a in accesses) else accesses  # type: ignore[return-value]


def _inside(intervals: list[Interval], attrs: Mapping[str, Value]) -> bool:
    for attr, low, low_inclusive, high, high_inclusive in intervals:
        value = attrs.get(attr)
        if kind_of(value) != "num":
            return False
        v = float(value)  # type: ignore[arg-type]
        if low is not None and not (low < v or (low_inclusive and low == v)):
            return False
        if high is not None and not (v < high or (high_inclusive and v == high)):
            return False
    return True


def _value_key(value: Value) -> tuple[str, Value]:
    # Keep 1, 1.0 and TRUE apart the way the filter language does: by kind.
    kind = kind_of(value)
    return (kind or "", float(value) if kind == "num" else value)  # type: ignore[arg-type]


class Index:
    def __init__(self) -> None:
        self._filters: dict[Hashable, Filter] = {}
        self._placed: dict[Hashable, list[tuple]] = {}
        # counting: (attr, value) -> conjunction ids; ranges -> conjunction ids
        self._count_eq: dict[str, dict[tuple[str, Value], list[int]]] = defaultdict(
            lambda: defaultdict(list))
        self._count_ranges = RangeTable()
        self._need: dict[int, int] = {}
        self._owner: dict[int, Hashable] = {}
        #: Ranges of conjunctions that are counted by their equalities, checked directly
        #: once those all hit (few do): cheaper than stabbing them on every event.
        self._checks: dict[int, list[Interval]] = {}
        #: Conjunctions that are a single equality: (attr, value) -> filter keys.
        self._direct: dict[str, dict[tuple[str, Value], list[Hashable]]] = defaultdict(
            lambda: defaultdict(list))
        # access: (attr, value) -> filter keys; ranges -> filter keys
        self._access_eq: dict[str, dict[tuple[str, Value], set[Hashable]]] = defaultdict(
            lambda: defaultdict(set))
        self._access_ranges = RangeTable()
        self._residual: set[Hashable] = set()
        self._everything: set[Hashable] = set()
        self._conj_ids = 0

    def __len__(self) -> int:
        return len(self._filters)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._filters

    def add(self, key: Hashable, filter: Filter) -> None:
        if key in self._filters:
            self.remove(key)
        self._filters[key] = filter
        placed: list[tuple] = []
        self._placed[key] = placed
        if filter.expr is None:
            self._everything.add(key)
            placed.append(("all",))
            return
        conjunctions = to_dnf(filter.expr)
        if conjunctions is None:
            self._residual.add(key)
            placed.append(("residual",))
            return
        counted = [_countable(c) for c in conjunctions]
        if all(c is not None for c in counted):
            for accesses in counted:
                self._add_counted(key, accesses, placed)  # type: ignore[arg-type]
            return
        best = [_best_access(c) for c in conjunctions]
        if any(a is None for a in best):
            self._residual.add(key)
            placed.append(("residual",))
            return
        for access in best:
            assert access is not None
            if access.equals:
                for value in access.equals:
                    vkey = _value_key(value)
                    self._access_eq[access.attr][vkey].add(key)
                    placed.append(("access_eq", access.attr, vkey))
            else:
                placed.append(("access_range", self._access_ranges.add(_interval(access), key)))

    def _add_counted(self, key: Hashable, accesses: list[_Access], placed: list[tuple]) -> None:
        self._conj_ids += 1
        conj = self._conj_ids
        self._owner[conj] = key
        placed.append(("conj", conj))
        if any(a.equals for a in accesses):
            ranges = [_interval(a) for a in accesses if not a.equals]
            if ranges:
                self._checks[conj] = ranges
            accesses = [a for a in accesses if a.equals]
        self._need[conj] = len(accesses)
        if len(accesses) == 1 and accesses[0].equals and conj not in self._checks:
            # One equality and nothing else: a hit is a match, no counting needed.
            (access,) = accesses
            for vkey in {_value_key(v) for v in access.equals}:
                self._direct[access.attr][vkey].append(key)
                placed.append(("direct", access.attr, vkey, key))
            return
        for access in accesses:
            if access.equals:
                # An event value hits at most one of an IN list's distinct values.
                for vkey in {_value_key(v) for v in access.equals}:
                    self._count_eq[access.attr][vkey].append(conj)
                    placed.append(("count_eq", access.attr, vkey, conj))
            else:
                handle: Handle = self._count_ranges.add(_interval(access), conj)
                placed.append(("count_range", handle))

    def remove(self, key: Hashable) -> None:
        if key not in self._filters:
            raise KeyError(key)
        del self._filters[key]
        for place in self._placed.pop(key):
            kind = place[0]
            if kind == "all":
                self._everything.discard(key)
            elif kind == "residual":
                self._residual.discard(key)
            elif kind == "conj":
                del self._need[place[1]], self._owner[place[1]]
                self._checks.pop(place[1], None)
            elif kind in ("count_eq", "direct"):
                bucket = (self._count_eq if kind == "count_eq" else self._direct)[place[1]]
                bucket[place[2]].remove(place[3])
                if not bucket[place[2]]:
                    del bucket[place[2]]
            elif kind == "access_eq":
                by_value = self._access_eq[place[1]]
                by_value[place[2]].discard(key)
                if not by_value[place[2]]:
                    del by_value[place[2]]
            elif kind == "count_range":
                self._count_ranges.remove(place[1])
            else:
                self._access_ranges.remove(place[1])

    def match(self, attrs: Mapping[str, Value]) -> set[Hashable]:
        hits: list[int] = []
        candidates: list[Hashable] = []
        result: set[Hashable] = set()
        count_eq, access_eq, direct = self._count_eq, self._access_eq, self._direct
        for name, value in attrs.items():
            vkey = _value_key(value)
            direct_by_value = direct.get(name)
            if direct_by_value:
                keys_hit = direct_by_value.get(vkey)
                if keys_hit:
                    result.update(keys_hit)
            by_value = count_eq.get(name)
            if by_value:
                conjs = by_value.get(vkey)
                if conjs:
                    hits.extend(conjs)
            keys_by_value = access_eq.get(name)
            if keys_by_value:
                keys = keys_by_value.get(vkey)
                if keys:
                    candidates.extend(keys)
            if vkey[0] == "num":
                v = float(value)
                self._count_ranges.stab(name, v, hits)  # type: ignore[arg-type]
                self._access_ranges.stab(name, v, candidates)
        need, owner, checks = self._need, self._owner, self._checks
        result.update(owner[c] for c, n in Counter(hits).items()
                      if n == need[c] and (c not in checks or _inside(checks[c], attrs)))
        filters = self._filters
        result.update(k for k in set(candidates) | self._residual
                      if k not in result and filters[k].matches(attrs))
        return result | self._everything
