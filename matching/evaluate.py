"""Compile filter expressions to closures answering "is this TRUE for these attributes?".

The expression is first put in negation normal form (:mod:`matching.normal`), so every
node only needs its TRUE test: an AND is TRUE when all operands are, an OR when one is,
and each predicate, negated or not, has its own exact TRUE test. Each closure binds its
attribute name, literal and operator once, so a match is a few dictionary lookups and
comparisons instead of a walk over the tree.

Value rules (FILTERS.md): a predicate is never TRUE on a missing attribute or on values
of kinds that do not compare (a string and a number, a boolean and a non-boolean);
booleans compare only with ``=``, ``<>``, ``!=``; ``NaN`` compares with nothing; an
attribute whose value is None (CBOR null) IS NULL.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from matching.ast import (
    MIRRORED,
    And,
    Attr,
    Between,
    Compare,
    Const,
    Expr,
    In,
    IsNull,
    Like,
    Lit,
    Or,
    Value,
    kind_of,
)
from matching.normal import negation_normal_form

Attrs = Mapping[str, Value]
Test = Callable[[Attrs], bool]

_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq, "<>": operator.ne, "!=": operator.ne, "<": operator.lt,
    "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}
EQUALITY_OPERATORS = ("=", "<>", "!=")
_NUMBER = (int, float)
_HASHABLE_VALUE = (str, int, float)


def always(attrs: Attrs) -> bool:
    return True


def never(attrs: Attrs) -> bool:
    return False


def compare_values(op: str, left: object, right: object) -> bool:
    """Whether ``left op right`` is TRUE for two event or literal values."""
    kind = kind_of(left)
    if kind is None or kind != kind_of(right):
        return False
    if kind == "bool" and op not in EQUALITY_OPERATORS:
        return False
    return _OPERATORS[op](left, right)


def _compare_attr_literal(name: str, op: str, literal: Value) -> Test:
    kind, compare = kind_of(literal), _OPERATORS[op]
    if kind == "bool":
        if op not in EQUALITY_OPERATORS:
            return never

        def bool_test(attrs: Attrs) -> bool:
            value = attrs.get(name)
            return value.__class__ is bool and compare(value, literal)
        return bool_test
    if kind == "str":
        def str_test(attrs: Attrs) -> bool:
            value = attrs.get(name)
            return isinstance(value, str) and compare(value, literal)
        return str_test

    def number_test(attrs: Attrs) -> bool:
        value = attrs.get(name)
        # ``value == value`` is False for NaN only: NaN <> 5 must not be TRUE.
        return (isinstance(value, _NUMBER) and value.__class__ is not bool
                and value == value and compare(value, literal))
    return number_test


def _compare(expr: Compare) -> Test:
    left, op, right = expr.left, expr.op, expr.right
    if isinstance(left, Lit) and isinstance(right, Attr):
        left, right, op = right, left, MIRRORED[op]
    if isinstance(left, Attr) and isinstance(right, Lit):
        return _compare_attr_literal(left.name, op, right.value)

    def operand(side: Attr | Lit) -> Callable[[Attrs], object]:
        if isinstance(side, Lit):
            return lambda attrs: side.value
        return lambda attrs: attrs.get(side.name)
    left_value, right_value = operand(left), operand(right)
    return lambda attrs: compare_values(op, left_value(attrs), right_value(attrs))


def _between(expr: Between) -> Test:
    name, low, high = expr.attr.name, expr.low.value, expr.high.value
    assert not isinstance(low, str) and not isinstance(high, str), \
        "the parser gives BETWEEN numeric bounds"
    if expr.negated:
        def outside(attrs: Attrs) -> bool:
            value = attrs.get(name)
            return (isinstance(value, _NUMBER) and value.__class__ is not bool
                    and value == value and not low <= value <= high)
        return outside

    def inside(attrs: Attrs) -> bool:
        value = attrs.get(name)
        return isinstance(value, _NUMBER) and value.__class__ is not bool and \
            low <= value <= high
    return inside


def _in(expr: In) -> Test:
    """``a IN (v1, v2)`` is ``a = v1 OR a = v2``, and ``a NOT IN (...)`` its negation,
    as in SQL: NOT IN is TRUE only when every item compares with the value and none
    equals it, so a list mixing kinds is never TRUE under NOT IN."""
    name = expr.attr.name
    kinds = {kind_of(item.value) for item in expr.values}
    booleans = frozenset(item.value for item in expr.values if kind_of(item.value) == "bool")
    # Strings never equal numbers and 1 == 1.0 in Python: one set serves both kinds.
    others = frozenset(item.value for item in expr.values if kind_of(item.value) != "bool")
    if expr.negated:
        if len(kinds) != 1:
            return never
        (kind,) = kinds
        items = booleans if kind == "bool" else others
        return lambda attrs: (kind_of(value := attrs.get(name)) == kind
                              and value not in items)

    def member(attrs: Attrs) -> bool:
        value = attrs.get(name)
        if value.__class__ is bool:
            return value in booleans
        return isinstance(value, _HASHABLE_VALUE) and value in others
    return member


def like_parts(pattern: str, escape: str | None) -> list[str | None]:
    """The pattern as literal runs (str), ``%`` (None) and ``_`` ("" marks one char).

    The escape character (FILTERS.md, as JMS 2.0 and ActiveMQ read it) makes the ``%``,
    ``_`` or escape character after it literal; before any other character, or at the
    end of the pattern, it is a literal character itself."""
    parts: list[str | None] = []
    literal: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == escape and i + 1 < len(pattern) and pattern[i + 1] in ("%", "_", escape):
            literal.append(pattern[i + 1])
            i += 2
            continue
        if ch in "%_" and ch != escape:
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(None if ch == "%" else "")
        else:
            literal.append(ch)
        i += 1
    if literal:
        parts.append("".join(literal))
    return parts


def _like_matcher(parts: list[str | None]) -> Callable[[str], bool]:
    # The common shapes avoid regular expressions: 'abc', 'abc%', '%abc', '%abc%'.
    texts = [p for p in parts if p]
    if all(p is None or p for p in parts) and len(texts) <= 1:
        text = texts[0] if texts else ""
        shape = tuple(p is None for p in parts)
        if shape == (False,):
            return lambda value: value == text
        if shape == (False, True):
            return lambda value: value.startswith(text)
        if shape == (True, False):
            return lambda value: value.endswith(text)
        if shape in ((True,), (True, False, True)):
            return lambda value: text in value
    regex = re.compile("".join(".*" if p is None else "." if p == "" else re.escape(p)
                               for p in parts), re.DOTALL)
    return lambda value: regex.fullmatch(value) is not None


def _like(expr: Like) -> Test:
    name, negated = expr.attr.name, expr.negated
    hit = _like_matcher(like_parts(expr.pattern, expr.escape))

    def test(attrs: Attrs) -> bool:
        value = attrs.get(name)
        return isinstance(value, str) and hit(value) is not negated
    return test


def _is_null(expr: IsNull) -> Test:
    name = expr.attr.name
    if expr.negated:
        return lambda attrs: attrs.get(name) is not None
    return lambda attrs: attrs.get(name) is None


def _all(tests: Sequence[Test]) -> Test:
    if len(tests) == 2:
        first, second = tests
        return lambda attrs: first(attrs) and second(attrs)

    def every(attrs: Attrs) -> bool:
        return all(test(attrs) for test in tests)
    return every


def _any(tests: Sequence[Test]) -> Test:
    if len(tests) == 2:
        first, second = tests
        return lambda attrs: first(attrs) or second(attrs)

    def some(attrs: Attrs) -> bool:
        return any(test(attrs) for test in tests)
    return some


def _compile_normal(expr: Expr) -> Test:
    if isinstance(expr, (And, Or)):  # a tuple: ``|`` makes a union per call
        tests = [_compile_normal(operand) for operand in expr.operands]
        if len(tests) == 1:
            return tests[0]
        return _all(tests) if isinstance(expr, And) else _any(tests)
    if isinstance(expr, Const):
        return always if expr.value else never
    if isinstance(expr, Compare):
        return _compare(expr)
    if isinstance(expr, Between):
        return _between(expr)
    if isinstance(expr, In):
        return _in(expr)
    if isinstance(expr, Like):
        return _like(expr)
    if isinstance(expr, IsNull):
        return _is_null(expr)
    raise TypeError(f"not a filter expression: {expr!r}")


def compile_expr(expr: Expr) -> Test:
    """A closure that is True exactly when ``expr`` is TRUE for the attributes."""
    return _compile_normal(negation_normal_form(expr))


def compile_conjunction(predicates: Sequence[Expr]) -> Test:
    """A closure that is True when every (negation-normal) predicate is TRUE."""
    if not predicates:
        return always
    return _compile_normal(And(tuple(predicates)) if len(predicates) > 1 else predicates[0])
