"""Index equals one-by-one evaluation; summaries never say no when a filter says yes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matching import Index, Summary, SummaryDecodeError, covers, parse
from tests.matching.strategies import INDEX_KINDS, events, filters


@settings(max_examples=200, deadline=None)
@given(st.lists(filters, max_size=12), st.lists(events, min_size=1, max_size=5),
       st.lists(st.integers(0, 11), max_size=6))
def test_index_match_equals_evaluating_each_filter(texts: list[str], evs: list[dict],
                                                    removed: list[int]) -> None:
    for make in INDEX_KINDS:
        _remove_and_compare(make(), texts, evs, removed)


def _remove_and_compare(index: Index, texts: list[str], evs: list[dict], removed: list[int]
                        ) -> None:
    live = {}
    for key, text in enumerate(texts):
        index.add(key, parse(text))
        live[key] = parse(text)
    for key in removed:
        if key in live:
            index.remove(key)
            del live[key]
    for attrs in evs:
        assert index.match(attrs) == {k for k, f in live.items() if f.matches(attrs)}
    assert [set(m) for m in index.match_many(evs)] == [
        {k for k, f in live.items() if f.matches(attrs)} for attrs in evs]


@settings(max_examples=200, deadline=None)
@given(st.lists(filters, max_size=10), st.lists(filters, max_size=10), events,
       st.integers(1, 6))
def test_summaries_have_no_false_negatives(first: list[str], second: list[str], attrs: dict,
                                           bound: int) -> None:
    a, b = Summary.of(first, max_filters=bound), Summary.of(second, max_filters=bound)
    merged = a.merge(b)
    for summary, texts in ((a, first), (b, second), (merged, first + second)):
        wanted = any(parse(t).matches(attrs) for t in texts)
        for s in (summary, Summary.from_wire(summary.to_wire(), max_filters=bound)):
            if wanted:
                assert s.may_match(attrs)


@pytest.mark.parametrize(
    ("text", "hit", "miss"),
    [
        ("n BETWEEN 900.5 AND 906", {"n": 902.0}, {"n": 906.5}),
        ("n > 5", {"n": 6}, {"n": 5}),
        ("n >= 5", {"n": 5}, {"n": 4.9}),
        ("5 > n", {"n": 4}, {"n": 5}),
        ("s = 'a'", {"s": "a"}, {"s": "b"}),
        ("s IN ('a', 1)", {"s": 1.0}, {"s": True}),
        ("s = 'a' AND n < 3", {"s": "a", "n": 2}, {"s": "a", "n": 3}),
        ("s = 'a' AND t = 'b'", {"s": "a", "t": "b"}, {"s": "a", "t": "c"}),
        ("n > 1 AND n < 3", {"n": 2}, {"n": 3}),
        ("s LIKE 'a%' AND n = 1", {"s": "ab", "n": 1}, {"s": "b", "n": 1}),
        ("s LIKE 'a%'", {"s": "ab"}, {"s": "b"}),
    ],
)
@pytest.mark.parametrize("make", INDEX_KINDS)
def test_each_kind_of_placement_matches_exactly(make: Callable[[], Index], text: str, hit: dict,
                                                miss: dict) -> None:
    index = make()
    index.add("k", parse(text))
    assert index.match(hit) == {"k"}
    assert index.match(miss) == set()
    index.remove("k")
    assert index.match(hit) == set()


def test_covering_keeps_summaries_small() -> None:
    s = Summary.of(["x > 5", "x > 10", "x >= 5", "sym = 'A'", "sym = 'A' AND y < 3"])
    assert s.filters == {"x >= 5", "sym = 'A'"}
    assert Summary.of(["x = 1", ""]).matches_all
    assert covers(parse("a = 1"), parse("a = 1 AND b = 2"))
    assert not covers(parse("a = 1 AND b = 2"), parse("a = 1"))


def test_coarse_summaries_stay_bounded_and_useful() -> None:
    texts = [f"sym = 'S{i}' AND px > {i}" for i in range(500)]
    s = Summary.of(texts, max_filters=32)
    assert s.coarse and not s.matches_all
    assert s.coarse is not None
    assert len(s.coarse.bloom.bits) == s.bloom_bytes  # one fixed-size Bloom whatever the count
    bigger = Summary.of(texts + [f"sym = 'U{i}'" for i in range(500)], max_filters=32)
    assert bigger.coarse is not None and len(bigger.coarse.bloom.bits) == s.bloom_bytes
    assert all(s.may_match({"sym": f"S{i}"}) for i in range(500))
    false_positives = sum(s.may_match({"sym": f"T{i}"}) for i in range(2000))
    assert false_positives < 40  # well under 1% expected: 500 values, 16384 bits


def test_equal_summaries_compare_equal_and_changes_show() -> None:
    assert Summary.of(["a = 1", "b = 2"]) == Summary.of(["b = 2", "a = 1"])
    assert Summary.of(["a = 1"]) != Summary.of(["a = 2"])


@pytest.mark.parametrize(
    "wire",
    [[], {"f": "a = 1"}, {"f": ["a = "]}, {"zz": 1}, {"eq": {"a": b"12"}},
     {"rng": {"a": [[3, 1]]}}, {"rng": {"a": [["x", 1]]}}, {"f": [1]}],
)
def test_malformed_wire_summaries_are_refused(wire: object) -> None:
    with pytest.raises(SummaryDecodeError):
        Summary.from_wire(wire)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.text(max_size=5) | st.binary(max_size=4),
                    lambda i: st.lists(i, max_size=3) | st.dictionaries(st.text(max_size=4), i,
                                                                        max_size=3),
                    max_leaves=8))
def test_random_garbage_raises_only_decode_errors(wire: object) -> None:
    with contextlib.suppress(SummaryDecodeError):
        Summary.from_wire(wire)
        Summary.from_wire(wire)


def test_a_summary_stays_bounded_by_bytes_whatever_names_its_filters_use() -> None:
    """Past max_filters a summary is coarsened; a coarse part whose attribute names pass
    8 KiB is dropped for "everything" (never refused): its wire size stays bounded."""
    from overlay.core.framing import encode_map

    short = Summary.of([f"a{i} = 1" for i in range(100)])
    assert short.coarse is not None and not short.matches_all
    long_names = Summary.of([f"a{i}{'x' * 200} = 1" for i in range(100)])
    assert long_names.matches_all
    assert len(encode_map(long_names.to_wire())) < 64
    assert len(encode_map(short.to_wire())) < 16384
