"""The general index over many filters: which of them are TRUE for an event, without
evaluating each one, at a cost per event that grows with the filters it meets.
:class:`matching.index.Index` keeps every filter here, and matches one event at a time
here while events match few filters; it works on any filter.

Every filter is split into conjunctions (:mod:`matching.normal`; NOT pushed down to the
predicates first). Each conjunction is clustered under an access predicate
(:func:`matching.access.plan`, then :mod:`matching.clusters`), as in Fabret et al.
2001 ("Filtering algorithms and implementation for very fast publish/subscribe"):

- equalities (``a = v``, ``a IN (...)``, ``b <> TRUE``, ``s LIKE 'abc'``) on two
  attributes: a hash table per pair of attribute names, keyed by the pair of values
  (multi-attribute hashing); an event looks up each pair of its attributes that some
  cluster names, so a conjunction of two equalities costs nothing until both hold;
- an equality on one attribute: a hash table per attribute, keyed by value;
- a range (``<``, ``>=``, ``BETWEEN``, bounds on one attribute merged into an interval):
  :class:`~matching.ranges.RangeTable` s per kind (numbers, strings);
- the presence of an attribute (``NOT IN``, ``LIKE '%x'``, ``<>``, ``IS NOT NULL``...):
  a cluster per attribute;
- nothing to look up (``IS NULL``, comparisons between two attributes): a residual
  cluster checked on every event.

A conjunction whose access is all there is to it (``sym = 'A' AND px = 3``) matches on
lookup: its key joins the result at C speed with the rest of its cluster's. Of the
others, those left with one numeric interval (``sym = 'A' AND px > 3``) are checked
inline from plain data, the rest by a compiled check, run only on the events that reach
them. A filter whose DNF would be too large is filed whole under a set of accesses one
of which it implies, with its own test as the check. So ``match`` answers exactly the
set of filters whose value is TRUE, and adding or removing a filter costs a hash update
or a bisection per conjunction, never a rebuild.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, ItemsView, Iterator, Mapping, Sequence
from typing import Any, Generic, Literal, TypeVar

from matching.access import (
    BOOL_TAG,
    Access,
    AccessOf,
    Equals,
    Present,
    Range,
    necessary_accesses,
    plan,
    remembered_access,
)
from matching.ast import Value, kind_of
from matching.clusters import (
    Bucket,
    Nested,
    Pair,
    Pending,
    drop_from_leaf,
    leaf,
    pair_plan,
    paired_leaves,
    pending_item,
)
from matching.normal import Conjunction, conjunctions_of, negation_normal_form
from matching.parser import Filter
from matching.ranges import Handle, RangeTable

#: (attribute, value key[, attribute, value key]): where a bucket sits in nested dicts
_Path = tuple[Hashable, ...]
# Where an entry was filed, to undo it.
_Place = (tuple[Literal["always"]] | tuple[Literal["residual"]]
          | tuple[Literal["eq"], list[_Path]] | tuple[Literal["pair"], list[_Path]]
          | tuple[Literal["range"], RangeTable, Handle, str] | tuple[Literal["present"], str])
#: What the caller files filters under (subscription ids, child names, ...).
Key = TypeVar("Key", bound=Hashable)


def _put(root: Nested, paths: list[_Path], entry: int, item: Hashable | Pending,
         direct: bool) -> None:
    """File under each path of nested dicts (attribute, value[, attribute, value])."""
    for path in paths:
        leaf(root, path, Bucket).put(entry, item, direct)


def _drop(root: Nested, paths: list[_Path], entry: int) -> None:
    """Undo :func:`_put`, pruning what is left empty."""
    for path in paths:
        drop_from_leaf(root, path, entry)


class ClusterIndex(Generic[Key]):
    def __init__(self) -> None:
        self._filters: dict[Key, Filter] = {}
        self._places: dict[Key, list[tuple[int, _Place]]] = {}
        #: attr -> value key -> bucket
        self._equal: dict[str, dict[Hashable, Bucket]] = {}
        #: attr -> value key -> later attr -> value key -> bucket: an event whose value
        #: of the first attribute no pair names is done after two lookups
        self._pairs: dict[str, dict[Hashable, dict[str, dict[Hashable, Bucket]]]] = {}
        #: kind -> table; items as in a Bucket
        self._ranges = {"num": RangeTable(), "str": RangeTable()}
        #: attribute -> how many range entries it has (of any kind)
        self._ranged: dict[str, int] = {}
        self._present: dict[str, Bucket] = {}
        self._residual = Bucket()
        self._always = Bucket()
        self._entries = 0
        #: Entries filed anywhere but as always TRUE: with none, ``match`` is the keys
        #: filed as always TRUE, with no lookup (the empty filter is the commonest).
        self._selective = 0
        #: Filters not TRUE for every event (some entry not always TRUE, or no entry:
        #: a filter that is never TRUE).
        self._not_everywhere = 0

    def __len__(self) -> int:
        return len(self._filters)

    def __contains__(self, key: object) -> bool:
        return key in self._filters

    def __iter__(self) -> Iterator[Key]:
        return iter(self._filters)

    def get(self, key: Key) -> Filter | None:
        return self._filters.get(key)

    def items(self) -> ItemsView[Key, Filter]:
        return self._filters.items()

    @property
    def matches_everything(self) -> bool:
        """Every filter held is TRUE for every event (``match`` answers all keys)."""
        return not self._not_everywhere

    def add(self, key: Key, filter: Filter,
            conjunctions: Sequence[Conjunction] | Literal[False] | None = False,
            analysis: AccessOf | None = None) -> None:
        """File ``filter`` under ``key`` (any hashable), replacing what ``key`` had;
        ``conjunctions`` are its :func:`~matching.normal.conjunctions_of`, when the caller
        has them (False: worked out here); ``analysis``: its predicates' accesses, when the
        caller shares them with another index (None: worked out here)."""
        if key in self._filters:
            self.remove(key)
        self._filters[key] = filter
        places: list[tuple[int, _Place]] = []
        self._places[key] = places
        if conjunctions is False:
            conjunctions = conjunctions_of(filter.expr)
        self._file_all(key, filter, conjunctions, places,
                       remembered_access() if analysis is None else analysis)
        if not _everywhere(places):
            self._not_everywhere += 1

    def _file_all(self, key: Key, filter: Filter, conjunctions: Sequence[Conjunction] | None,
                  places: list[tuple[int, _Place]], access: AccessOf) -> None:
        """File each conjunction of ``filter`` (none when it is never TRUE) at ``places``."""
        if filter.expr is None:
            places.append(self._file(key, None, key))
            return
        if conjunctions is None:
            normal = negation_normal_form(filter.expr)
            accesses = necessary_accesses(normal)
            whole = (None, -math.inf, True, math.inf, True, key, filter.matches)
            for necessary in [None] if accesses is None else accesses:
                places.append(self._file(key, necessary, whole))
            return
        for conjunction in conjunctions:
            how = plan(conjunction, access)
            if how.never:
                continue
            found: Access | Pair | None = how.access
            rest = how.rest
            if isinstance(found, Equals) and (paired := pair_plan(found, rest, access)):
                found, rest = paired
            places.append(self._file(key, found, pending_item(rest, key, access) if rest
                                     else key))

    def _file(self, key: Key, access: Access | Pair | None, item: Hashable | Pending
              ) -> tuple[int, _Place]:
        """File one conjunction: ``item`` is ``key`` when the access decides it alone,
        else its pending check."""
        self._entries += 1
        entry = self._entries
        direct = item is key
        if access is not None or not direct:
            self._selective += 1
        if access is None:
            if direct:
                self._always.put(entry, item, direct)
                return entry, ("always",)
            self._residual.put(entry, item, direct)
            return entry, ("residual",)
        paths: list[_Path]
        if isinstance(access, Pair):
            first, second = access.first, access.second
            paths = [(first.attr, a, second.attr, b) for a in first.keys for b in second.keys]
            _put(self._pairs, paths, entry, item, direct)
            return entry, ("pair", paths)
        if isinstance(access, Equals):
            paths = [(access.attr, value) for value in access.keys]
            _put(self._equal, paths, entry, item, direct)
            return entry, ("eq", paths)
        if isinstance(access, Range):
            table = self._ranges[access.kind]
            self._ranged[access.attr] = self._ranged.get(access.attr, 0) + 1
            return entry, ("range", table, table.add(access, item, not direct), access.attr)
        assert isinstance(access, Present)
        self._present.setdefault(access.attr, Bucket()).put(entry, item, direct)
        return entry, ("present", access.attr)

    def remove(self, key: Key) -> None:
        """Forget the filter of ``key``; KeyError when there is none."""
        del self._filters[key]
        places = self._places.pop(key)
        if not _everywhere(places):
            self._not_everywhere -= 1
        for entry, place in places:
            if place[0] != "always":
                self._selective -= 1
            match place:
                case ("always",):
                    self._always.drop(entry)
                case ("residual",):
                    self._residual.drop(entry)
                case ("eq", paths):
                    _drop(self._equal, paths, entry)
                case ("pair", paths):
                    _drop(self._pairs, paths, entry)
                case ("range", table, handle, attr):
                    table.remove(handle)
                    self._ranged[attr] -= 1
                    if not self._ranged[attr]:
                        del self._ranged[attr]
                case ("present", attr):
                    if self._present[attr].drop(entry):
                        del self._present[attr]

    def match(self, attrs: Mapping[str, Value]) -> set[Key]:
        """The keys of the filters that are TRUE for ``attrs``."""
        if not self._selective:
            always = self._always.direct
            # Buckets hold the keys they were given: Key, by add's signature.
            everyone: set[Any] = set() if always is None else set(always.values())
            return everyone
        hits: list[Hashable] = []
        pending: list[Pending] = []
        _collect(self._always, hits, pending)
        _collect(self._residual, hits, pending)
        equal, present, pairs, ranged = self._equal, self._present, self._pairs, self._ranged
        numbers, strings = self._ranges["num"], self._ranges["str"]
        keyed: dict[str, Hashable] = {}
        #: numbers only (their class is checked where they are filed)
        numeric: dict[str, Any] = {}
        table: RangeTable | None
        lookup: Hashable
        for name, value in attrs.items():
            if value is None:
                continue
            if present and (bucket := present.get(name)) is not None:
                _collect(bucket, hits, pending)
            # kind_of, unrolled for the plain types: this loop runs per event attribute.
            cls = value.__class__
            if cls is str:
                table, lookup = strings, value
            elif cls is float or cls is int:
                if value != value:  # NaN compares with nothing
                    continue
                table, lookup = numbers, value
                numeric[name] = value
            elif cls is bool:
                table, lookup = None, (BOOL_TAG, value)
            else:
                kind = kind_of(value)
                if kind is None:
                    continue
                table = numbers if kind == "num" else strings if kind == "str" else None
                lookup = (BOOL_TAG, value) if kind == "bool" else value
                if kind == "num":
                    numeric[name] = value
            keyed[name] = lookup
            by_value = equal.get(name)
            if by_value is not None:
                bucket = by_value.get(lookup)
                if bucket is not None:
                    if bucket.direct:
                        hits.extend(bucket.direct.values())
                    if bucket.pending:
                        pending.extend(bucket.pending.values())
            if table is not None and name in ranged:
                table.stab(name, value, hits, pending)
        if pairs:
            for bucket in paired_leaves(pairs, keyed):
                _collect(bucket, hits, pending)
        result: set[Any] = set(hits)
        for bounded, low, low_inclusive, high, high_inclusive, key, check in pending:
            if bounded is not None:
                # Never None: attributes with no value are not filed in ``numeric``.
                number = numeric.get(bounded)
                if number is None or not (
                        (low < number or (low_inclusive and number == low))
                        and (number < high or (high_inclusive and number == high))):
                    continue
            if check is None or (key not in result and check(attrs)):
                result.add(key)
        return result


def _everywhere(places: list[tuple[int, _Place]]) -> bool:
    """Whether a filter filed at ``places`` is TRUE for every event."""
    # A loop, not all() of a generator: run at every add and remove, where making and
    # finalizing the generator cost more than the test.
    for _, place in places:
        if place[0] != "always":
            return False
    return bool(places)


def _collect(bucket: Bucket, hits: list[Hashable], pending: list[Pending]) -> None:
    if bucket.direct:
        hits.extend(bucket.direct.values())
    if bucket.pending:
        pending.extend(bucket.pending.values())
