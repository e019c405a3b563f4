"""scribe.standin: which keys a restarted node stands in for, until when, and which range
start it persists. Exact, on a ring of 2**8 ids."""

from __future__ import annotations

import pytest

from scribe.standin import FormerRange

RING = 256
ME = 100


def former(start: int | None, wait: float = 30.0) -> FormerRange:
    kept = FormerRange(ME, RING, wait)
    kept.restored(start)
    return kept


def test_without_a_former_range_no_key_waits() -> None:
    kept = former(None)
    assert not any(kept.standing_in(0.0, key) for key in range(RING))
    assert kept.deadline(0.0) is None


def test_keys_outside_the_former_range_wait_inside_do_not() -> None:
    kept = former(80)  # owned (80, 100] before
    assert kept.standing_in(5.0, 79)  # another node's: waits
    assert kept.standing_in(5.0, 80)  # the old predecessor's own id: its key
    assert not kept.standing_in(5.0, 81)  # the first key it owned
    assert not kept.standing_in(5.0, 100)  # its own id: its key
    assert kept.standing_in(5.0, 101)  # past it: a successor's (the ring wrapped to it)


def test_the_range_wraps_round_zero() -> None:
    kept = FormerRange(10, RING, 30.0)
    kept.restored(240)  # owned (240, 255] and [0, 10]
    assert not kept.standing_in(0.0, 250) and not kept.standing_in(0.0, 0)
    assert not kept.standing_in(0.0, 10)
    assert kept.standing_in(0.0, 240) and kept.standing_in(0.0, 11)


def test_the_wait_counts_from_the_first_question_and_ends() -> None:
    kept = former(80, wait=30.0)
    assert kept.deadline(50.0) == 80.0  # first asked at 50 (back in the ring)
    assert kept.standing_in(79.999, 79)
    assert not kept.standing_in(80.0, 79)  # over: every key it owns is its own
    assert kept.start is None and kept.deadline(81.0) is None


def test_a_zero_wait_never_waits() -> None:
    kept = former(80, wait=0.0)
    assert not kept.standing_in(1.0, 79)


def test_a_restarted_node_alone_owns_every_key_but_waits_for_the_others() -> None:
    kept = former(ME)  # it was alone: every key was its own
    assert not any(kept.standing_in(0.0, key) for key in range(RING))


@pytest.mark.parametrize(("pred", "written"), [
    (90, 90),  # narrower: a node joined between: its own range now
    (80, None),  # the same as the stored one: nothing to write
    (60, None),  # wider while it waits: the former range stays on disk
    (ME, None),  # alone: the whole ring, wider
    (None, None),  # no predecessor known
])
def test_what_is_persisted_while_waiting(pred: int | None, written: int | None) -> None:
    kept = former(80)
    assert kept.note(10.0, pred) == written


def test_a_withheld_wider_range_is_persisted_once_the_wait_is_over() -> None:
    kept = former(80, wait=30.0)
    assert kept.note(10.0, 60) is None  # the wait runs until 40
    assert kept.note(39.0, 60) is None
    assert kept.note(40.0, 60) == 60
    assert kept.note(41.0, 60) is None  # written once
    assert kept.note(42.0, 70) == 70  # later changes as usual


def test_a_new_node_persists_its_first_predecessor() -> None:
    kept = FormerRange(ME, RING, 30.0)
    assert kept.note(0.0, 42) == 42
    assert kept.note(1.0, 42) is None
