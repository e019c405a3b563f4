"""Summaries: what one tree edge (or gossip neighbour) carries for a whole set of filters.

A summary answers ``may_match(attrs)`` and must never say no when one of its filters
would say yes. Exact while small: the set of canonical filter texts, with filters
covered by others dropped (an empty filter covers everything; a conjunction covers any
conjunction that has all of its predicates; ``x > 5`` covers ``x > 10``). Past
``max_filters`` it is coarsened: every filter contributes the access predicate of each
of its conjunctions (one predicate that must be TRUE for that conjunction to be TRUE),
kept as per-attribute Bloom filters of equality values and merged numeric intervals; a
filter without such a predicate makes the summary match everything. Coarse summaries
say yes too often, never too rarely, and stay bounded in size.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mmh3

from matching.ast import And, Compare, Expr, Lit, Value, kind_of
from matching.errors import FilterSyntaxError, SummaryDecodeError
from matching.index import _Access, _best_access, _value_key, to_dnf
from matching.parser import Filter, parse

DEFAULT_MAX_FILTERS = 64
BLOOM_BITS = 8192
BLOOM_HASHES = 3
MAX_INTERVALS = 16
MAX_WIRE_ATTRS = 256


def _bloom_positions(value: Value) -> list[int]:
    kind, norm = _value_key(value)
    data = f"{kind}:{norm!r}".encode()
    return [mmh3.hash(data, seed, signed=False) % BLOOM_BITS for seed in range(BLOOM_HASHES)]


def _conjunction(expr: Expr) -> frozenset[Expr]:
    return frozenset(expr.operands) if isinstance(expr, And) else frozenset([expr])


def _lower_bound(expr: Expr) -> tuple[str, float, bool] | None:
    """``x > c`` / ``x >= c`` as (attr, c, inclusive)."""
    if isinstance(expr, Compare) and isinstance(expr.right, Lit) and \
            kind_of(expr.right.value) == "num" and expr.op in (">", ">="):
        left = expr.left
        if not isinstance(left, Lit):
            return left.name, float(expr.right.value), expr.op == ">="  # type: ignore[arg-type]
    return None


def covers(general: Filter, specific: Filter) -> bool:
    """Whether every event ``specific`` matches is matched by ``general`` (sound, partial)."""
    if general.expr is None:
        return True
    if specific.expr is None:
        return False
    if _conjunction(general.expr) <= _conjunction(specific.expr):
        return True
    g, s = _lower_bound(general.expr), _lower_bound(specific.expr)
    if g and s and g[0] == s[0]:
        return g[1] < s[1] or (g[1] == s[1] and (g[2] or not s[2]))
    return False


def _merge_intervals(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    intervals = sorted(intervals)
    merged: list[tuple[float, float]] = []
    for low, high in intervals:
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    while len(merged) > MAX_INTERVALS:  # close the smallest gap: wider, never narrower
        gaps = [merged[i + 1][0] - merged[i][1] for i in range(len(merged) - 1)]
        i = gaps.index(min(gaps))
        merged[i:i + 2] = [(merged[i][0], merged[i + 1][1])]
    return merged


@dataclass(frozen=True)
class Summary:
    everything: bool = False
    filters: frozenset[str] = frozenset()
    coarse: bool = False
    blooms: tuple[tuple[str, int], ...] = ()  # (attr, bit set as int)
    ranges: tuple[tuple[str, tuple[tuple[float, float], ...]], ...] = ()
    max_filters: int = field(default=DEFAULT_MAX_FILTERS, compare=False)
    _parsed: tuple[Filter, ...] = field(default=(), compare=False, repr=False)

    # -- building ----------------------------------------------------------------------

    @staticmethod
    def empty(max_filters: int = DEFAULT_MAX_FILTERS) -> Summary:
        return Summary(max_filters=max_filters)

    @staticmethod
    def everything_summary() -> Summary:
        return Summary(everything=True)

    @staticmethod
    def of(filters: Iterable[Filter | str], max_filters: int = DEFAULT_MAX_FILTERS) -> Summary:
        parsed = [parse(f) if isinstance(f, str) else f for f in filters]
        return _build(parsed, [], max_filters)

    def merge(self, *others: Summary) -> Summary:
        parts = (self, *others)
        if any(p.everything for p in parts):
            return Summary(everything=True, max_filters=self.max_filters)
        filters = [f for p in parts for f in p._filters()]
        return _build(filters, [p for p in parts if p.coarse], self.max_filters)

    def _filters(self) -> tuple[Filter, ...]:
        if self._parsed or not self.filters:
            return self._parsed
        return tuple(parse(text) for text in sorted(self.filters))

    @property
    def size(self) -> int:
        return len(self.filters) + sum(bin(b).count("1") for _, b in self.blooms) + sum(
            len(r) for _, r in self.ranges)

    # -- asking --------------------------------------------------------------------------

    def may_match(self, attrs: Mapping[str, Value]) -> bool:
        if self.everything:
            return True
        if any(f.matches(attrs) for f in self._filters()):
            return True
        for attr, bits in self.blooms:
            if attr in attrs and kind_of(attrs[attr]) is not None and all(
                bits >> pos & 1 for pos in _bloom_positions(attrs[attr])
            ):
                return True
        for attr, intervals in self.ranges:
            value = attrs.get(attr)
            if kind_of(value) == "num" and any(lo <= value <= hi  # type: ignore[operator]
                                               for lo, hi in intervals):
                return True
        return False

    # -- wire ------------------------------------------------------------------------------

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {}
        if self.everything:
            wire["all"] = True
        if self.filters:
            wire["f"] = sorted(self.filters)
        if self.blooms:
            wire["eq"] = {a: b.to_bytes(BLOOM_BITS // 8, "big") for a, b in self.blooms}
        if self.ranges:
            wire["rng"] = {a: [[lo, hi] for lo, hi in r] for a, r in self.ranges}
        return wire

    @staticmethod
    def from_wire(data: Any, max_filters: int = DEFAULT_MAX_FILTERS) -> Summary:
        if not isinstance(data, Mapping) or set(data) - {"all", "f", "eq", "rng"}:
            raise SummaryDecodeError("a summary is a map with keys all, f, eq, rng")
        if data.get("all", False) is True:
            return Summary(everything=True, max_filters=max_filters)
        texts = data.get("f", [])
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise SummaryDecodeError("summary 'f' must be a list of filter texts")
        if len(texts) > 4 * max_filters:
            raise SummaryDecodeError("summary carries too many filters")
        try:
            parsed = [parse(t) for t in texts]
        except FilterSyntaxError as exc:
            raise SummaryDecodeError(f"summary filter does not parse: {exc}") from None
        blooms, ranges = _decode_coarse(data)
        coarse = Summary(coarse=True, blooms=blooms, ranges=ranges) if blooms or ranges else None
        return _build(parsed, [coarse] if coarse else [], max_filters)


def _decode_coarse(data: Mapping[str, Any]) -> tuple[tuple, tuple]:
    eq, rng = data.get("eq", {}), data.get("rng", {})
    if not isinstance(eq, Mapping) or not isinstance(rng, Mapping) or \
            len(eq) + len(rng) > MAX_WIRE_ATTRS:
        raise SummaryDecodeError("summary 'eq' and 'rng' must be small maps")
    blooms = []
    for attr, bits in eq.items():
        if not isinstance(attr, str) or not isinstance(bits, bytes) or \
                len(bits) != BLOOM_BITS // 8:
            raise SummaryDecodeError("summary 'eq' maps names to bit sets of the right size")
        blooms.append((attr, int.from_bytes(bits, "big")))
    ranges = []
    for attr, intervals in rng.items():
        if not isinstance(attr, str) or not isinstance(intervals, list) or \
                len(intervals) > MAX_INTERVALS:
            raise SummaryDecodeError("summary 'rng' maps names to a few intervals")
        pairs = []
        for pair in intervals:
            if not (isinstance(pair, list) and len(pair) == 2 and all(
                    isinstance(x, int | float) and not isinstance(x, bool) and not math.isnan(x)
                    for x in pair) and pair[0] <= pair[1]):
                raise SummaryDecodeError("summary intervals are [low, high] numbers")
            pairs.append((float(pair[0]), float(pair[1])))
        ranges.append((attr, tuple(pairs)))
    return tuple(sorted(blooms)), tuple(sorted(ranges))


def _build(filters: list[Filter], coarse_parts: list[Summary], max_filters: int) -> Summary:
    if any(f.expr is None for f in filters):
        return Summary(everything=True, max_filters=max_filters)
    unique = list({str(f): f for f in filters}.values())
    kept = [f for f in unique
            if not any(g is not f and covers(g, f) and (not covers(f, g) or str(g) < str(f))
                       for g in unique)]
    if len(kept) <= max_filters and not coarse_parts:
        kept.sort(key=str)
        return Summary(filters=frozenset(str(f) for f in kept), max_filters=max_filters,
                       _parsed=tuple(kept))
    return _coarsen(kept, coarse_parts, max_filters)


def _coarsen(filters: list[Filter], coarse_parts: list[Summary], max_filters: int) -> Summary:
    blooms: dict[str, int] = {}
    ranges: dict[str, list[tuple[float, float]]] = {}
    for part in coarse_parts:
        for attr, bits in part.blooms:
            blooms[attr] = blooms.get(attr, 0) | bits
        for attr, intervals in part.ranges:
            ranges.setdefault(attr, []).extend(intervals)
    for f in filters:
        assert f.expr is not None
        conjunctions = to_dnf(f.expr)
        if conjunctions is None:
            return Summary(everything=True, max_filters=max_filters)
        for conjunction in conjunctions:
            access: _Access | None = _best_access(conjunction)
            if access is None:
                return Summary(everything=True, max_filters=max_filters)
            if access.equals:
                bits = blooms.get(access.attr, 0)
                for value in access.equals:
                    for pos in _bloom_positions(value):
                        bits |= 1 << pos
                blooms[access.attr] = bits
            else:
                low = -math.inf if access.low is None else access.low
                high = math.inf if access.high is None else access.high
                ranges.setdefault(access.attr, []).append((low, high))
    if len(blooms) + len(ranges) > MAX_WIRE_ATTRS:
        return Summary(everything=True, max_filters=max_filters)
    return Summary(coarse=True, max_filters=max_filters,
                   blooms=tuple(sorted(blooms.items())),
                   ranges=tuple(sorted((a, tuple(_merge_intervals(r)))
                                       for a, r in ranges.items())))
