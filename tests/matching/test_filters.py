"""The filter language of FILTERS.md: examples, three-valued logic, errors, limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from matching import FilterLimitError, FilterSyntaxError, parse
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
