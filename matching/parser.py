"""Recursive-descent parser of FILTERS.md, and the :class:`Filter` it returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from matching.ast import (
    COMPARISONS,
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
    Not,
    Or,
    Value,
    kind_of,
)
from matching.errors import (
    FilterSyntaxError,
    FilterTooDeepError,
    FilterTooLongError,
    InListTooLongError,
)
from matching.evaluate import Test, always, compile_expr
from matching.lexer import Token, tokenize

#: Limits of a filter a client writes (FILTERS.md).
MAX_FILTER_CHARS = 4096
MAX_DEPTH = 64
MAX_IN_ITEMS = 1024
#: Limits of a canonical text (``str(Filter)``), which nodes exchange in summaries: it
#: may be longer than what the client wrote (``1e15`` is ``1000000000000000.0``, list
#: items are joined by ``", "``: at most about 4.5 times) and deeper (an AND inside an
#: OR gets parentheses the client needed not write: at most twice, plus one). A text
#: within the client's limits always has a canonical text within these.
MAX_CANONICAL_CHARS = 8 * MAX_FILTER_CHARS
MAX_CANONICAL_DEPTH = 2 * MAX_DEPTH + 2


@dataclass(frozen=True)
class Filter:
    """A parsed filter; ``expr`` None is the empty filter, which matches every event.

    Equal filters have equal canonical texts (``str``), which parse back to them."""

    expr: Expr | None
    _is_true: Test = field(init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_is_true", always if self.expr is None
                           else compile_expr(self.expr))

    def matches(self, attrs: Mapping[str, Value]) -> bool:
        """True only when the whole filter is TRUE (not FALSE, not UNKNOWN)."""
        return self._is_true(attrs)

    def __str__(self) -> str:
        return "" if self.expr is None else str(self.expr)

    def __reduce__(self) -> tuple[Any, ...]:
        # The compiled closure does not pickle; the canonical text does.
        return (parse, (str(self),))


def _flatten(operands: list[Expr], kind: type[And] | type[Or]) -> tuple[Expr, ...]:
    """AND and OR are associative: ``a AND (b AND c)`` is one three-way AND, so that
    the canonical text (which needs no parentheses there) parses back to an equal tree."""
    flat: list[Expr] = []
    for operand in operands:
        flat.extend(operand.operands if isinstance(operand, kind) else (operand,))
    return tuple(flat)


class _Parser:
    def __init__(self, text: str, max_depth: int) -> None:
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0
        self.max_depth = max_depth

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def is_kw(self, word: str) -> bool:
        return self.tok.kind == "kw" and self.tok.text == word

    def is_op(self, op: str) -> bool:
        return self.tok.kind == "op" and self.tok.text == op

    def expect_kw(self, word: str, after: str) -> None:
        if not self.is_kw(word):
            self.fail(f"{word} after {after}")
        self.take()

    def expect_op(self, op: str, after: str) -> None:
        if not self.is_op(op):
            self.fail(f"'{op}' after {after}")
        self.take()

    def fail(self, expected: str) -> None:
        raise FilterSyntaxError(f"expected {expected}, found {self.tok.describe()}", self.tok.pos)

    def nest(self, pos: int) -> None:
        self.depth += 1
        if self.depth > self.max_depth:
            raise FilterTooDeepError(f"expected at most {self.max_depth} levels of parentheses "
                                     f"and NOT, found one more", pos)

    # or_expr := and_expr (OR and_expr)*
    def or_expr(self) -> Expr:
        operands = [self.and_expr()]
        while self.is_kw("OR"):
            self.take()
            operands.append(self.and_expr())
        return operands[0] if len(operands) == 1 else Or(_flatten(operands, Or))

    def and_expr(self) -> Expr:
        operands = [self.not_expr()]
        while self.is_kw("AND"):
            self.take()
            operands.append(self.not_expr())
        return operands[0] if len(operands) == 1 else And(_flatten(operands, And))

    def not_expr(self) -> Expr:
        if self.is_kw("NOT"):
            tok = self.take()
            self.nest(tok.pos)
            operand = self.not_expr()
            self.depth -= 1
            return Not(operand)
        return self.primary()

    def primary(self) -> Expr:
        tok = self.tok
        if self.is_op("("):
            self.take()
            self.nest(tok.pos)
            expr = self.or_expr()
            self.depth -= 1
            self.expect_op(")", "the parenthesized expression")
            return expr
        if tok.kind == "kw" and tok.text in ("TRUE", "FALSE"):
            nxt = self.tokens[self.i + 1]
            if not (nxt.kind == "op" and nxt.text in COMPARISONS):
                self.take()
                return Const(tok.text == "TRUE")
        return self.predicate()

    def operand(self, after: str) -> Attr | Lit:
        tok = self.tok
        if tok.kind == "ident":
            self.take()
            return Attr(tok.text)
        return Lit(self.literal(after))

    def literal(self, after: str) -> Value:
        tok = self.tok
        if tok.kind in ("num", "str"):
            self.take()
            return tok.value  # type: ignore[return-value]  # num and str tokens carry a Value
        if tok.kind == "kw" and tok.text in ("TRUE", "FALSE"):
            self.take()
            return tok.text == "TRUE"
        self.fail(f"a literal after {after}")
        raise AssertionError  # unreachable: fail raises

    def number(self, after: str) -> Lit:
        if self.tok.kind != "num":
            self.fail(f"a number after {after}")
        return Lit(self.take().value)  # type: ignore[arg-type]  # a num token carries a number

    def predicate(self) -> Expr:
        start = self.tok
        if start.kind not in ("ident", "num", "str", "kw") or (
            start.kind == "kw" and start.text not in ("TRUE", "FALSE")
        ):
            self.fail("a predicate")
        left = self.operand("the start of a predicate")
        if isinstance(left, Attr):
            negated = False
            if self.is_kw("NOT") and self.tokens[self.i + 1].kind == "kw" and \
                    self.tokens[self.i + 1].text in ("BETWEEN", "IN", "LIKE"):
                self.take()
                negated = True
            if self.is_kw("BETWEEN"):
                self.take()
                low = self.number("BETWEEN")
                self.expect_kw("AND", "the lower bound of BETWEEN")
                return Between(left, low, self.number("AND"), negated)
            if self.is_kw("IN"):
                return self.in_list(left, negated)
            if self.is_kw("LIKE"):
                return self.like(left, negated)
            if self.is_kw("IS"):
                self.take()
                is_not = self.is_kw("NOT")
                if is_not:
                    self.take()
                self.expect_kw("NULL", "IS NOT" if is_not else "IS")
                return IsNull(left, is_not)
        if not (self.tok.kind == "op" and self.tok.text in COMPARISONS):
            self.fail(f"a comparison operator after {self.tokens[self.i - 1].describe()}")
        op_tok = self.take()
        right = self.operand(f"'{op_tok.text}'")
        if isinstance(left, Lit) and isinstance(right, Lit):
            raise FilterSyntaxError("expected an attribute on one side of the comparison, "
                                    "found two literals (a comparison needs an attribute)",
                                    start.pos)
        for side in (left, right):
            if isinstance(side, Lit) and kind_of(side.value) == "bool" and op_tok.text not in (
                "=", "<>", "!="
            ):
                raise FilterSyntaxError(f"expected =, <> or != with a boolean (booleans "
                                        f"support only those), found '{op_tok.text}'",
                                        op_tok.pos)
        return Compare(left, op_tok.text, right)

    def in_list(self, attr: Attr, negated: bool) -> Expr:
        self.take()
        self.expect_op("(", "IN")
        values = [Lit(self.literal("'('"))]
        while self.is_op(","):
            self.take()
            if len(values) == MAX_IN_ITEMS:
                raise InListTooLongError(f"expected at most {MAX_IN_ITEMS} items in an IN "
                                         f"list, found item {MAX_IN_ITEMS + 1}", self.tok.pos)
            values.append(Lit(self.literal("','")))
        self.expect_op(")", "the IN list")
        return In(attr, tuple(values), negated)

    def like(self, attr: Attr, negated: bool) -> Expr:
        self.take()
        if self.tok.kind != "str":
            self.fail("a string after LIKE")
        pattern_tok = self.take()
        pattern = str(pattern_tok.value)
        escape = None
        if self.is_kw("ESCAPE"):
            self.take()
            tok = self.tok
            if tok.kind != "str":
                self.fail("a string after ESCAPE")
            escape = str(self.take().value)
            if len(escape) != 1:
                raise FilterSyntaxError(f"expected exactly one character after ESCAPE, found "
                                        f"{len(escape)}", tok.pos)
            if escape in ("%", "_"):
                raise FilterSyntaxError(f"expected an escape character other than the "
                                        f"wildcards % and _, found {escape!r}", tok.pos)
        return Like(attr, pattern, escape, negated)


def parse(text: str, *, canonical: bool = False) -> Filter:
    """Parse a filter (FILTERS.md); raises FilterSyntaxError with ``pos``.

    ``canonical``: ``text`` is a canonical text a node made (a peer's summary), held to
    the larger bounds such texts need (``MAX_CANONICAL_CHARS``, ``MAX_CANONICAL_DEPTH``)
    instead of the limits of what a client writes."""
    if not isinstance(text, str):
        raise TypeError("a filter is text")
    max_chars = MAX_CANONICAL_CHARS if canonical else MAX_FILTER_CHARS
    if len(text) > max_chars:
        raise FilterTooLongError(f"expected at most {max_chars} characters, found "
                                 f"{len(text)}", max_chars)
    parser = _Parser(text, MAX_CANONICAL_DEPTH if canonical else MAX_DEPTH)
    if parser.tok.kind == "end":
        return Filter(None)
    expr = parser.or_expr()
    if parser.tok.kind != "end":
        parser.fail("AND, OR or the end of the filter")
    return Filter(expr)
