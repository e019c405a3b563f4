"""Summaries: what one tree edge (or gossip neighbour) carries for a whole set of filters.

``may_match(attrs)`` must never say no when one of the filters would say yes; it may
say yes too often. A summary is exact while small: the canonical texts of its filters,
minus those covered by others (:mod:`matching.covering`: the empty filter covers all,
``x > 5`` covers ``x > 10``, a conjunction covers one with more predicates). Past
``max_filters`` it is coarsened (:mod:`matching.coarse`): Bloom filters of equality
values and value pairs, merged numeric intervals, attribute names, in bounded space;
only filters that have no coarse form stay exact, and when those alone exceed the bound
the summary matches everything. :meth:`Summary.precision` measures how often a summary
says yes wrongly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from matching.access import necessary_accesses, plan
from matching.coarse import Coarse, CoarseBuilder
from matching.covering import Shape, uncovered
from matching.errors import FilterSyntaxError, SummaryDecodeError
from matching.index import Index
from matching.normal import negation_normal_form
from matching.parser import Filter, parse
from matching.wire import decode, encode_coarse

DEFAULT_MAX_FILTERS = 64
DEFAULT_BLOOM_BYTES = 2048
#: Covering is quadratic: above this many filters (times max_filters) it is skipped.
COVER_FACTOR = 4
#: Most UTF-8 bytes of canonical text a summary keeps exactly: past it, as past
#: ``max_filters``, it is coarsened (never refused), so that a summary fits the messages
#: that carry it whatever filters the clients wrote.
MAX_EXACT_TEXT_BYTES = 16384


def _text_bytes(shapes: Iterable[Shape]) -> int:
    return sum(len(s.text.encode()) for s in shapes)


@dataclass(frozen=True)
class Precision:
    """How a summary answered on sample events, against its filters one by one."""

    events: int
    matching: int  # events some filter matches
    false_positives: int  # events no filter matches but the summary lets through
    false_negatives: int  # events a filter matches but the summary refuses: must be 0

    @property
    def false_positive_rate(self) -> float:
        return self.false_positives / max(self.events - self.matching, 1)


@dataclass(frozen=True)
class Summary:
    matches_all: bool = False
    #: Canonical texts of the filters kept exactly.
    filters: frozenset[str] = frozenset()
    coarse: Coarse | None = None
    max_filters: int = field(default=DEFAULT_MAX_FILTERS, compare=False)
    bloom_bytes: int = field(default=DEFAULT_BLOOM_BYTES, compare=False)
    _exact: tuple[Filter, ...] = field(default=(), compare=False, repr=False)
    _index: Index[int] = field(default_factory=Index, compare=False, repr=False)

    def __post_init__(self) -> None:
        for key, f in enumerate(self._exact):
            self._index.add(key, f)

    # -- building ----------------------------------------------------------------------

    @staticmethod
    def empty(max_filters: int = DEFAULT_MAX_FILTERS,
              bloom_bytes: int = DEFAULT_BLOOM_BYTES) -> Summary:
        return Summary(max_filters=max_filters, bloom_bytes=bloom_bytes)

    @staticmethod
    def everything(max_filters: int = DEFAULT_MAX_FILTERS,
                   bloom_bytes: int = DEFAULT_BLOOM_BYTES) -> Summary:
        return Summary(matches_all=True, max_filters=max_filters, bloom_bytes=bloom_bytes)

    @staticmethod
    def of(filters: Iterable[Filter | str], max_filters: int = DEFAULT_MAX_FILTERS,
           bloom_bytes: int = DEFAULT_BLOOM_BYTES) -> Summary:
        """The summary of ``filters`` (parsed, or texts to parse)."""
        parsed = [parse(f) if isinstance(f, str) else f for f in filters]
        return _build(parsed, [], max_filters, bloom_bytes)

    def merge(self, *others: Summary) -> Summary:
        """The union: may match whatever one of the parts may match."""
        parts = (self, *others)
        if any(p.matches_all for p in parts):
            return Summary.everything(self.max_filters, self.bloom_bytes)
        return _build([f for p in parts for f in p._exact],
                      [p.coarse for p in parts if p.coarse is not None],
                      self.max_filters, self.bloom_bytes)

    # -- asking ------------------------------------------------------------------------

    def may_match(self, attrs: Mapping[str, Any]) -> bool:
        if self.matches_all:
            return True
        if self.coarse is not None and self.coarse.may_match(attrs):
            return True
        return bool(self._exact) and bool(self._index.match(attrs))

    def precision(self, filters: Sequence[Filter], events: Iterable[Mapping[str, Any]]
                  ) -> Precision:
        """Count this summary's wrong answers for ``filters`` (those it summarizes) on
        ``events``."""
        index: Index[int] = Index()
        for key, f in enumerate(filters):
            index.add(key, f)
        count = matching = false_positives = false_negatives = 0
        for attrs in events:
            count += 1
            truly, says = bool(index.match(attrs)), self.may_match(attrs)
            matching += truly
            false_positives += says and not truly
            false_negatives += truly and not says
        return Precision(count, matching, false_positives, false_negatives)

    # -- wire --------------------------------------------------------------------------

    def to_wire(self) -> dict[str, Any]:
        """Plain data (see :mod:`matching.wire`)."""
        if self.matches_all:
            return {"all": True}
        wire: dict[str, Any] = {}
        if self.filters:
            wire["f"] = sorted(self.filters)
        if self.coarse is not None:
            wire["c"] = encode_coarse(self.coarse)
        return wire

    @staticmethod
    def from_wire(data: Any, max_filters: int = DEFAULT_MAX_FILTERS,
                  bloom_bytes: int = DEFAULT_BLOOM_BYTES) -> Summary:
        """Decode a peer's summary; raises SummaryDecodeError for anything malformed."""
        everything, texts, coarse = decode(data)
        if everything:
            return Summary.everything(max_filters, bloom_bytes)
        try:
            parsed = [parse(text, canonical=True) for text in texts]
        except FilterSyntaxError as exc:
            raise SummaryDecodeError(f"malformed summary: a filter does not parse: {exc}"
                                     ) from None
        return _build(parsed, [coarse] if coarse is not None else [], max_filters, bloom_bytes)


def _has_coarse_form(shape: Shape) -> bool:
    if shape.conjunctions is None:
        return necessary_accesses(negation_normal_form(shape.filter.expr)) is not None  # type: ignore[arg-type]  # Shape.of gives conjunctions for a filter with no expression
    return all(plan(c).access is not None for c in shape.conjunctions)


def _build(filters: list[Filter], coarse_parts: list[Coarse], max_filters: int,
           bloom_bytes: int) -> Summary:
    everything = Summary.everything(max_filters, bloom_bytes)
    shapes = [Shape.of(f) for f in {str(f): f for f in filters}.values()]
    if any(s.always() for s in shapes):
        return everything
    shapes = [s for s in shapes if not s.never()]
    if len(shapes) <= COVER_FACTOR * max_filters:
        shapes = uncovered(shapes)
    shapes.sort(key=lambda s: s.text)
    if not coarse_parts and len(shapes) <= max_filters \
            and _text_bytes(shapes) <= MAX_EXACT_TEXT_BYTES:
        return Summary(filters=frozenset(s.text for s in shapes), max_filters=max_filters,
                       bloom_bytes=bloom_bytes, _exact=tuple(s.filter for s in shapes))
    builder = CoarseBuilder(bloom_bytes)
    for part in coarse_parts:
        builder.absorb(part)
    exact = []
    for shape in shapes:
        if not _has_coarse_form(shape):
            exact.append(shape)
        elif shape.conjunctions is None:
            for access in necessary_accesses(negation_normal_form(shape.filter.expr)) or ():  # type: ignore[arg-type]  # Shape.of gives conjunctions for a filter with no expression
                builder.add_access(access)
        else:
            for conjunction in shape.conjunctions:
                builder.add_conjunction(conjunction)
    coarse = builder.build()
    if coarse is None or len(exact) > max_filters or _text_bytes(exact) > MAX_EXACT_TEXT_BYTES:
        return everything
    return Summary(filters=frozenset(s.text for s in exact), coarse=coarse,
                   max_filters=max_filters, bloom_bytes=bloom_bytes,
                   _exact=tuple(s.filter for s in exact))
