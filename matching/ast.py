"""Filter expressions: frozen, comparable nodes with SQL three-valued evaluation.

``evaluate(attrs)`` returns True, False or None (UNKNOWN). A predicate on a missing
attribute, or between values of kinds that do not compare (a string and a number, a
boolean and anything but a boolean), is UNKNOWN; NOT UNKNOWN is UNKNOWN. Booleans are
never numbers here: ``TRUE = 1`` is UNKNOWN.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

Value = str | int | float | bool
Attrs = Mapping[str, Value]

_MISSING = object()


def kind_of(value: object) -> str | None:
    """'num', 'str' or 'bool'; None for anything else."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "num"
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


@dataclass(frozen=True)
class Lit:
    value: Value

    def __str__(self) -> str:
        return literal_text(self.value)

    def __eq__(self, other: object) -> bool:
        # 1 and 1.0 and TRUE are different literals: compare kinds as well as values.
        return (isinstance(other, Lit) and type(self.value) is type(other.value)
                and self.value == other.value)

    def __hash__(self) -> int:
        return hash((type(self.value), self.value))


Operand = Attr | Lit


def _operand(node: Operand, attrs: Attrs) -> object:
    if isinstance(node, Lit):
        return node.value
    return attrs.get(node.name, _MISSING)


_COMPARE = {
    "=": lambda a, b: a == b, "<>": lambda a, b: a != b, "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def compare(op: str, left: object, right: object) -> bool | None:
    kl, kr = kind_of(left), kind_of(right)
    if kl is None or kl != kr:
        return None
    if kl == "bool" and op not in ("=", "<>", "!="):
        return None
    return _COMPARE[op](left, right)


class Expr:
    def evaluate(self, attrs: Attrs) -> bool | None:
        raise NotImplementedError


@dataclass(frozen=True)
class Const(Expr):
    value: bool

    def evaluate(self, attrs: Attrs) -> bool | None:
        return self.value

    def __str__(self) -> str:
        return "TRUE" if self.value else "FALSE"


@dataclass(frozen=True)
class Compare(Expr):
    left: Operand
    op: str
    right: Operand

    def evaluate(self, attrs: Attrs) -> bool | None:
        return compare(self.op, _operand(self.left, attrs), _operand(self.right, attrs))

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


@dataclass(frozen=True)
class Between(Expr):
    attr: Attr
    low: Lit
    high: Lit
    negated: bool = False

    def evaluate(self, attrs: Attrs) -> bool | None:
        value = attrs.get(self.attr.name, _MISSING)
        if kind_of(value) != "num":
            return None
        inside = self.low.value <= value <= self.high.value  # type: ignore[operator]
        return not inside if self.negated else inside

    def __str__(self) -> str:
        neg = "NOT " if self.negated else ""
        return f"{self.attr} {neg}BETWEEN {self.low} AND {self.high}"


@dataclass(frozen=True)
class In(Expr):
    attr: Attr
    values: tuple[Lit, ...]
    negated: bool = False

    def evaluate(self, attrs: Attrs) -> bool | None:
        value = attrs.get(self.attr.name, _MISSING)
        kind = kind_of(value)
        if kind is None:
            return None
        comparable = False
        for lit in self.values:
            if kind_of(lit.value) == kind:
                comparable = True
                if lit.value == value:
                    return not self.negated
        if not comparable:  # every comparison UNKNOWN
            return None
        return self.negated

    def __str__(self) -> str:
        neg = "NOT " if self.negated else ""
        return f"{self.attr} {neg}IN ({', '.join(str(v) for v in self.values)})"


def like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    parts, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape and i + 1 < len(pattern):
            parts.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        parts.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(parts), re.DOTALL)


@dataclass(frozen=True)
class Like(Expr):
    attr: Attr
    pattern: str
    escape: str | None = None
    negated: bool = False
    regex: re.Pattern[str] = field(init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", like_regex(self.pattern, self.escape))

    def evaluate(self, attrs: Attrs) -> bool | None:
        value = attrs.get(self.attr.name, _MISSING)
        if not isinstance(value, str):
            return None
        hit = self.regex.fullmatch(value) is not None
        return not hit if self.negated else hit

    def __str__(self) -> str:
        neg = "NOT " if self.negated else ""
        text = f"{self.attr} {neg}LIKE {literal_text(self.pattern)}"
        return text + (f" ESCAPE {literal_text(self.escape)}" if self.escape is not None else "")


@dataclass(frozen=True)
class IsNull(Expr):
    attr: Attr
    negated: bool = False

    def evaluate(self, attrs: Attrs) -> bool | None:
        missing = self.attr.name not in attrs
        return not missing if self.negated else missing

    def __str__(self) -> str:
        return f"{self.attr} IS {'NOT ' if self.negated else ''}NULL"


@dataclass(frozen=True)
class Not(Expr):
    operand: Expr

    def evaluate(self, attrs: Attrs) -> bool | None:
        value = self.operand.evaluate(attrs)
        return None if value is None else not value

    def __str__(self) -> str:
        inner = str(self.operand)
        return f"NOT ({inner})" if isinstance(self.operand, And | Or) else f"NOT {inner}"


@dataclass(frozen=True)
class And(Expr):
    operands: tuple[Expr, ...]

    def evaluate(self, attrs: Attrs) -> bool | None:
        result: bool | None = True
        for operand in self.operands:
            value = operand.evaluate(attrs)
            if value is False:
                return False
            if value is None:
                result = None
        return result

    def __str__(self) -> str:
        return " AND ".join(f"({o})" if isinstance(o, Or) else str(o) for o in self.operands)


@dataclass(frozen=True)
class Or(Expr):
    operands: tuple[Expr, ...]

    def evaluate(self, attrs: Attrs) -> bool | None:
        result: bool | None = False
        for operand in self.operands:
            value = operand.evaluate(attrs)
            if value is True:
                return True
            if value is None:
                result = None
        return result

    def __str__(self) -> str:
        return " OR ".join(f"({o})" if isinstance(o, And) else str(o) for o in self.operands)


def predicate_attrs(expr: Expr) -> set[str]:
    """Names of every attribute the expression reads."""
    if isinstance(expr, Compare):
        return {o.name for o in (expr.left, expr.right) if isinstance(o, Attr)}
    if isinstance(expr, Between | In | Like | IsNull):
        return {expr.attr.name}
    if isinstance(expr, Not):
        return predicate_attrs(expr.operand)
    if isinstance(expr, And | Or):
        return set().union(*(predicate_attrs(o) for o in expr.operands))
    return set()

