"""Hypothesis strategies: random filters in the language and random events."""

from __future__ import annotations

from hypothesis import strategies as st

ATTRS = ["a", "b", "c", "sensor.kind"]
STRINGS = ["x", "y", "eu-1", "it's", ""]
NUMBERS = [-5, 0, 1, 2.5, 10, 100]

string_lit = st.sampled_from(STRINGS).map(lambda s: "'" + s.replace("'", "''") + "'")
number_lit = st.sampled_from(NUMBERS).map(repr)
literal = st.one_of(string_lit, number_lit, st.sampled_from(["TRUE", "FALSE"]))
attr = st.sampled_from(ATTRS)


@st.composite
def predicate(draw: st.DrawFn) -> str:
    name = draw(attr)
    kind = draw(st.integers(0, 5))
    neg = draw(st.sampled_from(["", "NOT "]))
    if kind == 0:
        op = draw(st.sampled_from(["=", "<>", "!=", "<", "<=", ">", ">="]))
        lit = draw(number_lit if op not in ("=", "<>", "!=") else literal)
        return f"{name} {op} {lit}"
    if kind == 1:
        lo, hi = sorted(draw(st.lists(st.sampled_from(NUMBERS), min_size=2, max_size=2)))
        return f"{name} {neg}BETWEEN {lo!r} AND {hi!r}"
    if kind == 2:
        items = draw(st.lists(literal, min_size=1, max_size=3))
        return f"{name} {neg}IN ({', '.join(items)})"
    if kind == 3:
        pattern = draw(st.sampled_from(["x%", "%1", "_", "eu-%", "a!%b"]))
        esc = " ESCAPE '!'" if "!" in pattern else ""
        return f"{name} {neg}LIKE '{pattern}'{esc}"
    if kind == 4:
        return f"{name} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    return draw(st.sampled_from(["TRUE", "FALSE"]))


filters = st.recursive(
    predicate(),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
            lambda t: f"({t[0]}) {t[1]} ({t[2]})"
        ),
        inner.map(lambda f: f"NOT ({f})"),
    ),
    max_leaves=6,
) | st.just("")

values = st.one_of(st.sampled_from(NUMBERS), st.sampled_from(STRINGS), st.booleans(),
                   st.floats(-20, 200, allow_nan=False))
events = st.dictionaries(attr, values, max_size=4)
