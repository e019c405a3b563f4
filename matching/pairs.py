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
"""

from __future__ import annotations

from collections.abc import Hashable

from matching.access import ValueKey
from matching.postings import Found, Posting

#: Term codes stay below 2**31, so that two make one int64.
_TERM_BITS = 31


def pair_code(term: int, other: int) -> int:
    """The number of a pair of terms (either order)."""
    return term << _TERM_BITS | other if term < other else other << _TERM_BITS | term


class PairTable:
    def __init__(self) -> None:
        #: attribute -> value key -> [term code, conjunction paths naming it]
        self.terms: dict[str, dict[ValueKey, list[int]]] = {}
        self._free_terms: list[int] = []
        self._next_term = 0
        #: pair code -> the conjunctions filed under both terms
        self.postings: dict[int, Posting] = {}

    def is_clear(self) -> bool:
        return not (self.terms or self.postings)

    def _term(self, attr: str, key: ValueKey) -> int:
        by_value = self.terms.setdefault(attr, {})
        found = by_value.get(key)
        if found is None:
            if self._free_terms:
                term = self._free_terms.pop()
            else:
                term = self._next_term
                self._next_term += 1
                assert term < 2**_TERM_BITS
            found = by_value[key] = [term, 0]
        found[1] += 1
        return found[0]

    def _release(self, attr: str, key: ValueKey) -> int:
        by_value = self.terms[attr]
        found = by_value[key]
        found[1] -= 1
        if not found[1]:
            del by_value[key]
            if not by_value:
                del self.terms[attr]
            self._free_terms.append(found[0])
        return found[0]

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

    def collect(self, event: int, terms: list[int], found: Found) -> None:
        """Gather the postings of every pair of ``terms``, the terms of event ``event``."""
        postings = self.postings
        for at, term in enumerate(terms):
            for other in terms[at + 1:]:
                posting = postings.get(pair_code(term, other))
                if posting is not None:
                    posting.collect(event, found)
