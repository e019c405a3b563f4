"""TurnWrites: what a step defers is written when it ends, the ``last`` writer after the
others; outside a step nothing is deferred; steps do not nest."""

from __future__ import annotations

import pytest

from overlay.runtime.turn_writes import TurnWrites


class Writer:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def write_now(self) -> None:
        self.log.append(self.name)


def test_a_steps_writes_come_at_its_end_the_last_writer_after_the_others() -> None:
    turns, log = TurnWrites(), []
    reader, a, b = Writer("reader", log), Writer("a", log), Writer("b", log)
    assert not turns.defer(a) and not turns.under_way  # no step: the caller writes
    with turns.turn(last=reader):
        assert turns.under_way
        assert turns.defer(reader) and turns.defer(a) and turns.defer(b)
        assert log == []
    assert log == ["a", "b", "reader"] and not turns.under_way


def test_the_writes_are_made_when_the_step_raises_and_steps_do_not_nest() -> None:
    turns, log = TurnWrites(), []
    with pytest.raises(RuntimeError, match="inside another"), turns.turn():
        turns.defer(Writer("a", log))
        with turns.turn():
            pass
    assert log == ["a"] and not turns.under_way
