"""An index over many filters: which of them are TRUE for an event, without evaluating
each one.

Every filter is split into conjunctions (:mod:`matching.normal`; NOT pushed down to the
predicates first). Each conjunction is filed under its most selective access predicate
(:func:`matching.access.plan`):

- an equality (``a = v``, ``a IN (...)``, ``b <> TRUE``, ``s LIKE 'abc'``): a hash
  table per attribute, keyed by value;
- a range (``<``, ``>=``, ``BETWEEN``, bounds on one attribute merged into an interval):
  a :class:`~matching.ranges.RangeTable` per kind (numbers, strings);
- the presence of an attribute (``NOT IN``, ``LIKE '%x'``, ``<>``, ``IS NOT NULL``...):
  a list per attribute;
- nothing to look up (``IS NULL``, comparisons between two attributes): a residual list
  checked on every event.

A conjunction whose access is all there is to it (``sym = 'A'``) matches on lookup; the
others carry a compiled check of their remaining predicates, run only on the events
that reach them. A filter whose DNF would be too large is filed whole under a set of
accesses one of which it implies, with its own test as the check. So ``match`` answers
exactly the set of filters whose value is TRUE, and adding or removing a filter costs a
hash update or a bisection per conjunction, never a rebuild.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field

from matching.access import (
    BOOL_TAG,
    Access,
    Equals,
    Present,
    Range,
    necessary_accesses,
    plan,
)
from matching.ast import Value, kind_of
from matching.evaluate import Test, compile_conjunction
from matching.normal import disjunctive_normal_form, negation_normal_form
from matching.parser import Filter
from matching.ranges import Handle, RangeTable


@dataclass
class _Bucket:
    """Conjunctions filed under one access: those it decides alone, and the checked."""

    direct: dict[int, Hashable] = field(default_factory=dict)
    checked: dict[int, tuple[Test, Hashable]] = field(default_factory=dict)

    def put(self, entry: int, key: Hashable, check: Test | None) -> None:
        if check is None:
            self.direct[entry] = key
        else:
            self.checked[entry] = (check, key)

    def drop(self, entry: int) -> bool:
        """Forget ``entry``; whether the bucket is now empty."""
        self.direct.pop(entry, None)
        self.checked.pop(entry, None)
        return not self.direct and not self.checked


# Where an entry was filed, to undo it: ("eq", attr, value key), ("range", kind,
# handle), ("present", attr), ("residual",) or ("always",).
_Place = tuple


class Index:
    def __init__(self) -> None:
        self._filters: dict[Hashable, Filter] = {}
        self._places: dict[Hashable, list[tuple[int, _Place]]] = {}
        self._equal: dict[str, dict[Hashable, _Bucket]] = {}
        self._ranges = {"num": RangeTable(), "str": RangeTable()}
        self._range_entries: dict[int, tuple[Test | None, Hashable]] = {}
        self._present: dict[str, _Bucket] = {}
        self._residual = _Bucket()
        self._always = _Bucket()
        self._entries = 0

    def __len__(self) -> int:
        return len(self._filters)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._filters

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._filters)

    def get(self, key: Hashable) -> Filter | None:
        return self._filters.get(key)

    def add(self, key: Hashable, filter: Filter) -> None:
        """File ``filter`` under ``key`` (any hashable), replacing what ``key`` had."""
        if key in self._filters:
            self.remove(key)
        self._filters[key] = filter
        places: list[tuple[int, _Place]] = []
        self._places[key] = places
        if filter.expr is None:
            places.append(self._file(key, None, None))
            return
        normal = negation_normal_form(filter.expr)
        conjunctions = disjunctive_normal_form(normal)
        if conjunctions is None:
            accesses = necessary_accesses(normal)
            if accesses is None:
                accesses = [None]  # type: ignore[list-item]
            for access in accesses:
                places.append(self._file(key, access, filter.matches))
            return
        for conjunction in conjunctions:
            how = plan(conjunction)
            if not how.never:
                check = compile_conjunction(how.rest) if how.rest else None
                places.append(self._file(key, how.access, check))

    def _file(self, key: Hashable, access: Access | None, check: Test | None
              ) -> tuple[int, _Place]:
        self._entries += 1
        entry = self._entries
        if access is None:
            bucket, place = (self._always, ("always",)) if check is None else (
                self._residual, ("residual",))
            bucket.put(entry, key, check)
            return entry, place
        if isinstance(access, Equals):
            by_value = self._equal.setdefault(access.attr, {})
            for value in access.keys:
                by_value.setdefault(value, _Bucket()).put(entry, key, check)
            return entry, ("eq", access.attr, tuple(access.keys))
        if isinstance(access, Range):
            self._range_entries[entry] = (check, key)
            return entry, ("range", access.kind, self._ranges[access.kind].add(access, entry))
        assert isinstance(access, Present)
        self._present.setdefault(access.attr, _Bucket()).put(entry, key, check)
        return entry, ("present", access.attr)

    def remove(self, key: Hashable) -> None:
        """Forget the filter of ``key``; KeyError when there is none."""
        del self._filters[key]
        for entry, place in self._places.pop(key):
            where = place[0]
            if where == "always":
                self._always.drop(entry)
            elif where == "residual":
                self._residual.drop(entry)
            elif where == "eq":
                by_value = self._equal[place[1]]
                for value in place[2]:
                    if by_value[value].drop(entry):
                        del by_value[value]
                if not by_value:
                    del self._equal[place[1]]
            elif where == "range":
                handle: Handle = place[2]
                self._ranges[place[1]].remove(handle)
                del self._range_entries[entry]
            elif self._present[place[1]].drop(entry):
                del self._present[place[1]]

    def match(self, attrs: Mapping[str, Value]) -> set[Hashable]:
        """The keys of the filters that are TRUE for ``attrs``."""
        result: set[Hashable] = set(self._always.direct.values())
        pending: list[tuple[Test, Hashable]] = list(self._residual.checked.values())
        range_hits: list[Hashable] = []
        equal, present = self._equal, self._present
        numbers, strings = self._ranges["num"], self._ranges["str"]
        for name, value in attrs.items():
            if value is None:
                continue
            bucket = present.get(name)
            if bucket is not None:
                result.update(bucket.direct.values())
                pending.extend(bucket.checked.values())
            # kind_of, unrolled for the plain types: this loop runs per event attribute.
            cls = value.__class__
            if cls is str:
                table, lookup = strings, value
            elif cls is float or cls is int:
                if value != value:  # NaN compares with nothing
                    continue
                table, lookup = numbers, value
            elif cls is bool:
                table, lookup = None, (BOOL_TAG, value)
            else:
                kind = kind_of(value)
                if kind is None:
                    continue
                table = numbers if kind == "num" else strings if kind == "str" else None
                lookup = (BOOL_TAG, value) if kind == "bool" else value
            by_value = equal.get(name)
            if by_value is not None:
                bucket = by_value.get(lookup)
                if bucket is not None:
                    result.update(bucket.direct.values())
                    pending.extend(bucket.checked.values())
            if table is not None:
                table.stab(name, value, range_hits)
        range_entries = self._range_entries
        for entry in range_hits:
            check, key = range_entries[entry]  # type: ignore[index]
            if check is None:
                result.add(key)
            else:
                pending.append((check, key))
        for check, key in pending:
            if key not in result and check(attrs):
                result.add(key)
        return result
