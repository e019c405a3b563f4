"""Wire form of summaries: plain CBOR-friendly data, validated strictly on the way in
(it comes from remote peers).

::

    {}                                  matches nothing
    {"all": True}                       matches everything
    {"f": [text, ...],                  exact filters, canonical texts, sorted
     "c": {                             coarse part (matching.coarse)
        "bloom": bytes,                 Bloom bits (a power of two of bytes, 64..65536),
                                        present when eq or pairs are
        "eq": [attr, ...],              attributes with single values in the Bloom filter
        "pairs": [[a, b], ...],         attribute pairs (a < b) with value pairs in it
        "rng": {attr: [[low, high], ...]},  closed numeric intervals, None unbounded
        "has": [attr, ...]}}            attributes whose presence alone may match

Each key is left out when empty; lists are sorted, so equal summaries have equal wire
forms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from matching.bloom import Bloom, valid_size
from matching.coarse import MAX_ATTRS, MAX_INTERVALS, Coarse, Interval
from matching.errors import SummaryDecodeError

#: Exact filters a peer may send (its bound may be larger than ours: we coarsen).
MAX_WIRE_FILTERS = 4096


def encode_coarse(coarse: Coarse) -> dict[str, Any]:
    wire: dict[str, Any] = {}
    if coarse.bloom is not None:
        wire["bloom"] = coarse.bloom.bits
    if coarse.single_attrs:
        wire["eq"] = sorted(coarse.single_attrs)
    if coarse.pair_attrs:
        wire["pairs"] = [list(pair) for pair in sorted(coarse.pair_attrs)]
    if coarse.intervals:
        wire["rng"] = {name: [list(iv) for iv in ivs] for name, ivs in coarse.intervals}
    if coarse.present:
        wire["has"] = sorted(coarse.present)
    return wire


def _fail(what: str) -> SummaryDecodeError:
    return SummaryDecodeError(f"malformed summary: {what}")


def _names(value: Any, what: str) -> frozenset[str]:
    if not isinstance(value, list) or len(value) > MAX_ATTRS or \
            not all(isinstance(name, str) for name in value):
        raise _fail(f"{what} must be a list of at most {MAX_ATTRS} attribute names")
    return frozenset(value)


def _bound(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool)
                             and not math.isnan(value))


def _intervals(value: Any) -> tuple[Interval, ...]:
    if not isinstance(value, list) or not 0 < len(value) <= MAX_INTERVALS:
        raise _fail(f"'rng' holds 1 to {MAX_INTERVALS} intervals per attribute")
    out = []
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2 and all(map(_bound, pair))):
            raise _fail("an interval is [low, high] of numbers or None")
        low, high = pair
        if low is not None and high is not None and low > high:
            raise _fail("an interval's low end exceeds its high end")
        out.append((low, high))
    return tuple(out)


def decode_coarse(data: Any) -> Coarse:
    if not isinstance(data, Mapping) or not set(data) <= {"bloom", "eq", "pairs", "rng", "has"}:
        raise _fail("'c' is a map with keys bloom, eq, pairs, rng, has")
    bits = data.get("bloom")
    if bits is not None and not (isinstance(bits, bytes) and valid_size(len(bits))):
        raise _fail("'bloom' is a power of two of bytes, 64 to 65536")
    pairs = data.get("pairs", [])
    if not isinstance(pairs, list) or len(pairs) > MAX_ATTRS or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(n, str) for n in p)
            and p[0] < p[1] for p in pairs):
        raise _fail("'pairs' is a list of [a, b] attribute names with a < b")
    ranges = data.get("rng", {})
    if not isinstance(ranges, Mapping) or len(ranges) > MAX_ATTRS or \
            not all(isinstance(name, str) for name in ranges):
        raise _fail(f"'rng' maps at most {MAX_ATTRS} attribute names to intervals")
    coarse = Coarse(None if bits is None else Bloom(bits), _names(data.get("eq", []), "'eq'"),
                    frozenset((a, b) for a, b in pairs),
                    tuple(sorted((name, _intervals(ivs)) for name, ivs in ranges.items())),
                    _names(data.get("has", []), "'has'"))
    if coarse.attr_count() > MAX_ATTRS:
        raise _fail(f"more than {MAX_ATTRS} attributes in the coarse part")
    if (coarse.single_attrs or coarse.pair_attrs) and bits is None:
        raise _fail("'eq' and 'pairs' need a 'bloom'")
    return coarse


def decode(data: Any) -> tuple[bool, list[str], Coarse | None]:
    """(matches everything, exact filter texts, coarse part) of a wire summary."""
    if not isinstance(data, Mapping) or not set(data) <= {"all", "f", "c"}:
        raise _fail("a summary is a map with keys all, f, c")
    everything = data.get("all", False)
    if not isinstance(everything, bool):
        raise _fail("'all' is a boolean")
    texts = data.get("f", [])
    if not isinstance(texts, list) or len(texts) > MAX_WIRE_FILTERS or \
            not all(isinstance(text, str) for text in texts):
        raise _fail(f"'f' is a list of at most {MAX_WIRE_FILTERS} filter texts")
    coarse = decode_coarse(data["c"]) if "c" in data else None
    return everything, texts, coarse
