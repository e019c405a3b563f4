"""What the array index (:mod:`matching.arrays`) does to a batch as a whole: one
attribute's values across the events as a column of value keys and doubles, the
doubles either side of an integer that is no double, and the matches found (slots and
the event of each) deduplicated and split by event. Plain functions of arrays and
lists, apart from the index's state."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from matching.access import value_key
from matching.ast import kind_of
from matching.atoms import EXACT_INT


def unique_matches(slots: np.ndarray, owners: np.ndarray | None, twice: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """Keep each (event, slot) once, where ``twice`` marks those that may repeat."""
    once = ~twice
    if owners is None:
        pairs = np.sort(slots[twice])
    else:
        top = int(slots.max()) + 1
        pairs = np.sort(owners[twice] * top + slots[twice])
    # Sorting and keeping the first of each run: np.unique hashes, slower when small.
    first = np.empty(len(pairs), np.bool_)
    first[0] = True
    np.not_equal(pairs[1:], pairs[:-1], out=first[1:])
    pairs = pairs[first]
    if owners is None:
        return np.concatenate([slots[once], pairs]), None
    return (np.concatenate([slots[once], pairs % top]),
            np.concatenate([owners[once], pairs // top]))


def split_by_event(slots: np.ndarray, owners: np.ndarray, count: int) -> list[np.ndarray]:
    """Split the matched slots by event."""
    # Event numbers fit 16 bits in any sensible batch: numpy then sorts by radix, O(n).
    order = np.argsort(owners.astype(np.int16) if count < 2**15 else owners, kind="stable")
    bounds = np.searchsorted(owners[order], np.arange(count + 1)).tolist()
    ordered = slots[order]
    # Slices (views): np.split makes them through several Python calls each.
    return [ordered[start:end] for start, end in itertools.pairwise(bounds)]


def owners_of(events: list[int], parts: list[np.ndarray]) -> np.ndarray:
    """The event of each id of ``parts`` (``events[i]`` for all of ``parts[i]``)."""
    if len(events) == 1:
        return np.full(sum(len(p) for p in parts), events[0], np.int64)
    return np.repeat(np.array(events, np.int64), [len(p) for p in parts])


def batch_column(values: list[Any]) -> tuple[list[Any], list[Any] | None, list[tuple[int, int]]]:
    """One attribute across a batch (None where an event lacks it): per event its value
    key (:func:`matching.access.value_key`; None where the value compares with nothing),
    its number as a double (None or NaN: none; the list None: no event has one), and the
    events whose integer is no double (event, value): :func:`kind_of`'s rule, with a
    shortcut for a column of strings or of doubles and integers within 2**53."""
    kinds = set(map(type, values))
    kinds.discard(type(None))
    if kinds <= {str}:
        return values, None, []
    if kinds <= {float, int} and all(v == v for v in values) and (  # NaN is not v == v
            int not in kinds or all(-EXACT_INT <= v <= EXACT_INT for v in values
                                    if v.__class__ is int)):
        return values, values, []
    keys: list[Any] = []
    numbers: list[Any] = []
    big: list[tuple[int, int]] = []
    any_number = False
    for event, value in enumerate(values):
        kind = kind_of(value)
        number = None
        if kind == "num":
            any_number = True
            if isinstance(value, int) and not -EXACT_INT <= value <= EXACT_INT:
                number = bracketing_double(value)
                big.append((event, value))
            else:
                number = float(value)
        numbers.append(number)
        keys.append(None if kind is None else value_key(value))
    return keys, numbers if any_number else None, big


def bracketing_double(value: int, side: int = 0) -> float:
    """An integer as the nearest double, or the double next to that on ``side`` (-1
    below, 1 above): together they bracket the integer."""
    try:
        near = float(value)
    except OverflowError:
        near = math.inf if value > 0 else -math.inf
    return near if not side else math.nextafter(near, side * math.inf)
