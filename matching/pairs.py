"""The array index's pair accesses (two equalities on two attributes, Fabret et al.
2001), keyed by one number per pair.

Most pairs an event could form are filed under no conjunction: at 100,000 skewed
filters (bench/matching.py, 0.1% matched) an event's five string attributes reach
about ten pair buckets and find a conjunction in one event out of sixteen. Looked up
in nested dicts (attribute, value, attribute, value: as
:func:`matching.clusters.paired_leaves` does for the cluster index), those misses took
a quarter of a batch's time. Here each (attribute, value) that some pair names has a
dense *term* code, found with the event's other lookups of that value, and each pair
of terms one integer (:func:`pair_code`): an event's pairs are one dict lookup each.
A batch's terms form a matrix (events x attributes): the codes of all its pairs are
made by numpy at once (:func:`pair_codes`, the same number) and looked up in one
``map``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Hashable

import numpy as np

from matching.access import ValueKey
from matching.postings import Found, Posting

#: Term codes stay below 2**31, so that two make one int64.
_TERM_BITS = 31


def pair_code(term: int, other: int) -> int:
    """The number of a pair of terms (either order): the lower term, then the higher."""
    return term << _TERM_BITS | other if term < other else other << _TERM_BITS | term


def pair_codes(terms: np.ndarray, others: np.ndarray) -> np.ndarray:
    """:func:`pair_code` of each pair of two int64 arrays (of distinct terms)."""
    codes: np.ndarray = np.minimum(terms, others) << _TERM_BITS | np.maximum(terms, others)
    return codes


class PairTable:
    def __init__(self) -> None:
        #: attribute -> value key -> term code
        self.terms: dict[str, dict[ValueKey, int]] = {}
        #: term code -> the conjunction paths naming it
        self._refs: list[int] = []
        self._free_terms: list[int] = []
        self._next_term = 0
        #: pair code -> the conjunctions filed under both terms
        self.postings: dict[int, Posting] = {}

    def is_clear(self) -> bool:
        return not (self.terms or self.postings)

    def _term(self, attr: str, key: ValueKey) -> int:
        by_value = self.terms.setdefault(attr, {})
        term = by_value.get(key)
        if term is None:
            if self._free_terms:
                term = self._free_terms.pop()
            else:
                term = self._next_term
                self._next_term += 1
                assert term < 2**_TERM_BITS
                self._refs.append(0)
            by_value[key] = term
        self._refs[term] += 1
        return term

    def _release(self, attr: str, key: ValueKey) -> int:
        by_value = self.terms[attr]
        term = by_value[key]
        self._refs[term] -= 1
        if not self._refs[term]:
            del by_value[key]
            if not by_value:
                del self.terms[attr]
            self._free_terms.append(term)
        return term

    def put(self, path: tuple[Hashable, ...], conj: int, direct: bool) -> None:
        """File ``conj`` under ``path`` (attribute, value key, attribute, value key)."""
        attr, key, other_attr, other_key = path
        assert isinstance(attr, str) and isinstance(other_attr, str)
        code = pair_code(self._term(attr, key), self._term(other_attr, other_key))  # type: ignore[arg-type]  # value keys, by the caller
        posting = self.postings.get(code)
        if posting is None:
            posting = self.postings[code] = Posting()
        posting.put(conj, direct)

    def drop(self, path: tuple[Hashable, ...], conj: int) -> None:
        """Undo :meth:`put`."""
        attr, key, other_attr, other_key = path
        assert isinstance(attr, str) and isinstance(other_attr, str)
        code = pair_code(self._release(attr, key), self._release(other_attr, other_key))  # type: ignore[arg-type]  # value keys, by the caller
        if self.postings[code].drop(conj):
            del self.postings[code]

    def collect(self, columns: list[list[int | None]], found: Found) -> None:
        """Gather the postings of every pair of terms an event has: ``columns`` per
        attribute, each event's term of its value (None: none)."""
        if len(columns[0]) == 1:
            # One event: numpy's per-call costs exceed the few lookups (bench: in one
            # process, alternated with numpy's way, 0.6% one at a time ran 1.17x).
            present = [column[0] for column in columns if column[0] is not None]
            postings = self.postings
            hits = [posting for at, term in enumerate(present) for other in present[at + 1:]
                    if (posting := postings.get(pair_code(term, other))) is not None]
            found.gather(hits, [0] * len(hits))
            return
        terms = np.array(columns, np.float64)  # attributes x events; None -> NaN
        first, second = _pairs_among(len(columns))
        left, right = terms[first], terms[second]
        both = ~(np.isnan(left) | np.isnan(right))
        events = np.nonzero(both)[1]
        if not len(events):
            return
        codes = pair_codes(left[both].astype(np.int64), right[both].astype(np.int64))
        looked = list(map(self.postings.get, codes.tolist()))
        found.gather(list(itertools.compress(looked, looked)),  # type: ignore[arg-type]  # compress keeps the postings found
                     list(itertools.compress(events.tolist(), looked)))


@functools.cache
def _pairs_among(count: int) -> tuple[np.ndarray, np.ndarray]:
    """The (first, second) indices of every pair among ``count`` attributes."""
    first, second = np.triu_indices(count, 1)
    return first, second
