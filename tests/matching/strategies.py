"""Hypothesis strategies: random filters in the language and random events."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from matching import Index, parse

#: Every way an index answers: through clusters only (few filters); with a bulk index
#: too (many filters: here from the first), used by batches once events match many
#: filters; and with every batch and every event going the bulk way (as when events
#: match many filters). Each must agree with evaluating each filter.
INDEX_KINDS: list[Callable[[], Index]] = [
    Index, lambda: Index(arrays_from=0), lambda: _bulk_from_the_start(
        Index(arrays_from=0, bulk_matches=0, batch_matches=0))]


def _bulk_from_the_start(index: Index) -> Index:
    index.match_many([])  # the first batch makes the bulk copy
    return index

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


def check_among(index: Index, background_texts: list[str], text: str, hits: list[dict],
                misses: list[dict]) -> dict:
    """File ``text`` under "k" among background filters; check that it matches ``hits``
    and not ``misses`` (by itself, and in the index, one event at a time and in one
    batch). Returns the background filters by key."""
    background = {f"bg{i}": parse(t) for i, t in enumerate(background_texts)}
    for key, f in background.items():
        index.add(key, f)
    index.add("k", parse(text))
    wanted = []
    for attrs, hit in [(h, True) for h in hits] + [(m, False) for m in misses]:
        assert parse(text).matches(attrs) is hit, attrs
        wanted.append({k for k, f in background.items() if f.matches(attrs)}
                      | ({"k"} if hit else set()))
        assert index.match(attrs) == wanted[-1]
    assert [set(m) for m in index.match_many(hits + misses)] == wanted
    return background


def churn_and_compare(index: Index, texts: list[str], evs: list[dict], churn: list[int]
                      ) -> dict:
    """Add ``texts`` (keys 0..), then for each key of ``churn`` remove it when there or
    add it back when not, comparing the index with evaluating each live filter on
    ``evs`` after every step, one event at a time, then in one batch (each match once).
    Returns the live filters by key."""
    live: dict = {}
    for key, text in enumerate(texts):
        live[key] = parse(text)
        index.add(key, live[key])
    for key in churn:
        if key in live:
            index.remove(key)
            del live[key]
        elif key < len(texts):
            live[key] = parse(texts[key])
            index.add(key, live[key])
        for attrs in evs:
            assert index.match(attrs) == {k for k, f in live.items() if f.matches(attrs)}
    expected = [{k for k, f in live.items() if f.matches(attrs)} for attrs in evs]
    assert [index.match(attrs) for attrs in evs] == expected
    batch = index.match_many(evs)
    assert [set(m) for m in batch] == expected
    assert [len(m) for m in batch] == [len(e) for e in expected]
    return live
