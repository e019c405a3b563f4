"""Which conjunctions the array index holds, and how: one *atom* per attribute.

A conjunction is array-shaped when every predicate says exactly that an attribute
equals one of some values (``a = v``, ``a IN (...)``, ``b <> TRUE``, ``s LIKE 'abc'``)
or lies in a numeric interval whose bounds are exactly C doubles (``<``, ``>=``,
``BETWEEN``...). Its predicates on one attribute merge into one atom: equalities
intersect their value sets, intervals intersect. An atom is then TRUE exactly when its
predicates all are, so the conjunction is TRUE exactly when all its atoms are.

A numeric atom keeps closed bounds ``low <= v <= high`` in doubles: an exclusive bound
moves to the next double inward (``v > 3`` is ``v >= nextafter(3, inf)``), exact for
every event value that is a double. Event values that are not (integers beyond 2**53)
are compared conservatively, then confirmed by the filter itself
(:mod:`matching.arrays`).

The :class:`Layout` of a conjunction is where the index files it: under a pair of
equalities (both must hold before it is looked at, as in Fabret et al. 2001), one
equality, or a numeric interval, with at most :data:`CHECK_SLOTS` single-valued atoms
checked per candidate in bulk.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from matching.access import AccessOf, Equals, Range, ValueKey, access_of
from matching.ast import Expr

#: Atoms checked per candidate conjunction (the range access included): the array
#: index keeps this many (column, low, high) triples per conjunction. Four: the four
#: answers of a candidate are then one 32-bit word (:mod:`matching.arrays`).
CHECK_SLOTS = 4
#: A pair access files a conjunction under every combination of its two value sets;
#: past this many it keeps a one-attribute access (as :mod:`matching.clusters`).
MAX_PAIR_KEYS = 16
#: Integers up to this size are exactly doubles.
EXACT_INT = 2**53


def exact_double(value: object) -> bool:
    """Whether a number is exactly a C double (bools are not numbers here)."""
    cls = value.__class__
    return cls is float or (cls is int and -EXACT_INT <= value <= EXACT_INT)  # type: ignore[operator]  # an int, by its class


class Atom(NamedTuple):
    """What a conjunction says of one attribute: it equals one of ``keys`` (value keys),
    or (``keys`` None) it is a number within ``[low, high]`` (doubles, closed). A named
    tuple: made for every filter added, where a frozen dataclass costs several times
    more."""

    attr: str
    keys: frozenset[ValueKey] | None = None
    low: float = -math.inf
    high: float = math.inf


class Layout(NamedTuple):
    """Where a conjunction is filed: under ``access`` (one or two equality atoms; none
    for a range access), else under ``ranged``; ``checks`` are the atoms tested per
    candidate (single-valued equalities and intervals, ``ranged`` among them)."""

    access: tuple[Atom, ...]
    ranged: Atom | None
    checks: tuple[Atom, ...]


def _closed(rng: Range) -> tuple[float, float] | None:
    """The closed double bounds of a numeric range; None when a bound is not a double."""
    if rng.low is not None and not exact_double(rng.low):
        return None
    if rng.high is not None and not exact_double(rng.high):
        return None
    low = -math.inf if rng.low is None else float(rng.low)
    high = math.inf if rng.high is None else float(rng.high)
    if rng.low is not None and not rng.low_inclusive:
        low = math.nextafter(low, math.inf)
    if rng.high is not None and not rng.high_inclusive:
        high = math.nextafter(high, -math.inf)
    return low, high


def atoms_of(conjunction: Sequence[Expr], access_of: AccessOf = access_of
             ) -> tuple[Atom, ...] | None:
    """The atoms of an array-shaped conjunction (``()``: it is never TRUE); None when the
    conjunction is not array-shaped or has no predicate."""
    if not conjunction:
        return None
    # Run for every conjunction added to a bulk index: a merge only when an attribute
    # comes twice.
    keys: dict[str, frozenset[ValueKey]] = {}
    ranges: dict[str, Range] = {}
    for pred in conjunction:
        found = access_of(pred)
        if found is None or not found[1]:
            return None
        access = found[0]
        if isinstance(access, Equals):
            attr = access.attr
            keys[attr] = keys[attr] & access.keys if attr in keys else access.keys
        elif isinstance(access, Range) and access.kind == "num":
            attr = access.attr
            ranges[attr] = ranges[attr].intersect(access) if attr in ranges else access
        else:
            return None
    if keys and ranges and not keys.keys().isdisjoint(ranges):
        return None  # ``a = 1 AND a > 0``: rare; the general index takes it
    atoms: list[Atom] = []
    for attr, values in keys.items():
        if not values:
            return ()
        atoms.append(Atom(attr, values))
    for attr, rng in ranges.items():
        if rng.is_empty():
            return ()
        bounds = _closed(rng)
        if bounds is None:
            return None
        atoms.append(Atom(attr, None, *bounds))
    return tuple(atoms)


def layout_of(atoms: Sequence[Atom]) -> Layout | None:
    """How to file a conjunction of ``atoms`` (at least one); None when its checks do not
    fit: more than :data:`CHECK_SLOTS`, or an equality of several values left to check."""
    if len(atoms) == 1:  # a third of skewed conjunctions: nothing to choose
        (atom,) = atoms
        return Layout((atom,), None, ()) if atom.keys is not None \
            else Layout((), atom, (atom,))
    equalities: list[Atom] = []
    for atom in atoms:  # loops, not comprehensions: this runs for every conjunction added
        if atom.keys is not None:
            equalities.append(atom)
    access: tuple[Atom, ...] = ()
    ranged: Atom | None = None
    if len(equalities) >= 2:
        equalities.sort(key=_key_count)
        first, second = equalities[0], equalities[1]
        if _key_count(first) * _key_count(second) <= MAX_PAIR_KEYS:
            access = (first, second) if first.attr < second.attr else (second, first)
        else:
            access = (first,)
    elif equalities:
        access = (equalities[0],)
    else:
        # The narrowest interval leaves the fewest candidates to check.
        ranged = min(atoms, key=_width)
    checks: list[Atom] = []
    for atom in atoms:
        if atom not in access:  # atoms name distinct attributes: found by identity
            if atom.keys is not None and len(atom.keys) != 1:
                return None
            checks.append(atom)
    if len(checks) > CHECK_SLOTS:
        return None
    return Layout(access, ranged, tuple(checks))


def _key_count(atom: Atom) -> int:
    return len(atom.keys or ())


def _width(atom: Atom) -> float:
    return atom.high - atom.low
