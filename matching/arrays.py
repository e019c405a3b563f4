"""The bulk part of the index: array-shaped filters (:mod:`matching.atoms`), matched
with work proportional to the candidates, done at C speed in numpy.

Each conjunction gets an integer id. It is filed, as in the general index
(:mod:`matching.clustered`), under its most selective access: the pair of values of two
equalities (:mod:`matching.pairs`), one equality's values, or a numeric interval
(:mod:`matching.segments`). A posting list (an access's conjunctions) is a numpy array
of ids, kept apart for the conjunctions the access decides alone (*direct*: they match
on lookup) and the others.

The others are checked in bulk. Per conjunction, a row of :data:`CHECK_SLOTS` triples
(column, low, high) says which column of the event's row must lie within which closed
bounds. An event becomes a row of doubles: per attribute, its numeric value (NaN when
it is not a number) and the code of its value among those some check names (NaN when
none): an equality check is ``low = high = code``. A candidate passes when all its
triples hold (column 0 is 0.0, for the unused triples). NaN fails every comparison, so a
missing attribute or a value of another kind is never TRUE, as FILTERS.md wants.

Many events are matched in one pass (:meth:`ArrayIndex.match_many`): their rows form a
matrix, the candidates carry their event's number, and each numpy call serves them all.
The batch is read attribute by attribute, not event by event: each lookup (postings,
pair terms, value codes) is one ``map`` over the whole column, numbers go into the
matrix as one array, and the pairs of all events are coded at once
(:meth:`PairTable.collect`), so Python runs per attribute and per candidate found, not
per event value.

An integer event value beyond 2**53 is not a double: the checks and windows then use the
doubles on either side of it (never saying no wrongly), and the filters found are
confirmed one by one with their own test, so the answer stays exact.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from matching.access import AccessOf, ValueKey, access_of
from matching.ast import Value
from matching.atoms import CHECK_SLOTS, Atom, Layout, atoms_of, layout_of
from matching.batches import (
    batch_column,
    bracketing_double,
    owners_of,
    split_by_event,
    unique_matches,
)
from matching.clusters import drop_from_leaf, leaf
from matching.normal import Conjunction
from matching.pairs import PairTable
from matching.parser import Filter
from matching.postings import Codes, Found, Posting
from matching.segments import BELOW, Segment, SegmentKey, segment_key

_R = CHECK_SLOTS
_NO_IDS = np.empty(0, np.int64)


#: A segment's shape (attribute, width class) and whether its entries have more to check.
_SegmentPlace = tuple[SegmentKey, bool]
#: (attribute, value key[, attribute, value key]): where a posting sits in nested dicts
_Path = tuple[Hashable, ...]
#: What undoes the filing of a conjunction: its id; where it is filed ("eq" and its
#: (attribute, value key) paths, end to end; "pair" and its (attribute, value key,
#: attribute, value key) paths, end to end; "range" and its segment's place); the
#: attribute names and value keys its checks coded. Tuples of strings and numbers (the
#: garbage collector stops tracking them) and flat: each one made counts towards the
#: collector's next pass, and the adds of a bulk copy made the collections of an add
#: twice as frequent (issue 30).
_Filed = (tuple[int, Literal["eq"], _Path, tuple[str, ...], tuple[ValueKey, ...]]
          | tuple[int, Literal["pair"], _Path, tuple[str, ...], tuple[ValueKey, ...]]
          | tuple[int, Literal["range"], _SegmentPlace, tuple[str, ...], tuple[ValueKey, ...]])
#: Per attribute: its equality postings by value, its code, whether it has interval
#: segments, its pair terms by value (:meth:`ArrayIndex._attr_table`).
_AttrInfo = tuple[dict[ValueKey, Posting] | None, int | None, bool,
                  dict[ValueKey, int] | None]


def array_layouts(conjunctions: Sequence[Conjunction] | None, access_of: AccessOf = access_of
                  ) -> list[Layout] | None:
    """How the array index would file each conjunction of a filter (its
    :func:`~matching.normal.conjunctions_of`); None when it is not array-shaped, or
    when it is never TRUE (the general index keeps those)."""
    if not conjunctions:
        return None
    layouts: list[Layout] = []
    for conjunction in conjunctions:
        atoms = atoms_of(conjunction, access_of)
        if atoms is None:
            return None
        if atoms:  # () is never TRUE: nothing to file
            layout = layout_of(atoms)
            if layout is None:
                return None
            layouts.append(layout)
    return layouts or None


class ArrayIndex:
    def __init__(self) -> None:
        self._filters: dict[int, Filter] = {}
        #: Where the conjunctions of each filter are filed: those of one apart (most
        #: filters), with no tuple around their one record.
        self._places_of_one: dict[int, _Filed] = {}
        self._places: dict[int, tuple[_Filed, ...]] = {}
        self._attrs: Codes[str] = Codes()
        self._values: Codes[ValueKey] = Codes()
        self._capacity = 0
        self._conj_slot = np.empty(0, np.int64)
        #: Per conjunction and check: the event column, and the bounds it must lie in.
        self._columns = np.empty((0, _R), np.intp)
        self._lows = np.empty((0, _R), np.float64)
        self._highs = np.empty((0, _R), np.float64)
        self._alive = np.empty(0, np.bool_)
        #: Conjunctions of filters with several: their matches need deduplicating.
        self._multi = np.empty(0, np.bool_)
        #: Per conjunction id: how many checks its row has written (the rest are unused).
        self._checks_of: list[int] = []
        self._multi_count = 0
        self._free_conj: list[int] = []
        self._next_conj = 0
        #: Dead conjunctions still in a segment's sorted arrays: while there are any,
        #: interval candidates are masked with ``_alive``.
        self._tombstones = 0
        self._equal: dict[str, dict[ValueKey, Posting]] = {}
        self._pairs = PairTable()
        self._segments: dict[_SegmentPlace, Segment] = {}
        self._segments_of: dict[str, list[Segment]] = {}
        self._table: dict[str, _AttrInfo] | None = None

    def __len__(self) -> int:
        return len(self._filters)

    def is_clear(self) -> bool:
        """Nothing is left behind (every filter removed)."""
        return not (self._filters or self._places_of_one or self._places or self._attrs.code
                    or self._values.code or self._equal or not self._pairs.is_clear()
                    or self._segments or self._segments_of or self._multi_count
                    or self._tombstones)

    # -- adding and removing -----------------------------------------------------------

    def add(self, slot: int, filter: Filter, layouts: list[Layout]) -> None:
        """File ``filter`` under ``slot``; ``layouts`` are :func:`array_layouts`'."""
        self._table = None
        self._filters[slot] = filter
        if len(layouts) == 1:  # the commonest; loops, not comprehensions, in this path
            self._places_of_one[slot] = self._file(slot, layouts[0], False)
            return
        filed: list[_Filed] = []
        for layout in layouts:
            filed.append(self._file(slot, layout, True))
        self._places[slot] = tuple(filed)

    def _grow(self) -> None:
        capacity = max(1024, 2 * self._capacity)
        extra = capacity - self._capacity
        self._conj_slot = np.concatenate([self._conj_slot, np.zeros(extra, np.int64)])
        self._columns = np.concatenate([self._columns, np.zeros((extra, _R), np.intp)])
        self._lows = np.concatenate([self._lows, np.full((extra, _R), -math.inf)])
        self._highs = np.concatenate([self._highs, np.full((extra, _R), math.inf)])
        self._alive = np.concatenate([self._alive, np.zeros(extra, np.bool_)])
        self._multi = np.concatenate([self._multi, np.zeros(extra, np.bool_)])
        self._checks_of.extend([0] * extra)
        self._capacity = capacity

    def _file(self, slot: int, layout: Layout, multi: bool) -> _Filed:
        if self._free_conj:
            conj = self._free_conj.pop()
        else:
            if self._next_conj == self._capacity:
                self._grow()
            conj = self._next_conj
            self._next_conj += 1
        self._conj_slot[conj] = slot
        self._alive[conj] = True
        self._multi[conj] = multi
        self._multi_count += multi
        checks = layout.checks
        coded_attrs: tuple[str, ...] = ()
        coded_values: tuple[ValueKey, ...] = ()
        written = self._checks_of[conj]
        if checks or written:  # a conjunction filed under a pair often has neither
            # Unused checks read column 0 (0.0) within (-inf, inf): always TRUE. Only the
            # cells that change are written, one at a time (cheaper than a row from a
            # list): the checks of this conjunction, and those the row's last one left
            # beyond them.
            columns, lows, highs = self._columns, self._lows, self._highs
            for j in range(len(checks), written):
                columns[conj, j], lows[conj, j], highs[conj, j] = 0, -math.inf, math.inf
            self._checks_of[conj] = len(checks)
            attrs: list[str] = []
            values: list[ValueKey] = []
            attr_code, value_code = self._attrs.acquire, self._values.acquire
            for j, atom in enumerate(checks):
                attrs.append(atom.attr)
                code = attr_code(atom.attr)
                if atom.keys is None:
                    columns[conj, j], lows[conj, j], highs[conj, j] = \
                        1 + 2 * code, atom.low, atom.high
                else:
                    (key,) = atom.keys
                    value = value_code(key)
                    values.append(key)
                    columns[conj, j], lows[conj, j], highs[conj, j] = \
                        2 + 2 * code, value, value
            coded_attrs, coded_values = tuple(attrs), tuple(values)
        direct = not checks
        flat: list[Hashable] = []
        path: _Path
        access = layout.access
        if len(access) == 2:
            first, second = access
            for a in first.keys or ():
                for b in second.keys or ():
                    path = (first.attr, a, second.attr, b)
                    self._pairs.put(path, conj, direct)
                    flat.extend(path)
            return conj, "pair", tuple(flat), coded_attrs, coded_values
        if access:
            (only,) = access
            for key in only.keys or ():
                path = (only.attr, key)
                leaf(self._equal, path, Posting).put(conj, direct)
                flat.extend(path)
            return conj, "eq", tuple(flat), coded_attrs, coded_values
        assert layout.ranged is not None  # no equality access: a range one
        return (conj, "range", self._file_range(conj, layout.ranged, len(checks) > 1),
                coded_attrs, coded_values)

    def _file_range(self, conj: int, atom: Atom, checked: bool) -> _SegmentPlace:
        """File under an interval; ``checked`` when the conjunction says more."""
        shape, key, reach = segment_key(atom.attr, atom.low, atom.high)
        where = (shape, checked)
        segment = self._segments.get(where)
        if segment is None:
            segment = self._segments[where] = Segment(shape[1] == BELOW, checked)
            self._segments_of.setdefault(atom.attr, []).append(segment)
        self._release(segment.add(key, atom.high, conj, reach, self._alive))
        return where

    def _release(self, freed: list[int]) -> None:
        """Conjunction ids no segment holds any more: reusable."""
        self._tombstones -= len(freed)
        self._free_conj.extend(freed)

    def remove(self, slot: int) -> bool:
        """Forget the filter of ``slot``; False when it is not here."""
        one = self._places_of_one.pop(slot, None)
        if one is not None:
            places: tuple[_Filed, ...] = (one,)
        else:
            found = self._places.pop(slot, None)
            if found is None:
                return False
            places = found
            self._multi_count -= len(places)  # as _file counted them
        self._table = None
        del self._filters[slot]
        for filed in places:
            conj = filed[0]
            self._alive[conj] = False
            for attr in filed[3]:
                self._attrs.release(attr)
            for value in filed[4]:
                self._values.release(value)
            match filed:  # the commonest first
                case (_, "eq", flat, _, _):
                    for at in range(0, len(flat), 2):
                        drop_from_leaf(self._equal, flat[at:at + 2], conj)
                    self._free_conj.append(conj)
                case (_, "range", where, _, _):
                    self._tombstones += 1  # until its segment lets it go
                    segment = self._segments[where]
                    self._release(segment.remove(conj, self._alive))
                    if not len(segment):
                        self._release(segment.dead_ids)
                        del self._segments[where]
                        attr = where[0][0]
                        attr_segments = self._segments_of[attr]
                        attr_segments.remove(segment)
                        if not attr_segments:
                            del self._segments_of[attr]
                case (_, "pair", flat, _, _):
                    for at in range(0, len(flat), 4):
                        self._pairs.drop(flat[at:at + 4], conj)
                    self._free_conj.append(conj)
        return True

    # -- matching ----------------------------------------------------------------------

    def _attr_table(self) -> dict[str, _AttrInfo]:
        """Per attribute some filter names: its equality postings by value, its code
        (when checks name it), whether it has interval segments, its pair terms by value.
        One lookup per event attribute instead of four; made again after a change."""
        if self._table is None:
            terms = self._pairs.terms
            names = self._equal.keys() | self._attrs.code.keys() | self._segments_of.keys() \
                | terms.keys()
            self._table = {name: (self._equal.get(name), self._attrs.code.get(name),
                                  name in self._segments_of, terms.get(name))
                           for name in names}
        return self._table

    def match_many(self, events: Sequence[Mapping[str, Value]]) -> list[np.ndarray]:
        """Per event, the slots of the filters that are TRUE for it (each once)."""
        count = len(events)
        if not self._filters or not count:
            return [_NO_IDS] * count
        table = self._attr_table()
        values_code = self._values.code
        width = 1 + 2 * self._attrs.span()
        end = count * width
        # One row per event, flat: per coded attribute its number and its value's code,
        # gathered in ``cells`` for the ``spots`` they go to, and set in one call.
        spots: list[int] = []
        cells: list[Any] = []
        inexact: dict[int, list[tuple[int, int]]] = {}  # event -> (column, int value)
        found = Found()
        terms: list[list[int | None]] = []  # per attribute pairs name: each event's term
        numeric: list[tuple[str, list[Any]]] = []
        # Attribute by attribute, each lookup made for the whole batch in one map.
        for name in sorted(table.keys() & set().union(*events)):
            by_value, code, stabbed, paired = table[name]
            keys, numbers, big = batch_column([attrs.get(name) for attrs in events])
            if paired is not None:
                terms.append(list(map(paired.get, keys)))
            if by_value is not None:
                postings = list(map(by_value.get, keys))
                found.gather(list(itertools.compress(postings, postings)),  # type: ignore[arg-type]  # compress keeps the postings found
                             list(itertools.compress(range(count), postings)))
            if code is not None:
                if numbers is not None:
                    spots.extend(range(1 + 2 * code, end, width))
                    cells.extend(numbers)
                    for event, value in big:
                        inexact.setdefault(event, []).append((1 + 2 * code, value))
                spots.extend(range(2 + 2 * code, end, width))
                cells.extend(map(values_code.get, keys))
            if stabbed and numbers is not None:
                numeric.append((name, numbers))
        if len(terms) > 1:
            self._pairs.collect(terms, found)
        low_rows = np.full(end, math.nan)
        low_rows[::width] = 0.0  # column 0, of the unused checks
        low_rows[spots] = np.array(cells, np.float64)  # None (no number, no code): NaN
        high_rows = low_rows
        if inexact:
            high_rows = low_rows.copy()
            for event, places in inexact.items():
                for column, value in places:
                    low_rows[event * width + column] = bracketing_double(value, -1)
                    high_rows[event * width + column] = bracketing_double(value, 1)
        for name, numbers in numeric:
            # NaN (and None) compare with nothing.
            numbered = [e for e, number in enumerate(numbers) if number == number is not None]
            if numbered:
                self._stab(name, numbered, [numbers[e] for e in numbered], inexact, events,
                           found, count == 1)
        return self._finish(found, count, width, low_rows, high_rows, inexact, events)

    def _stab(self, name: str, numbered: list[int], values: list[float],
              inexact: Mapping[int, object], events: Sequence[Mapping[str, Value]],
              found: Found, single: bool) -> None:
        """Candidates from the interval segments of attribute ``name`` for the events
        ``numbered`` (their values of it: ``values``; ``single``: the batch is one event)."""
        segments = self._segments_of[name]
        if single and not inexact:
            # One event: scalar searches and slices (views, no copy) cost least.
            value = float(values[0])
            for segment in segments:
                if len(segment.keys):
                    start, end = segment.window(value)
                    if end > start:
                        ids = segment.conj[start:end]
                        if segment.check_highs:
                            ids = ids[segment.highs[start:end] >= value]
                        (found.ranged if segment.checked else found.ranged_direct).append(ids)
                if segment.recent_conj:  # unsorted: candidates, to check
                    found.ranged.append(segment.recent_ids())
            return
        lower = upper = np.array(values, np.float64)
        if inexact and any(e in inexact for e in numbered):
            # Bracketed for the events whose answers are confirmed one by one (those
            # with a value that is no double), exact for the others: a direct segment's
            # window is their answer.
            original = [events[e][name] if e in inexact else None for e in numbered]
            lower = np.array([values[i] if v is None else bracketing_double(v, -1)  # type: ignore[arg-type]  # numbers, by the caller
                              for i, v in enumerate(original)])
            upper = np.array([values[i] if v is None else bracketing_double(v, 1)  # type: ignore[arg-type]  # as above
                              for i, v in enumerate(original)])
        owners = np.array(numbered, np.int64)
        for segment in segments:
            if segment.recent_conj:  # each would be a candidate for every event
                self._release(segment.merge(self._alive))
            if len(segment.keys):
                starts, ends = segment.windows(lower, upper)
                lengths = ends - starts
                total = int(lengths.sum())
                if total:
                    # Concatenated windows: position i of window w is start_w + i.
                    offsets = np.cumsum(lengths) - lengths
                    at = np.arange(total) + np.repeat(starts - offsets, lengths)
                    ids, ids_events = segment.conj[at], np.repeat(owners, lengths)
                    if segment.check_highs:
                        reach = segment.highs[at] >= np.repeat(lower, lengths)
                        ids, ids_events = ids[reach], ids_events[reach]
                    if segment.checked:
                        found.ranged.append(ids)
                        found.ranged_events.append(ids_events)
                    else:
                        found.ranged_direct.append(ids)
                        found.ranged_direct_events.append(ids_events)

    def _finish(self, found: Found, count: int, width: int, low_rows: np.ndarray,
                high_rows: np.ndarray, inexact: Mapping[int, object],
                events: Sequence[Mapping[str, Value]]) -> list[np.ndarray]:
        """Check the candidates in bulk; per event, the slots of those that pass."""
        single = count == 1
        conj_parts: list[np.ndarray] = list(found.direct)
        event_parts: list[np.ndarray] = []
        if found.direct and not single:
            event_parts.append(owners_of(found.direct_events, found.direct))
        if found.ranged_direct:
            ids = np.concatenate(found.ranged_direct)
            owners = None if single else np.concatenate(found.ranged_direct_events)
            if self._tombstones:
                live = self._alive[ids]
                ids = ids[live]
                owners = None if owners is None else owners[live]
            conj_parts.append(ids)
            if owners is not None:
                event_parts.append(owners)
        if found.checked or found.ranged:
            parts = found.checked + found.ranged
            candidates = np.concatenate(parts) if len(parts) > 1 else parts[0]
            cells = np.take(self._columns, candidates, axis=0)
            if not single:
                owners = np.concatenate(
                    ([owners_of(found.checked_events, found.checked)] if found.checked else [])
                    + found.ranged_events)
                cells += (owners * width)[:, None]
            low_values = low_rows[cells]
            high_values = low_values if high_rows is low_rows else high_rows[cells]
            held = np.take(self._lows, candidates, axis=0) <= high_values
            held &= low_values <= np.take(self._highs, candidates, axis=0)
            # The four answers of a candidate as one word: all TRUE is 0x01010101.
            passed = held.view(np.uint32)[:, 0] == 0x01010101
            if self._tombstones:
                passed &= self._alive[candidates]
            conj_parts.append(candidates[passed])
            if not single:
                assert owners is not None  # set above for a batch
                event_parts.append(owners[passed])
        if not conj_parts:
            return [_NO_IDS] * count
        conj = np.concatenate(conj_parts) if len(conj_parts) > 1 else conj_parts[0]
        slots = self._conj_slot[conj]
        owners = None if single else np.concatenate(event_parts)
        if self._multi_count:  # a filter of several conjunctions may match twice
            twice = self._multi[conj]
            if np.count_nonzero(twice) > 1:
                slots, owners = unique_matches(slots, owners, twice)
        results = [slots] if owners is None else split_by_event(slots, owners, count)
        for event in inexact:  # found with the doubles either side: confirm each
            filters, attrs = self._filters, events[event]
            results[event] = np.array([s for s in results[event].tolist()
                                       if filters[s].matches(attrs)], np.int64)
        return results
