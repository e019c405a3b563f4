"""Interval arithmetic on the ring, checked exhaustively on small rings (wrap-around
included) against a plain walk around the circle."""

from __future__ import annotations

import pytest

from chord.ring import distance, finger_start, hex_id, in_half_open, in_open, node_id, ring_size


def walk(a: int, b: int, size: int) -> list[int]:
    """The ids met going clockwise from a (excluded) to b (included), once round at most."""
    ids, x = [], a
    while True:
        x = (x + 1) % size
        ids.append(x)
        if x == b:
            return ids


@pytest.mark.parametrize("bits", [1, 2, 3, 4])
def test_intervals_match_a_walk_around_the_ring(bits: int) -> None:
    size = ring_size(bits)
    for a in range(size):
        for b in range(size):
            inside = walk(a, b, size)  # (a, b]; for a == b the whole ring
            for x in range(size):
                assert in_half_open(x, a, b, size) == (x in inside), (x, a, b)
                open_ids = [i for i in inside if i != b] if a != b else \
                    [i for i in inside if i != a]
                assert in_open(x, a, b, size) == (x in open_ids), (x, a, b)


@pytest.mark.parametrize("bits", [1, 3, 5])
def test_distance_is_the_clockwise_step_count(bits: int) -> None:
    size = ring_size(bits)
    for a in range(size):
        for b in range(size):
            expected = 0 if a == b else len(walk(a, b, size))
            assert distance(a, b, size) == expected


def test_wrap_around_cases_by_hand() -> None:
    size = 16
    assert in_open(0, 14, 2, size) and in_open(15, 14, 2, size) and in_open(1, 14, 2, size)
    assert not in_open(2, 14, 2, size) and not in_open(14, 14, 2, size)
    assert in_half_open(2, 14, 2, size) and not in_half_open(14, 14, 2, size)
    assert in_open(5, 3, 3, size)  # (3, 3) is every id but 3
    assert not in_open(3, 3, 3, size)
    assert in_half_open(3, 3, 3, size)  # (3, 3] is the whole ring
    assert distance(14, 2, size) == 4 and distance(2, 14, size) == 12


def test_finger_starts_and_ids() -> None:
    assert [finger_start(14, i, 16) for i in range(4)] == [15, 0, 2, 6]
    assert node_id("10.0.0.1:7400", 128) == node_id("10.0.0.1:7400", 128)
    assert node_id("10.0.0.1:7400", 8) < 256
    assert node_id("10.0.0.1:7400", 8) == node_id("10.0.0.1:7400", 128) & 0xFF
    assert hex_id(10, 16) == "000a" and len(hex_id(1, 128)) == 32
