"""An index over many filters: which of them are TRUE for an event, without evaluating
each one.

Every filter sits in a :class:`~matching.clustered.ClusterIndex`, which finds candidates
through hash and interval clusters and checks each one in Python: the cheapest way for
one event that matches few filters (the commonest case), at a cost that grows with the
filters the event meets.

An index with many filters (:data:`ARRAYS_FROM`) keeps them a second way too, in bulk
(:class:`_Bulk`), from its first batch on (an index only ever asked one event at a
time never pays for it). The filters of equalities
and numeric intervals (*array-shaped*, :mod:`matching.atoms`: the bulk of real
subscriptions) go to an :class:`~matching.arrays.ArrayIndex`, which finds and checks
candidates with numpy (a fixed cost of some tens of microseconds per call, then a small
cost per candidate), the others to a second cluster index of their own.
:meth:`Index.match_many` matches a batch of events that way, paying numpy's per-call
costs once for all of them, unless recent events matched few filters
(:data:`BATCH_MATCHES` on average: the clusters then cost less); :meth:`Index.match`
goes that way too while recent events matched many filters (:data:`BULK_MATCHES`),
where the clusters would pay a Python check per candidate. Every structure is exact,
so the way taken changes only the cost.

A batch's answers are :class:`Matches`: an array of slots and the table that names
their keys, so a caller that only counts, or only asks whether any filter matched,
builds no Python object per match.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Generic

import numpy as np
import numpy.typing as npt

from matching.access import AccessOf, remembered_access
from matching.arrays import ArrayIndex, array_layouts
from matching.ast import Value
from matching.clustered import ClusterIndex, Key
from matching.normal import Conjunction, conjunctions_of
from matching.parser import Filter

#: Filters from which an index keeps them in bulk too (and drops that below half).
#: With fewer, batches gain little (at 10,000 skewed filters, bench/matching.py: 15% at
#: 0.6% matched, none at 0.1%), while adding costs twice as much.
ARRAYS_FROM = 16_384
#: Matches per event (a running mean) from which one event goes the bulk way: at
#: 100,000 subscriptions the two ways cost the same at about 150-200 matches
#: (bench/matching.py).
BULK_MATCHES = 200.0
#: Matches per event (the same mean) from which a batch goes the bulk way: at 100,000
#: skewed subscriptions, an event costs the clusters about 25 us at 12 matches and 60
#: at 121, a batch of 64 about 29 and 37 (bench/matching.py --skewed): the same at
#: about 30 matches, between the two.
BATCH_MATCHES = 30.0
#: Weight of the last event in that running mean.
_RECENT_WEIGHT = 1 / 16

_NO_SLOTS: npt.NDArray[np.int64] = np.empty(0, np.int64)
_NO_KEYS: npt.NDArray[np.object_] = np.empty(0, object)


class Matches(Generic[Key]):
    """The filters an event matched: ``slots`` (distinct) in the bulk index's table of
    keys, and ``extra``, the keys matched elsewhere (distinct from those). Read it
    before the index changes: a slot freed by ``remove`` is reused."""

    __slots__ = ("_table", "extra", "slots")

    def __init__(self, slots: npt.NDArray[np.int64], table: npt.NDArray[np.object_],
                 extra: Collection[Key] = ()) -> None:
        self.slots = slots
        self._table = table
        self.extra = extra

    def __len__(self) -> int:
        return len(self.slots) + len(self.extra)

    def __bool__(self) -> bool:
        return len(self.slots) > 0 or len(self.extra) > 0

    def keys(self) -> list[Key]:
        """The keys of the filters matched (in no particular order)."""
        # The table holds the keys given to ``add``: Key, by its signature.
        found: list[Key] = self._table[self.slots].tolist() if len(self.slots) else []
        found.extend(self.extra)
        return found

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys())

    def __repr__(self) -> str:
        return f"Matches({self.keys()!r})"


class _Bulk(Generic[Key]):
    """The filters again, for matching in bulk: array-shaped ones in an
    :class:`ArrayIndex` under dense slot numbers, the others in clusters of their own."""

    def __init__(self) -> None:
        self.arrays = ArrayIndex()
        self.rest: ClusterIndex[Key] = ClusterIndex()
        self.slots: dict[Key, int] = {}
        #: slot -> key (an object array: indexing it with slots runs in C)
        self.table: npt.NDArray[np.object_] = np.empty(1024, object)
        self.free: list[int] = []

    def add(self, key: Key, filter: Filter, conjunctions: Sequence[Conjunction] | None,
            analysis: AccessOf) -> None:
        layouts = array_layouts(conjunctions, analysis)
        if layouts is None:
            self.rest.add(key, filter, conjunctions, analysis)
            return
        if self.free:
            slot = self.free.pop()
        else:
            slot = len(self.slots)
            if slot == len(self.table):
                self.table = np.concatenate([self.table, np.empty(slot, object)])
        self.slots[key] = slot
        self.table[slot] = key
        self.arrays.add(slot, filter, layouts)

    def remove(self, key: Key) -> None:
        slot = self.slots.pop(key, None)
        if slot is None:
            self.rest.remove(key)
            return
        self.arrays.remove(slot)
        self.table[slot] = None
        self.free.append(slot)

    def match_many(self, events: Sequence[Mapping[str, Value]]) -> list[Matches[Key]]:
        table, rest = self.table, self.rest if len(self.rest) else None
        return [Matches(slots, table, () if rest is None else rest.match(attrs))
                for attrs, slots in zip(events, self.arrays.match_many(events), strict=True)]


class Index(Generic[Key]):
    def __init__(self, arrays_from: int = ARRAYS_FROM, bulk_matches: float = BULK_MATCHES,
                 batch_matches: float = BATCH_MATCHES) -> None:
        self._clusters: ClusterIndex[Key] = ClusterIndex()
        self._bulk: _Bulk[Key] | None = None
        self._arrays_from = arrays_from
        self._bulk_matches = bulk_matches
        self._batch_matches = batch_matches
        #: Running mean of the filters matched per event, while there is a bulk index.
        self._recent = 0.0

    def __len__(self) -> int:
        return len(self._clusters)

    def __contains__(self, key: object) -> bool:
        return key in self._clusters

    def __iter__(self) -> Iterator[Key]:
        return iter(self._clusters)

    def get(self, key: Key) -> Filter | None:
        return self._clusters.get(key)

    @property
    def matches_everything(self) -> bool:
        """Every filter held is TRUE for every event (``match`` answers all keys)."""
        return self._clusters.matches_everything

    def add(self, key: Key, filter: Filter) -> None:
        """File ``filter`` under ``key`` (any hashable), replacing what ``key`` had."""
        if key in self._clusters:
            self.remove(key)
        if self._bulk is None:
            self._clusters.add(key, filter)
            return
        conjunctions = conjunctions_of(filter.expr)
        analysis = remembered_access()  # both ask the same of each predicate
        self._clusters.add(key, filter, conjunctions, analysis)
        self._bulk.add(key, filter, conjunctions, analysis)

    def _bulk_index(self) -> _Bulk[Key] | None:
        """The bulk index, made now if there are enough filters for one."""
        if self._bulk is None and len(self._clusters) >= self._arrays_from:
            bulk = self._bulk = _Bulk()
            for key, filter in self._clusters.items():
                bulk.add(key, filter, conjunctions_of(filter.expr), remembered_access())
        return self._bulk

    def remove(self, key: Key) -> None:
        """Forget the filter of ``key``; KeyError when there is none."""
        self._clusters.remove(key)
        if self._bulk is not None:
            if len(self._clusters) < self._arrays_from // 2:
                self._bulk = None
            else:
                self._bulk.remove(key)

    def match(self, attrs: Mapping[str, Value]) -> set[Key]:
        """The keys of the filters that are TRUE for ``attrs``."""
        bulk = self._bulk
        if bulk is None:
            return self._clusters.match(attrs)
        if self._recent < self._bulk_matches:
            found = self._clusters.match(attrs)
            self._recent += (len(found) - self._recent) * _RECENT_WEIGHT
            return found
        return set(self._in_bulk(bulk, [attrs])[0].keys())

    def match_many(self, events: Sequence[Mapping[str, Value]]) -> list[Matches[Key]]:
        """The filters that are TRUE for each event: with many filters, one pass over
        them for all the events, so numpy's per-call costs are paid once."""
        bulk = self._bulk_index()
        if bulk is not None and self._recent >= self._batch_matches:
            return self._in_bulk(bulk, events)
        found = [Matches(_NO_SLOTS, _NO_KEYS, self._clusters.match(attrs))
                 for attrs in events]
        if bulk is not None:
            self._note(found)
        return found

    def _in_bulk(self, bulk: _Bulk[Key], events: Sequence[Mapping[str, Value]]
                 ) -> list[Matches[Key]]:
        found = bulk.match_many(events)
        self._note(found)
        return found

    def _note(self, found: list[Matches[Key]]) -> None:
        """Count a batch's matches into the running mean."""
        if found:
            mean = sum(map(len, found)) / len(found)
            self._recent += (mean - self._recent) * _RECENT_WEIGHT

