"""An index over many filters: which of them match an event, without evaluating each.

Each filter is split into conjunctions (disjunctive normal form, when that stays
small). From each conjunction one *access predicate* is chosen and indexed:

- ``attr = literal`` (and ``IN``): a hash table per attribute, value -> entries;
- ``attr > / >= / < / <= number`` and ``BETWEEN``: per attribute, lower bounds and upper
  bounds kept sorted (bisect), so an event value finds its candidates by two searches;
- anything else (``LIKE``, ``IS NULL``, ``<>``, ``NOT``, no usable predicate, a DNF that
  would blow up): the filter goes to a residual list evaluated on every event.

Candidates found through an access predicate are confirmed by evaluating the whole
filter, so the answer is always exactly the set of filters whose value is TRUE: the
index only decides which filters need a look. Adding and removing are O(log n) per
conjunction, never a rebuild.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from matching.ast import And, Attr, Between, Compare, Expr, In, Lit, Or, Value, kind_of
from matching.parser import Filter

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


def _equalities(conjunction: list[Expr]) -> list[tuple[str, tuple[Value, ...]]] | None:
    """The conjunction as (attr, accepted values) pairs, if it is only equalities."""
    out = []
    for pred in conjunction:
        access = _access_of(pred)
        if access is None or not access.equals:
            return None
        out.append((access.attr, access.equals))
    return out


def _value_key(value: Value) -> tuple[str, Value]:
    # Keep 1, 1.0 and TRUE apart the way the filter language does: by kind.
    kind = kind_of(value)
    return (kind or "", float(value) if kind == "num" else value)  # type: ignore[arg-type]


class Index:
    def __init__(self) -> None:
        self._filters: dict[Hashable, Filter] = {}
        self._placed: dict[Hashable, list[tuple]] = {}
        self._equal: dict[str, dict[tuple[str, Value], set[Hashable]]] = defaultdict(
            lambda: defaultdict(set))
        # Per attribute, three sorted lists of (bound..., seq, key). Lower-bound-only
        # entries match a prefix, upper-bound-only a suffix; bounded intervals are sorted
        # by their low end and scanned back no further than the widest one reaches.
        self._above: dict[str, list[tuple]] = defaultdict(list)
        self._below: dict[str, list[tuple]] = defaultdict(list)
        self._between: dict[str, list[tuple]] = defaultdict(list)
        self._widest: dict[str, float] = defaultdict(float)
        # Counting for conjunctions made only of equalities: every predicate is indexed,
        # and a conjunction matches when all of its predicates were hit. No evaluation.
        self._counted: dict[str, dict[tuple[str, Value], list[int]]] = defaultdict(
            lambda: defaultdict(list))
        self._need: dict[int, int] = {}
        self._owner: dict[int, Hashable] = {}
        self._residual: set[Hashable] = set()
        self._everything: set[Hashable] = set()
        self._seq = 0

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
        if conjunctions is not None and all(_equalities(c) is not None for c in conjunctions):
            for conjunction in conjunctions:
                self._add_counted(key, _equalities(conjunction), placed)  # type: ignore[arg-type]
            return
        accesses = None if conjunctions is None else [_best_access(c) for c in conjunctions]
        if accesses is None or any(a is None for a in accesses):
            self._residual.add(key)
            placed.append(("residual",))
            return
        for access in accesses:
            assert access is not None
            if access.equals:
                for value in access.equals:
                    vkey = _value_key(value)
                    self._equal[access.attr][vkey].add(key)
                    placed.append(("eq", access.attr, vkey))
            else:
                self._seq += 1
                table, entry = self._range_entry(access, key)
                bisect.insort(table[access.attr], entry)
                placed.append(("range", table, access.attr, entry))

    def _add_counted(self, key: Hashable, preds: list[tuple[str, tuple[Value, ...]]],
                     placed: list[tuple]) -> None:
        self._seq += 1
        conj = self._seq
        self._need[conj] = len(preds)
        self._owner[conj] = key
        placed.append(("conj", conj))
        for attr, values in preds:
            # IN values are distinct kinds/values: an event value hits at most one of them.
            for vkey in {_value_key(v) for v in values}:
                self._counted[attr][vkey].append(conj)
                placed.append(("count", attr, vkey, conj))

    def _range_entry(self, access: _Access, key: Hashable) -> tuple[dict[str, list[tuple]],
                                                                     tuple]:
        if access.high is None:
            assert access.low is not None
            return self._above, (access.low, not access.low_inclusive, self._seq, key)
        if access.low is None:
            # Sorted by negated bound so that matching entries are again a prefix.
            return self._below, (-access.high, not access.high_inclusive, self._seq, key)
        self._widest[access.attr] = max(self._widest[access.attr], access.high - access.low)
        return self._between, (access.low, access.high, self._seq, key)

    def remove(self, key: Hashable) -> None:
        if key not in self._filters:
            raise KeyError(key)
        del self._filters[key]
        for place in self._placed.pop(key):
            if place[0] == "all":
                self._everything.discard(key)
            elif place[0] == "conj":
                del self._need[place[1]], self._owner[place[1]]
            elif place[0] == "count":
                bucket = self._counted[place[1]]
                bucket[place[2]].remove(place[3])
                if not bucket[place[2]]:
                    del bucket[place[2]]
            elif place[0] == "residual":
                self._residual.discard(key)
            elif place[0] == "eq":
                bucket = self._equal[place[1]]
                bucket[place[2]].discard(key)
                if not bucket[place[2]]:
                    del bucket[place[2]]
            else:
                entries = place[1][place[2]]
                i = bisect.bisect_left(entries, place[3])
                if i < len(entries) and entries[i] == place[3]:
                    del entries[i]

    def match(self, attrs: Mapping[str, Value]) -> set[Hashable]:
        candidates: set[Hashable] = set(self._residual)
        hits: Counter[int] = Counter()
        counted = self._counted
        for name, value in attrs.items():
            by_value_counted = counted.get(name)
            if by_value_counted:
                conj_ids = by_value_counted.get(_value_key(value))
                if conj_ids:
                    hits.update(conj_ids)
            by_value = self._equal.get(name)
            if by_value:
                hit = by_value.get(_value_key(value))
                if hit:
                    candidates |= hit
            if kind_of(value) == "num":
                self._range_candidates(name, float(value), candidates)
        filters = self._filters
        result = {key for key in candidates if filters[key].matches(attrs)}
        need, owner = self._need, self._owner
        result.update(owner[c] for c, n in hits.items() if n == need[c])
        return result | self._everything

    def _range_candidates(self, name: str, v: float, out: set[Hashable]) -> None:
        above = self._above.get(name)
        if above:  # low < v, or low == v when inclusive (flag False sorts first)
            end = bisect.bisect_left(above, (v, True))
            out.update(entry[3] for entry in above[:end])
        below = self._below.get(name)
        if below:  # high > v, or high == v when inclusive
            end = bisect.bisect_left(below, (-v, True))
            out.update(entry[3] for entry in below[:end])
        between = self._between.get(name)
        if between:
            start = bisect.bisect_left(between, (v - self._widest[name],))
            end = bisect.bisect_right(between, (v, float("inf")))
            out.update(e[3] for e in between[start:end] if e[0] <= v <= e[1])
