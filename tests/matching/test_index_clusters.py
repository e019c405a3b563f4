"""The index's clusters (equality pairs, pending interval checks, stabbing tables) agree
with evaluating every filter, through adding, removing and adding back."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matching import Index, parse
from tests.matching.strategies import INDEX_KINDS, check_among, churn_and_compare

ATTRS = ["a", "b", "c", "n", "m"]
# Bounds and event values meet exactly (1, 1.0, 2**60 and its neighbours, infinities),
# so that inclusive and exclusive ends, int/float equality and integers beyond a
# double's precision are all exercised.
BIG = 2**60
NUMBERS = [-3, 0, -0.0, 1, 1.0, 2.5, 7, BIG, BIG + 1, float(BIG), 1e308, (1 << 63) - 1,
           -(1 << 63)]
STRINGS = ["x", "y", "1"]


def _literal(value: object) -> str:
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return repr(value)


number = st.sampled_from(NUMBERS)
scalar = st.one_of(number, st.sampled_from(STRINGS), st.booleans())


@st.composite
def predicate(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(ATTRS))
    kind = draw(st.integers(0, 6))
    if kind <= 1:  # equalities dominate, as in real workloads: pairs form
        return f"{name} = {_literal(draw(scalar))}"
    if kind == 2:
        items = draw(st.lists(scalar, min_size=1, max_size=3))
        return f"{name} IN ({', '.join(map(_literal, items))})"
    if kind == 3:
        op = draw(st.sampled_from(["<", "<=", ">", ">="]))
        return f"{name} {op} {_literal(draw(number))}"
    if kind == 4:
        low, high = sorted(draw(st.lists(number, min_size=2, max_size=2)))
        return f"{name} BETWEEN {_literal(low)} AND {_literal(high)}"
    if kind == 5:
        return f"{name} {draw(st.sampled_from(['>', '>=']))} {_literal(draw(number))} AND " \
               f"{name} {draw(st.sampled_from(['<', '<=']))} {_literal(draw(number))}"
    return f"{name} LIKE '{draw(st.sampled_from(['x', 'x%', '1']))}'"


conjunction = st.lists(predicate(), min_size=1, max_size=4).map(" AND ".join)
filters = st.one_of(conjunction, st.tuples(conjunction, conjunction).map(
    lambda pair: f"({pair[0]}) OR ({pair[1]})"))
events = st.dictionaries(st.sampled_from(ATTRS), st.one_of(scalar, st.none(),
                                                           st.just(math.nan)), max_size=5)


def _expected(live: dict, attrs: dict) -> set:
    return {key for key, f in live.items() if f.matches(attrs)}


def _assert_empty(index: Index) -> None:
    """Nothing is left behind once every filter is gone."""
    bulk = index._bulk
    for clusters in [index._clusters] + ([] if bulk is None else [bulk.rest]):
        assert not clusters._equal and not clusters._pairs and not clusters._present
        assert not clusters._ranged and not any(clusters._ranges.values())
        assert clusters._residual.direct is None and clusters._residual.pending is None
        assert clusters._always.direct is None and clusters._always.pending is None
        assert clusters._selective == 0 and clusters._not_everywhere == 0
        assert not len(clusters)
    if bulk is not None:
        assert bulk.arrays.is_clear() and not bulk.slots
        assert sorted(bulk.free) == list(range(len(bulk.free)))
    assert index.matches_everything


@settings(max_examples=300, deadline=None)
@given(st.lists(filters, min_size=1, max_size=15), st.lists(events, min_size=1, max_size=6),
       st.lists(st.integers(0, 14), max_size=10))
def test_clusters_match_one_by_one_through_churn(texts: list[str], evs: list[dict],
                                                 churn: list[int]) -> None:
    for make in INDEX_KINDS:
        index = make()
        live = churn_and_compare(index, texts, evs, churn)
        for key in list(live):
            index.remove(key)
        _assert_empty(index)


@pytest.mark.parametrize(
    ("text", "hits", "misses"),
    [
        # a pair cluster: both equalities hold, on either attribute order
        ("b = 'y' AND a = 'x'", [{"a": "x", "b": "y"}], [{"a": "x"}, {"a": "x", "b": "x"}]),
        # pair keys across int and float, and never booleans
        ("a = 1 AND b IN (2, TRUE)", [{"a": 1.0, "b": 2}, {"a": 1, "b": True}],
         [{"a": True, "b": 2}, {"a": 1, "b": 1}]),
        # a pair with a pending interval, and a third equality checked by closure
        ("a = 'x' AND b = 'y' AND n > 2 AND c = 'z'", [{"a": "x", "b": "y", "c": "z", "n": 3}],
         [{"a": "x", "b": "y", "c": "z", "n": 2}, {"a": "x", "b": "y", "n": 3}]),
        # an equality with a merged interval on another attribute, inclusive ends
        ("a = 'x' AND n >= 1 AND n <= 2", [{"a": "x", "n": 1}, {"a": "x", "n": 2.0}],
         [{"a": "x", "n": 2.5}, {"a": "x", "n": "1"}, {"a": "x", "n": True}]),
        # a range access with a pending interval, exclusive ends
        ("n > 1 AND m < 5", [{"n": 1.5, "m": 4}], [{"n": 1, "m": 4}, {"n": 2, "m": 5.0}]),
        # integers beyond a double's precision are compared exactly
        (f"n > {BIG}", [{"n": BIG + 1}], [{"n": BIG}, {"n": float(BIG)}]),
        (f"n BETWEEN {BIG + 1} AND {BIG + 2}", [{"n": BIG + 1}, {"n": BIG + 2}],
         [{"n": BIG}, {"n": BIG + 3}]),
        (f"a = 'x' AND n < {BIG + 1}", [{"a": "x", "n": BIG}], [{"a": "x", "n": BIG + 1}]),
        (f"n BETWEEN 1 AND {(1 << 63) - 1}", [{"n": (1 << 63) - 1}, {"n": 1}, {"n": 9.2e18}],
         [{"n": math.inf}, {"n": 9.3e18}]),
        ("n BETWEEN -0.0 AND 0", [{"n": 0}, {"n": -0.0}], [{"n": 1e-300}]),
        ("n < 1 AND m BETWEEN 2 AND 3", [{"n": -math.inf, "m": 2}], [{"n": math.nan, "m": 2}]),
        # a bounded range with a pending interval shares its group with direct ones
        ("n > 1 AND n < 5 AND m >= 0", [{"n": 4.5, "m": 0}],
         [{"n": 5, "m": 0}, {"n": 1, "m": 0}, {"n": 3, "m": -1}]),
        ("n BETWEEN 1 AND 5 AND m >= 0", [{"n": 5, "m": 0}, {"n": 1, "m": 0}],
         [{"n": 5.5, "m": 0}]),
    ],
)
@pytest.mark.parametrize("make", INDEX_KINDS)
def test_cluster_shapes(make: Callable[[], Index], text: str, hits: list[dict],
                        misses: list[dict]) -> None:
    index = make()
    background = check_among(
        index, ["c = 'unrelated'", "n > 1.5 AND n < 4", "n BETWEEN 0 AND 10", "n > 0 AND n < 5",
                "m < 3 AND n > 0", "n BETWEEN 2 AND 4 AND m < 1"], text, hits, misses)
    index.remove("k")
    for attrs in hits:
        assert index.match(attrs) == _expected(background, attrs)
    for key in background:
        index.remove(key)
    _assert_empty(index)


@pytest.mark.parametrize("make", INDEX_KINDS)
def test_falsy_and_odd_keys_survive_removal(make: Callable[[], Index]) -> None:
    index = make()
    keys = [0, None, "", (), False]  # False == 0: it replaces key 0
    for key in keys:
        index.add(key, parse("a = 'x' AND b = 'y'"))
    assert index.match({"a": "x", "b": "y"}) == {0, None, "", ()}
    index.remove(None)
    index.remove(0)
    assert index.match({"a": "x", "b": "y"}) == {"", ()}
    index.remove("")
    index.remove(())
    _assert_empty(index)


@pytest.mark.parametrize("make", INDEX_KINDS)
def test_an_index_knows_when_every_filter_it_holds_is_true_for_every_event(
        make: Callable[[], Index]) -> None:
    index = make()
    assert index.matches_everything and index.match({"a": 1}) == set()
    index.add(1, parse(""))
    index.add(2, parse("TRUE"))
    assert index.matches_everything and index.match({"a": 1}) == {1, 2}
    index.add(3, parse("a = 1"))
    assert not index.matches_everything
    assert index.match({"a": 2}) == {1, 2} and index.match({"a": 1}) == {1, 2, 3}
    index.add(4, parse("FALSE"))  # filed nowhere: never TRUE, so not TRUE for everything
    index.remove(3)
    assert not index.matches_everything and index.match({"a": 1}) == {1, 2}
    index.add(4, parse(""))  # replaced by a filter that is always TRUE
    assert index.matches_everything and index.match({}) == {1, 2, 4}
    for key in (1, 2, 4):
        index.remove(key)
    _assert_empty(index)
