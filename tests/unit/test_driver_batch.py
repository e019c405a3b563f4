"""CoreDriver.batch: a burst of application calls carries out its effects once, in order."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest

from overlay.core.effects import Deliver, Effect, Notice, Persist, SyncWanted, Trace
from overlay.core.messages import Message
from overlay.core.storage import StorageOp
from overlay.runtime.driver import CoreDriver


class FakeCore:
    """Queues whatever effects a call hands it; the deadline is settable."""

    def __init__(self) -> None:
        self.effects: list[Effect] = []
        self.deadline: float | None = None

    def drain_effects(self) -> list[Effect]:
        effects, self.effects = self.effects, []
        return effects

    def next_deadline(self) -> float | None:
        return self.deadline


class FakeTransport:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def send(self, dest: str, msg: Message) -> None:
        self.sent.append((dest, msg))


class FakeTracer:
    def __init__(self) -> None:
        self.writes: list[list[tuple[float, str, dict[str, Any]]]] = []

    def write_all(self, items: list[tuple[float, str, dict[str, Any]]]) -> None:
        self.writes.append(list(items))


def make() -> tuple[CoreDriver, FakeCore, FakeTracer, list[Any]]:
    core, tracer, seen = FakeCore(), FakeTracer(), []
    clock = itertools.count(100)
    driver = CoreDriver(core, FakeTransport(), tracer,  # type: ignore[arg-type]  # fakes with just what the driver uses
                        on_deliver=lambda e: seen.append(("deliver", e.sub)),
                        on_notice=lambda n: seen.append(("notice", n.kind)),
                        wallclock=lambda: float(next(clock)))
    return driver, core, tracer, seen


def emit(*effects: Effect) -> Any:
    def fn(core: FakeCore, now: float) -> str:
        core.effects.extend(effects)
        return "done"
    return fn


async def test_a_call_outside_a_batch_carries_out_its_effects_at_once() -> None:
    driver, _, tracer, seen = make()
    assert driver.call(emit(Trace("a", {"x": 1}), Deliver(1, None))) == "done"
    assert seen == [("deliver", 1)]
    assert tracer.writes == [[(100.0, "a", {"x": 1})]]


async def test_calls_in_a_batch_wait_for_its_end_and_keep_their_order_and_times() -> None:
    driver, _, tracer, seen = make()
    with driver.batch():
        driver.call(emit(Trace("a", {}), Deliver(1, None)))
        driver.call(emit(Notice("published", {}), Trace("b", {})))
        with driver.batch():  # a nested batch joins the outer one
            driver.call(emit(Deliver(2, None), Trace("c", {})))
        driver.call(emit())  # nothing to carry out: no time stamp taken
        assert seen == [] and tracer.writes == []
    assert seen == [("deliver", 1), ("notice", "published"), ("deliver", 2)]
    # One write for the whole batch, each record stamped with its own call's time.
    assert tracer.writes == [[(100.0, "a", {}), (101.0, "b", {}), (102.0, "c", {})]]


async def test_a_failing_handler_is_logged_and_the_batch_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    driver, _, tracer, seen = make()

    def deliver(effect: Deliver) -> None:
        if effect.sub == 1:
            raise RuntimeError("bug")
        seen.append(("deliver", effect.sub))

    driver.on_deliver = deliver
    with caplog.at_level(logging.ERROR, logger="overlay.driver"), driver.batch():
        driver.call(emit(Deliver(1, None), Trace("a", {})))
        driver.call(emit(Deliver(2, None), Notice("published", {})))
    assert seen == [("deliver", 2), ("notice", "published")]
    assert tracer.writes == [[(100.0, "a", {})]]
    assert any("carrying out Deliver" in r.getMessage() for r in caplog.records)


async def test_the_effects_of_a_batch_are_carried_out_even_when_it_raises() -> None:
    driver, _, _, seen = make()
    with pytest.raises(ValueError), driver.batch():
        driver.call(emit(Deliver(1, None)))
        raise ValueError("a request went wrong")
    assert seen == [("deliver", 1)]


class RecordingStorage:
    """A StorageQueue that records what the driver hands it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []

    def submit(self, op: StorageOp) -> None:
        self.seen.append(("submit", op))

    def want(self, through: int) -> None:
        self.seen.append(("want", through))


async def test_persists_and_the_syncs_waited_for_reach_the_store_in_order() -> None:
    storage = RecordingStorage()
    driver = CoreDriver(FakeCore(), FakeTransport(),  # type: ignore[arg-type]  # fakes
                        storage=storage)
    first, second = StorageOp(), StorageOp()
    driver.call(emit(Persist(first), Persist(second), SyncWanted(2), Trace("a", {})))
    assert storage.seen == [("submit", first), ("submit", second), ("want", 2)]
