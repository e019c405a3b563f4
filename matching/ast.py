"""Filter expressions: frozen, hashable nodes whose ``str`` is their canonical text.

Evaluation lives in :mod:`matching.evaluate`, which compiles these trees to closures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Value = str | int | float | bool
Kind = str  # "num", "str" or "bool"

COMPARISONS = ("=", "<>", "!=", "<", "<=", ">", ">=")
#: The comparison that is TRUE exactly when ``op`` is FALSE (and UNKNOWN when it is).
NEGATED_COMPARISON = {"=": "<>", "<>": "=", "!=": "=", "<": ">=", "<=": ">", ">": "<=",
                      ">=": "<"}
#: ``lit op attr`` is ``attr MIRRORED[op] lit``.
MIRRORED = {"=": "=", "<>": "<>", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def kind_of(value: object) -> Kind | None:
    """'num', 'str' or 'bool'; None for what compares with nothing (NaN, None, others).

    Booleans are tested first because Python's ``bool`` is an ``int``: here they are
    never numbers.
    """
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "num"
    if isinstance(value, float):
        return None if math.isnan(value) else "num"
    if isinstance(value, str):
        return "str"
    return None


def literal_text(value: Value) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


@dataclass(frozen=True)
class Attr:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class Lit:
    value: Value

    def __str__(self) -> str:
        return literal_text(self.value)

    # 1, 1.0 and TRUE are equal in Python but are different literals (and texts) here.
    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Lit) and type(self.value) is type(other.value)
                and self.value == other.value)

    def __hash__(self) -> int:
        return hash((type(self.value), self.value))


Operand = Attr | Lit


class Expr:
    """Base of the expression nodes."""


@dataclass(frozen=True)
class Const(Expr):
    value: bool

    def __str__(self) -> str:
        return "TRUE" if self.value else "FALSE"


@dataclass(frozen=True)
class Compare(Expr):
    left: Operand
    op: str
    right: Operand

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


@dataclass(frozen=True)
class Between(Expr):
    attr: Attr
    low: Lit
    high: Lit
    negated: bool = False

    def __str__(self) -> str:
        neg = "NOT " if self.negated else ""
        return f"{self.attr} {neg}BETWEEN {self.low} AND {self.high}"


@dataclass(frozen=True)
class In(Expr):
    attr: Attr
    values: tuple[Lit, ...]
    negated: bool = False

    def __str__(self) -> str:
        neg = "NOT " if self.negated else ""
        return f"{self.attr} {neg}IN ({', '.join(str(v) for v in self.values)})"


@dataclass(frozen=True)
class Like(Expr):
    attr: Attr
    pattern: str
    escape: str | None = None
    negated: bool = False

    def __str__(self) -> str:
        neg = "NOT " if self.negated else ""
        text = f"{self.attr} {neg}LIKE {literal_text(self.pattern)}"
        return text + (f" ESCAPE {literal_text(self.escape)}" if self.escape is not None else "")


@dataclass(frozen=True)
class IsNull(Expr):
    attr: Attr
    negated: bool = False

    def __str__(self) -> str:
        return f"{self.attr} IS {'NOT ' if self.negated else ''}NULL"


@dataclass(frozen=True)
class Not(Expr):
    operand: Expr

    def __str__(self) -> str:
        inner = str(self.operand)
        return f"NOT ({inner})" if isinstance(self.operand, And | Or) else f"NOT {inner}"


@dataclass(frozen=True)
class And(Expr):
    operands: tuple[Expr, ...]

    def __str__(self) -> str:
        return " AND ".join(f"({o})" if isinstance(o, Or) else str(o) for o in self.operands)


@dataclass(frozen=True)
class Or(Expr):
    operands: tuple[Expr, ...]

    def __str__(self) -> str:
        # Parentheses around an AND are not needed (AND binds tighter) but help a reader.
        return " OR ".join(f"({o})" if isinstance(o, And) else str(o) for o in self.operands)
