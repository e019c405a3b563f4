"""Interest summaries as selective routing passes them around: decoded once, merged once.

A :class:`Part` is a ``matching.Summary`` with its wire form and a key that is the same
for equal summaries. A subscriber's summary travels unchanged from node to node across
the overlay, so most adverts carry summaries a node has decoded before: decoding and
merging are memoized (pure functions of their inputs, in bounded caches), which keeps
the cost of an advert independent of how far its summaries came.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Generic, TypeVar

from matching import Summary

#: Entries kept by each memo (least recently used dropped first).
CACHE_SIZE = 8192
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, eq=False)
class Part:
    summary: Summary
    wire: dict[str, Any]
    #: Equal for equal summaries (wire forms are canonical: sorted lists).
    key: str

    @property
    def empty(self) -> bool:
        return not self.wire


class Memo(Generic[K, V]):
    """A bounded memo (least recently used entries dropped first)."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> V:
        self._items[key] = value
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return value


_decoded: Memo[tuple[str, int], Part] = Memo()
#: The same wire object decoded again (an in-process simulation hands over the sender's
#: objects): found by identity; the Part keeps its wire alive, so an id is not reused
#: while its entry is here.
_by_identity: Memo[tuple[int, int], Part] = Memo()
_merged: Memo[tuple[tuple[str, ...], int], Part] = Memo()


def part_of(summary: Summary) -> Part:
    wire = summary.to_wire()
    return Part(summary, wire, repr(wire))


def part_from_wire(wire: Any, max_filters: int) -> Part:
    """Decode a peer's summary; raises ``matching.SummaryDecodeError`` (a ValueError)."""
    found = _by_identity.get((id(wire), max_filters))
    if found is not None and found.wire is wire:
        return found
    text = repr(wire)
    found = _decoded.get((text, max_filters))
    if found is None:
        found = _decoded.put((text, max_filters),
                             part_of(Summary.from_wire(wire, max_filters)))
    if found.wire is not wire:
        # Keep this wire object alive with its entry (see _by_identity).
        found = Part(found.summary, wire, found.key)
    return _by_identity.put((id(wire), max_filters), found)


def merge_parts(parts: Sequence[Part], max_filters: int) -> Part:
    """The union of ``parts`` (at least one), coarsened past ``max_filters``."""
    keys = sorted({p.key for p in parts})
    if len(keys) == 1:
        return parts[0]
    memo_key = (tuple(keys), max_filters)
    found = _merged.get(memo_key)
    if found is not None:
        return found
    unique = list({p.key: p for p in parts}.values())
    merged = unique[0].summary.merge(*(p.summary for p in unique[1:]))
    return _merged.put(memo_key, part_of(merged))


@lru_cache(maxsize=16)
def empty_part(max_filters: int) -> Part:
    return part_of(Summary.empty(max_filters))
