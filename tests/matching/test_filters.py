"""The filter language of FILTERS.md: examples, three-valued logic, errors, limits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matching import FilterLimitError, FilterSyntaxError, parse
from matching.evaluate import compile_conjunction
from matching.normal import conjunctions_of, negation_normal_form
from tests.matching.strategies import events, filters

CASES = [
    # (filter, event, matches)
    ("price > 100 AND sym IN ('ACME', 'INIT')", {"price": 101, "sym": "ACME"}, True),
    ("price > 100 AND sym IN ('ACME', 'INIT')", {"price": 100, "sym": "ACME"}, False),
    ("NOT (region LIKE 'eu-%') OR urgent = TRUE", {"region": "us-1"}, True),
    ("NOT (region LIKE 'eu-%') OR urgent = TRUE", {"region": "eu-1", "urgent": True}, True),
    ("NOT (region LIKE 'eu-%') OR urgent = TRUE", {"region": "eu-1"}, False),
    ("temp BETWEEN -5 AND 30.5 AND sensor.kind IS NOT NULL", {"temp": -5, "sensor.kind": "t"},
     True),
    ("temp BETWEEN -5 AND 30.5 AND sensor.kind IS NOT NULL", {"temp": 30.6, "sensor.kind": 1},
     False),
    ("", {}, True),
    ("NOT x = 1", {}, False),  # NOT UNKNOWN is UNKNOWN
    ("x = 1 OR TRUE", {}, True),  # UNKNOWN OR TRUE
    ("NOT (x = 1 AND FALSE)", {}, True),  # UNKNOWN AND FALSE is FALSE
    ("x < 5", {"x": "3"}, False),  # string vs number: UNKNOWN
    ("NOT x < 5", {"x": "3"}, False),
    ("x = 1", {"x": True}, False),  # booleans are not numbers
    ("x = TRUE", {"x": True}, True),
    ("x <> TRUE", {"x": False}, True),
    ("x = 2", {"x": 2.0}, True),  # int and float compare numerically
    ("x > 1e1", {"x": 11}, True),
    ("s < 'b'", {"s": "a"}, True),  # code point order
    ("s < 'B'", {"s": "a"}, False),
    ("Name = 'a'", {"name": "a"}, False),  # attribute names are case-sensitive
    ("x not in (1, 2) and y like 'a\\_%' escape '\\'", {"x": 3, "y": "a_z"}, True),
    ("y LIKE 'a\\_%' ESCAPE '\\'", {"y": "abz"}, False),
    ("y LIKE '_b%'", {"y": "ab"}, True),
    ("y LIKE '%.%'", {"y": "ab"}, False),  # regex characters are literal
    ("q = 'it''s'", {"q": "it's"}, True),
    ("x IS NULL", {}, True),
    ("x IS NULL", {"x": 0}, False),
    ("x NOT BETWEEN 1 AND 3", {"x": 4}, True),
    ("x IN ('1')", {"x": 1}, False),
    ("NOT x IN ('1')", {"x": 1}, False),  # no comparable item: UNKNOWN
    ("5 < x", {"x": 6}, True),
]


@pytest.mark.parametrize(("text", "attrs", "expected"), CASES)
def test_examples_and_edge_cases(text: str, attrs: dict, expected: bool) -> None:
    assert parse(text).matches(attrs) is expected


@pytest.mark.parametrize(
    ("text", "pos", "message"),
    [
        ("price > ", 8, "expected a literal after '>', found the end of the filter"),
        ("a = = 1", 4, "expected a literal after '='"),
        ("(a = 1", 6, "expected ')'"),
        ("a = 1 b", 6, "expected AND, OR or the end of the filter, found 'b'"),
        ("1 = 2", 0, "needs an attribute"),
        ("a < TRUE", 2, "booleans support only"),
        ("a BETWEEN 'x' AND 2", 10, "expected a number after BETWEEN"),
        ("a IN ()", 6, "expected a literal"),
        ("a LIKE 5", 7, "expected a string after LIKE"),
        ("a LIKE 'x' ESCAPE 'ab'", 18, "exactly one character"),
        ("a LIKE 'x' ESCAPE ''", 18, "exactly one character"),
        ("a LIKE 'x' ESCAPE '%'", 18, "other than the wildcards"),
        ("a LIKE 'x' ESCAPE '_'", 18, "other than the wildcards"),
        ("TRUE >= a", 5, "booleans support only"),
        ("a = 9223372036854775808", 4, "within -2^63..2^63-1"),
        ("a IN (1, -9223372036854775809)", 9, "within -2^63..2^63-1"),
        ("a = 1e999", 4, "expected a finite number"),
        ("a = 'open", 4, "unterminated string"),
        ("a = #", 4, "unexpected character"),
        ("a IS 3", 5, "expected NULL after IS"),
        ("AND", 0, "expected a predicate"),
        ("a = 1x", 4, "expected a number, found"),
    ],
)
def test_errors_name_what_was_expected_and_where(text: str, pos: int, message: str) -> None:
    with pytest.raises(FilterSyntaxError) as err:
        parse(text)
    assert err.value.pos == pos
    assert message in str(err.value)
    assert str(err.value).endswith(f"at {pos}")


def test_limits_have_their_own_errors() -> None:
    with pytest.raises(FilterLimitError, match="at most 4096 characters"):
        parse("a = 1 OR " * 600 + "a = 1")
    with pytest.raises(FilterLimitError, match="at most 64 levels") as err:
        parse("(" * 65 + "a = 1" + ")" * 65)
    assert err.value.pos == 64
    parse("(" * 64 + "a = 1" + ")" * 64)  # exactly at the limit is fine
    with pytest.raises(FilterLimitError, match="at most 1024 items in an IN list"):
        parse("a IN (" + ", ".join(["1"] * 1025) + ")")
    parse("a IN (" + ", ".join(["1"] * 1024) + ")")


def _docs_table(heading: str) -> list[list[str]]:
    """The rows of the first table after ``heading`` in docs/FILTERS.md."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "FILTERS.md").read_text()
    rows = []
    for line in text[text.index(heading):].splitlines()[1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # past the header and its rule


def _cell_values(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


def test_like_escape_examples_of_the_docs_hold() -> None:
    """FILTERS.md's LIKE/ESCAPE table, row by row: the filter, what it matches and what
    it does not (JMS 2.0's reading, as ActiveMQ 5 and Artemis take it)."""
    rows = _docs_table("### LIKE and ESCAPE")
    assert len(rows) >= 6
    for filter_cell, hits, misses in rows:
        [text] = _cell_values(filter_cell)
        f = parse(text)
        for value in _cell_values(hits):
            assert f.matches({"a": value}), (text, value)
        for value in _cell_values(misses):
            assert not f.matches({"a": value}), (text, value)


def test_integer_literals_hold_64_bits_at_their_edges() -> None:
    assert parse(f"a = {(1 << 63) - 1}").matches({"a": (1 << 63) - 1})
    assert parse(f"a = {-(1 << 63)}").matches({"a": -(1 << 63)})
    assert not parse(f"a = {(1 << 63) - 1}").matches({"a": float((1 << 63) - 1)})  # exact


def test_keywords_are_case_insensitive() -> None:
    assert parse("a between 1 and 2 or b is not null") == parse(
        "a BETWEEN 1 AND 2 OR b IS NOT NULL")


@settings(max_examples=300, deadline=None)
@given(filters, events)
def test_canonical_text_round_trips(text: str, attrs: dict) -> None:
    f = parse(text)
    again = parse(str(f))
    assert again == f
    assert again.matches(attrs) is f.matches(attrs)


@settings(max_examples=300, deadline=None)
@given(filters, st.lists(events, min_size=1, max_size=4))
def test_normal_forms_are_exact_and_keep_a_tree_already_in_form(text: str, evs: list[dict]
                                                                ) -> None:
    """The DNF is TRUE exactly when the filter is (its shortcut for an AND of predicates
    included), and the negation normal form of a tree already in that form is that
    very tree (the index relies on it not to copy every filter it files)."""
    f = parse(text)
    if f.expr is None:
        assert conjunctions_of(None) == [()]
        return
    normal = negation_normal_form(f.expr)
    assert negation_normal_form(normal) is normal
    conjunctions = conjunctions_of(f.expr)
    if conjunctions is None:  # beyond the bound: the index files such a filter whole
        return
    tests = [compile_conjunction(conjunction) for conjunction in conjunctions]
    for attrs in evs:
        assert any(test(attrs) for test in tests) == f.matches(attrs)
