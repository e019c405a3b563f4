"""The array part of the index (equalities and numeric intervals matched in bulk) and
``match_many`` agree with evaluating every filter: skewed values that many filters and
events share, ranges of many widths, ORs, churn through merges and tombstones, and the
values doubles cannot hold."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matching import Index, parse
from matching.arrays import ArrayIndex
from matching.pairs import pair_code, pair_codes
from matching.segments import RECENT_MAX
from tests.matching.strategies import INDEX_KINDS, check_among, churn_and_compare

STRINGS = ["s0", "s1", "s2"]
NUMBERS = ["n0", "n1"]
# Few values: popular ones are in many filters and many events (many matches each).
VALUES = ["v0", "v1", "v2", "v3"]
MAX = 2**63 - 1
# Numbers whose comparisons are delicate: int/float equality, -0.0, integers beyond a
# double's precision (2**53 + 1, 2**63 - 1), infinities and beyond double range.
EDGES = [0, -0.0, 1, 1.0, 2.5, 5, 2**53, 2**53 + 1, float(2**53), MAX, float(MAX),
         -MAX, math.inf, -math.inf, 10**400]
BOUNDS = [0, 1, 2.5, 5, 10, 100, 2**53, MAX - 1, 1e300]


def _literal(value: object) -> str:
    return f"'{value}'" if isinstance(value, str) else repr(value)


@st.composite
def skewed_predicate(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 3)):  # three quarters equalities, on skewed values
        return f"{draw(st.sampled_from(STRINGS))} = '{draw(st.sampled_from(VALUES))}'"
    attr = draw(st.sampled_from(NUMBERS))
    low, high = sorted(draw(st.lists(st.sampled_from(BOUNDS), min_size=2, max_size=2)))
    form = draw(st.integers(0, 4))
    if form == 0:
        return f"{attr} BETWEEN {low!r} AND {high!r}"
    if form == 1:
        return f"{attr} > {low!r} AND {attr} <= {high!r}"
    if form == 2:
        return f"{attr} {draw(st.sampled_from(['>', '>=']))} {low!r}"
    if form == 3:
        return f"{attr} {draw(st.sampled_from(['<', '<=']))} {high!r}"
    return f"{attr} IN ({low!r}, {high!r})"


skewed_conjunction = st.lists(skewed_predicate(), min_size=1, max_size=3).map(" AND ".join)
skewed_filter = st.one_of(
    skewed_conjunction,
    st.tuples(skewed_conjunction, skewed_conjunction).map(lambda p: f"({p[0]}) OR ({p[1]})"),
    # Shapes the arrays do not hold, so that both parts answer together.
    st.sampled_from(["", "s0 <> 'v0'", "NOT (s1 = 'v1')", "n0 IS NULL", "s0 LIKE 'v%'",
                     "s0 = 'v0' AND n0 = 5 AND n0 > 1", "FALSE"]),
)
skewed_value = st.one_of(st.sampled_from(VALUES), st.sampled_from(EDGES), st.booleans(),
                         st.none(), st.just(math.nan),
                         st.floats(-1, 200, allow_nan=False))
skewed_event = st.dictionaries(st.sampled_from(STRINGS + NUMBERS), skewed_value, max_size=5)


def _expected(live: dict, attrs: dict) -> set:
    return {key for key, f in live.items() if f.matches(attrs)}


@settings(max_examples=300, deadline=None)
@given(st.lists(skewed_filter, min_size=1, max_size=20),
       st.lists(skewed_event, min_size=1, max_size=6),
       st.lists(st.integers(0, 19), max_size=12))
def test_skewed_shapes_match_one_by_one_alone_and_in_batches(
        texts: list[str], evs: list[dict], churn: list[int]) -> None:
    for make in INDEX_KINDS:
        index = make()
        churn_and_compare(index, texts, evs, churn)
        assert [bool(index.match(attrs)) for attrs in evs] == [
            bool(m) for m in index.match_many(evs)]


# A batch is matched attribute by attribute (matching.arrays._column): a column of
# strings, or of doubles and integers within 2**53, takes a shortcut; any other mix
# (NaN, integers beyond 2**53, booleans, values of several kinds) the general rule.
COLUMN_KINDS = {
    "str": st.sampled_from(VALUES),
    "double": st.one_of(st.sampled_from([0, -0.0, 1, 1.0, 2.5, 5, 2**53 - 1, -(2**53) + 1,
                                         math.inf, -math.inf, 1e300]),
                        st.floats(-1, 200, allow_nan=False), st.integers(-5, 200)),
    "mixed": skewed_value,
}


@st.composite
def column_batch(draw: st.DrawFn) -> list[dict]:
    """Events whose values of each attribute are of one column kind (or absent)."""
    count = draw(st.integers(1, 8))
    events: list[dict] = [{} for _ in range(count)]
    for attr in STRINGS + NUMBERS:
        values = COLUMN_KINDS[draw(st.sampled_from(sorted(COLUMN_KINDS)))]
        for attrs in events:
            if draw(st.integers(0, 4)):  # absent one time in five
                attrs[attr] = draw(values)
    return events


@settings(max_examples=300, deadline=None)
@given(st.lists(skewed_filter, min_size=1, max_size=20), column_batch(),
       st.lists(st.integers(0, 19), max_size=8))
def test_batches_of_uniform_columns_match_one_by_one(
        texts: list[str], evs: list[dict], churn: list[int]) -> None:
    for make in INDEX_KINDS:
        churn_and_compare(make(), texts, evs, churn)


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1))
def test_pair_codes_of_arrays_are_pair_code(term: int, other: int) -> None:
    codes = pair_codes(np.array([term, other], np.int64), np.array([other, term], np.int64))
    assert codes.tolist() == [pair_code(term, other)] * 2
    assert pair_code(term, other) == pair_code(other, term)


@pytest.mark.parametrize("make", INDEX_KINDS)
def test_many_intervals_through_merges_and_tombstones(make: Callable[[], Index]) -> None:
    """Hundreds of intervals per attribute: recent entries are merged into the sorted
    arrays (a batch merges them first), removals leave tombstones that compaction drops
    and ids that are reused; intervals decided alone and intervals with more to check
    (another attribute's interval) of the same shapes, side by side."""
    rng = random.Random(5)
    texts = []
    for _ in range(600):
        low = rng.uniform(0, 100)
        width = rng.choice([0.5, 3, 40, 1e6])
        shape = rng.randrange(5)
        texts.append(
            f"n0 BETWEEN {low} AND {low + width}" if shape == 0 else
            f"n0 > {low}" if shape == 1 else
            f"n0 <= {low}" if shape == 2 else
            f"n0 >= {low} AND n0 < {low + width} AND s0 = 'v{rng.randrange(3)}'" if shape == 3
            else f"n0 BETWEEN {low} AND {low + width} AND n1 < {rng.uniform(0, 100)}")
    evs = [{"n0": rng.uniform(-5, 110), "s0": f"v{rng.randrange(3)}", "n1": rng.uniform(0, 100)}
           for _ in range(40)]
    evs += [{"n0": 50}, {"n0": math.inf}, {"n0": -math.inf}, {"s0": "v1"}, {}]
    index, live = make(), {}
    for round_ in range(4):
        for key in rng.sample(range(len(texts)), 300):
            if key in live and round_ % 2:
                index.remove(key)
                del live[key]
            else:
                live[key] = parse(texts[key])
                index.add(key, live[key])
        expected = [_expected(live, attrs) for attrs in evs]
        assert [index.match(attrs) for attrs in evs] == expected
        assert [set(m) for m in index.match_many(evs)] == expected
    assert RECENT_MAX < 300  # so merges did happen
    for key in list(live):
        index.remove(key)
    assert (index._bulk is None or index._bulk.arrays.is_clear()) and not len(index)


@pytest.mark.parametrize("make", INDEX_KINDS)
def test_pairs_of_equalities_through_churn(make: Callable[[], Index]) -> None:
    """Conjunctions of two or three equalities (filed under pairs of values, IN lists
    giving several pairs each) on one set of values, then on another, then both mixed:
    the codes of the values no pair names any more are freed and reused for the new
    ones. Every round, the index agrees with evaluating every filter, and nothing is
    left once all are removed."""
    rng = random.Random(9)
    names = ["s0", "s1", "s2", "s3"]

    def conjunction(values: range) -> str:
        def equality(attr: str) -> str:
            if rng.random() < 0.2:
                return f"{attr} IN ('v{rng.choice(values)}', 'v{rng.choice(values)}')"
            return f"{attr} = 'v{rng.choice(values)}'" if rng.random() < 0.9 \
                else f"{attr} = 1"
        return " AND ".join(equality(a) for a in rng.sample(names, rng.choice([2, 2, 3])))

    first = {key: parse(conjunction(range(6))) for key in range(200)}
    second = {key: parse(conjunction(range(6, 12))) for key in range(200, 400)}
    evs = [{a: f"v{rng.randrange(12)}" for a in rng.sample(names, rng.randrange(2, 5))}
           for _ in range(200)] + [{"s0": 1, "s1": 1.0, "s2": "v0"}]
    index, live = make(), {}
    matched = 0
    for add, remove in [(first, {}), (second, first), (first, second),
                        (second, dict(list(first.items())[::2]))]:
        for key in remove:
            index.remove(key)
            del live[key]
        for key, filter in add.items():
            live[key] = filter
            index.add(key, filter)
        expected = [_expected(live, attrs) for attrs in evs]
        assert [index.match(attrs) for attrs in evs] == expected
        assert [set(m) for m in index.match_many(evs)] == expected
        matched += sum(map(len, expected))
    assert matched > 200  # the pairs did match
    for key in list(live):
        index.remove(key)
    assert (index._bulk is None or index._bulk.arrays.is_clear()) and not len(index)


@pytest.mark.parametrize(
    ("text", "hits", "misses"),
    [
        # integers beyond a double: compared exactly, though the arrays hold doubles
        (f"n0 > {2**53}", [{"n0": 2**53 + 1}, {"n0": MAX}, {"n0": 10**400}],
         [{"n0": 2**53}, {"n0": float(2**53)}]),
        (f"n0 BETWEEN 0 AND {2**53} AND s0 = 'a'", [{"n0": 2**53, "s0": "a"}],
         [{"n0": 2**53 + 1, "s0": "a"}]),
        (f"n0 = {MAX}", [{"n0": MAX}], [{"n0": MAX - 1}, {"n0": float(MAX)}]),
        (f"n0 = {MAX} AND s0 = 'a'", [{"n0": MAX, "s0": "a"}], [{"n0": MAX - 1, "s0": "a"}]),
        (f"s0 = 'a' AND n0 = {2**53 + 1}", [{"s0": "a", "n0": 2**53 + 1}],
         [{"s0": "a", "n0": 2**53}, {"s0": "a", "n0": float(2**53)}]),
        # int and float are one number; booleans and strings are not numbers
        ("n0 = 1 AND s0 = 'a'", [{"n0": 1.0, "s0": "a"}],
         [{"n0": True, "s0": "a"}, {"n0": "1", "s0": "a"}]),
        ("n0 > 0.5", [{"n0": 1}, {"n0": math.inf}], [{"n0": True}, {"n0": "9"}, {"n0": None},
                                                      {"n0": math.nan}, {}]),
        ("n0 <= 0", [{"n0": -0.0}, {"n0": 0}, {"n0": -math.inf}], [{"n0": 5e-324}]),
        ("n0 > 0", [{"n0": 5e-324}], [{"n0": -0.0}, {"n0": 0}]),
        ("n0 > 1e308 AND n0 < 1.7e308", [{"n0": 1.5e308}], [{"n0": math.inf}, {"n0": 10**400}]),
        # a bound no double holds (the general index takes the filter); events beyond it
        (f"n0 >= {MAX}", [{"n0": MAX}, {"n0": float(MAX)}, {"n0": 10**400}, {"n0": math.inf}],
         [{"n0": MAX - 1}, {"n0": 2**62}]),
        ("b = TRUE AND s0 = 'a'", [{"b": True, "s0": "a"}], [{"b": 1, "s0": "a"}]),
        # an OR of conjunctions that both hold is one match
        ("(s0 = 'a' AND n0 > 1) OR (s1 = 'b' AND n0 < 9)", [{"s0": "a", "s1": "b", "n0": 5}],
         [{"s0": "a", "s1": "b", "n0": math.nan}]),
        ("s0 IN ('a', 'b') AND s1 IN ('c', 'd') AND n0 BETWEEN 1 AND 2",
         [{"s0": "b", "s1": "c", "n0": 2}], [{"s0": "b", "s1": "e", "n0": 2}]),
    ],
)
@pytest.mark.parametrize("make", INDEX_KINDS)
def test_array_shapes_at_the_edges(make: Callable[[], Index], text: str, hits: list[dict],
                                   misses: list[dict]) -> None:
    check_among(make(), ["s0 = 'a'", "n0 > 3", "n0 BETWEEN 0 AND 1e300",
                         "s0 = 'a' AND s1 = 'c'", "n0 < 1", "s0 <> 'a'"], text, hits, misses)


@pytest.mark.parametrize("make", INDEX_KINDS)
def test_empty_index_and_empty_batches(make: Callable[[], Index]) -> None:
    index = make()
    assert index.match({"a": 1}) == set() and not index.match_many([{}])[0]
    assert index.match_many([]) == []
    assert [len(m) for m in index.match_many([{}, {"a": 1}])] == [0, 0]
    index.add("k", parse("a = 1"))
    assert index.match_many([]) == []
    assert [m.keys() for m in index.match_many([{}, {"a": 1}, {"a": 2}])] == [[], ["k"], []]


@pytest.mark.parametrize("make", INDEX_KINDS)
def test_matches_are_slots_that_name_their_keys(make: Callable[[], Index]) -> None:
    index = make()
    for key in ("x", ("t", 1), None):
        index.add(key, parse("s0 = 'a'"))
    (found,) = index.match_many([{"s0": "a"}])
    assert isinstance(found.slots, np.ndarray) and len(found) == 3 and found
    assert sorted(map(repr, found.keys())) == sorted(map(repr, ["x", ("t", 1), None]))
    index.remove("x")
    index.add("y", parse("s0 = 'b'"))  # reuses the freed slot
    assert index.match({"s0": "a"}) == {("t", 1), None} and index.match({"s0": "b"}) == {"y"}


def test_a_bulk_index_is_kept_from_the_bound_and_dropped_below_half_of_it() -> None:
    rng = random.Random(3)
    texts = [f"s0 = 'v{rng.randrange(3)}' AND n0 BETWEEN {i} AND {i + 30}" for i in range(40)]
    texts += ["s0 LIKE 'v%'", "s1 IS NULL"]  # never array-shaped: the bulk clusters take them
    evs = [{"s0": f"v{rng.randrange(3)}", "n0": rng.uniform(0, 70)} for _ in range(20)]
    index, live = Index(arrays_from=10, bulk_matches=0, batch_matches=0), {}
    for key, text in enumerate(texts):
        live[key] = parse(text)
        index.add(key, live[key])
        assert index._bulk is None or len(index) >= 10  # made at the first batch
        assert [index.match(a) for a in evs] == [_expected(live, a) for a in evs]
        assert [set(m) for m in index.match_many(evs)] == [_expected(live, a) for a in evs]
        assert (index._bulk is not None) == (len(index) >= 10)
        assert [index.match(a) for a in evs] == [_expected(live, a) for a in evs]
    for key in list(live):
        index.remove(key)
        del live[key]
        assert [set(m) for m in index.match_many(evs)] == [_expected(live, a) for a in evs]
        if len(index) < 5:
            assert index._bulk is None
    assert index.matches_everything and not len(index)


def test_batches_go_the_bulk_way_once_events_match_many_filters(calls) -> None:
    """While recent events matched few filters a batch is matched by the clusters (the
    cheaper way then), and by the bulk index once they match many; the answers are
    the same either way."""
    bulk_batches = calls(ArrayIndex, "match_many")
    index, live = Index(arrays_from=0, batch_matches=3), {}
    for key in range(8):
        live[key] = parse(f"s0 = 'a' AND n0 > {key}")
        index.add(key, live[key])
    few, many = [{"s0": "b", "n0": 9}] * 4, [{"s0": "a", "n0": 9}] * 4
    for _ in range(3):
        assert [set(m) for m in index.match_many(few)] == [set()] * 4
    assert bulk_batches == []
    found = []
    for _ in range(16):  # the running mean (weight 1/16) passes 3 at the 8th
        found += [set(m) for m in index.match_many(many)]
    assert found == [_expected(live, many[0])] * 64 and found[0] == set(range(8))
    assert [len(events) for events, in bulk_batches] == [4] * 8  # the clusters first


def test_one_add_works_out_each_predicates_access_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The general index's plan, its pair and pending check, and the bulk index's atoms
    all ask what each predicate implies: one ``add`` works it out once per predicate."""
    import matching.access

    asked: list[object] = []
    real = matching.access.access_of

    def counting(pred):  # type: ignore[no-untyped-def]
        asked.append(pred)
        return real(pred)

    monkeypatch.setattr(matching.access, "access_of", counting)
    index: Index = Index(arrays_from=0)
    index.match_many([{}])  # the bulk copy exists from here on
    index.add("k", parse("s0 = 'a' AND s1 = 'b' AND n0 BETWEEN 1 AND 2 AND n1 > 3"))
    assert len(asked) == 4 and len({id(p) for p in asked}) == 4
    assert index.match({"s0": "a", "s1": "b", "n0": 1.5, "n1": 4}) == {"k"}


@pytest.mark.parametrize("make", INDEX_KINDS)
def test_a_key_refiled_between_one_and_several_conjunctions(make: Callable[[], Index]
                                                            ) -> None:
    """The bulk index keeps the records of a filter of one conjunction apart from those
    of several: a key's filter replaced by an OR and back, one way and the other, each
    time answers as evaluation does, alone and in batches, and once every key is
    removed nothing is left (no record, no count of conjunctions to deduplicate)."""
    texts = ["s0 = 'a' AND s1 = 'b'", "(s0 = 'a' AND s1 = 'b') OR n0 BETWEEN 1 AND 2",
             "s0 = 'a' OR s1 IN ('b', 'c')", "n0 BETWEEN 1 AND 2"]
    evs = [{"s0": "a", "s1": "b"}, {"n0": 1.5}, {"s0": "a"}, {"s1": "c", "n0": 1},
           {"s0": "b", "n0": 3}]
    index, other = make(), parse("s0 = 'a'")
    for text in texts + texts[::-1]:
        live = {"k": parse(text), "other": other}
        for key, f in live.items():
            index.add(key, f)
        expected = [_expected(live, attrs) for attrs in evs]
        assert [index.match(attrs) for attrs in evs] == expected
        assert [set(m) for m in index.match_many(evs)] == expected
    index.remove("k")
    index.remove("other")
    assert [set(m) for m in index.match_many(evs)] == [set()] * len(evs)
    assert (index._bulk is None or index._bulk.arrays.is_clear()) and not len(index)
