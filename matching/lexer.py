"""Tokens of the filter language (FILTERS.md), each with its 0-based character offset."""

from __future__ import annotations

import re
from dataclasses import dataclass

from matching.errors import FilterSyntaxError

KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "LIKE", "ESCAPE", "IS", "NULL",
                      "TRUE", "FALSE"})

_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_OPERATORS = ("<>", "!=", "<=", ">=", "=", "<", ">", "(", ")", ",")
#: Integer literals hold what an attribute integer can (API.md): 64-bit signed.
MIN_INT = -(1 << 63)
MAX_INT = (1 << 63) - 1


@dataclass(frozen=True)
class Token:
    kind: str  # "num", "str", "ident", "kw", "op", "end"
    text: str
    pos: int
    value: object = None

    def describe(self) -> str:
        if self.kind == "end":
            return "the end of the filter"
        if self.kind == "str":
            return f"string {self.text}"
        return f"'{self.text}'"


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch == "'":
            j, parts = i + 1, []
            while True:
                k = text.find("'", j)
                if k < 0:
                    raise FilterSyntaxError("expected a closing quote, found the end of the "
                                            "filter (unterminated string)", i)
                parts.append(text[j:k])
                if k + 1 < n and text[k + 1] == "'":
                    parts.append("'")
                    j = k + 2
                    continue
                tokens.append(Token("str", text[i:k + 1], i, "".join(parts)))
                i = k + 1
                break
            continue
        number = _NUMBER.match(text, i)
        if number:
            raw = number.group()
            is_float = any(c in raw for c in ".eE")
            # ``+ 0.0`` turns -0.0 into 0.0: one number, one canonical text.
            value: object = float(raw) + 0.0 if is_float else int(raw)
            if is_float and value in (float("inf"), float("-inf")):
                raise FilterSyntaxError(f"expected a finite number, found {raw}", i)
            if type(value) is int and not MIN_INT <= value <= MAX_INT:
                raise FilterSyntaxError(f"expected an integer within -2^63..2^63-1 (as "
                                        f"attribute integers are), found {raw}", i)
            end = number.end()
            if end < n and (text[end].isalnum() or text[end] in "_."):
                raise FilterSyntaxError(f"expected a number, found {text[i:end + 1]!r}", i)
            tokens.append(Token("num", raw, i, value))
            i = end
            continue
        ident = _IDENT.match(text, i)
        if ident:
            word = ident.group()
            if word.upper() in KEYWORDS:
                tokens.append(Token("kw", word.upper(), i))
            else:
                tokens.append(Token("ident", word, i))
            i = ident.end()
            continue
        for op in _OPERATORS:
            if text.startswith(op, i):
                tokens.append(Token("op", op, i))
                i += len(op)
                break
        else:
            raise FilterSyntaxError(f"expected a token, found unexpected character {ch!r}", i)
    tokens.append(Token("end", "", n))
    return tokens
