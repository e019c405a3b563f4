"""A core step that raises is a bug of ours: the driver logs it with its traceback,
counts it (``internal_errors`` in status), carries out the effects the step made before
it raised, and goes on feeding the core the next input."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from overlay.core.effects import Effect, Notice
from overlay.runtime.driver import CoreDriver
from overlay.runtime.transport import Inbound
from tests.unit.test_driver_batch import FakeTransport


class Boom(Exception):
    pass


class ExplodingCore:
    """Raises on messages whose ``boom`` is set, after emitting a notice; records the rest."""

    def __init__(self) -> None:
        self.effects: list[Effect] = []
        self.handled: list[str] = []

    def drain_effects(self) -> list[Effect]:
        effects, self.effects = self.effects, []
        return effects

    def next_deadline(self) -> float | None:
        return None

    def on_message(self, now: float, src: str, msg: Any) -> None:
        self.effects.append(Notice("step", {"src": src}))
        if msg.boom:
            raise Boom("a bug in the core")
        self.handled.append(src)


class Msg:
    type_name = "test.msg"

    def __init__(self, boom: bool) -> None:
        self.boom = boom


async def test_a_raising_step_is_counted_logged_and_the_next_input_is_served(
        caplog: pytest.LogCaptureFixture) -> None:
    core = ExplodingCore()
    notices: list[str] = []
    driver = CoreDriver(core, FakeTransport(), None,  # type: ignore[arg-type]  # fakes with just what the driver uses
                        on_notice=lambda n: notices.append(n.data["src"]))
    send, receive = trio.open_memory_channel[Any](8)
    for src, boom in (("a", False), ("b", True), ("c", False)):
        send.send_nowait(Inbound(src, Msg(boom), None))  # type: ignore[arg-type]  # fakes with just what the driver uses
    caplog.set_level(logging.ERROR, "overlay.driver")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(driver.run, receive)
        with trio.fail_after(5):
            while len(core.handled) < 2:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert core.handled == ["a", "c"]
    assert driver.internal_errors == 1
    assert notices == ["a", "b", "c"]  # the failed step's effects before the raise went out
    [record] = [r for r in caplog.records if "internal error" in r.getMessage()]
    assert "handling test.msg from b" in record.getMessage() and record.exc_info is not None


async def test_a_call_that_raises_a_bug_is_counted_and_refusals_are_not() -> None:
    core = ExplodingCore()
    driver = CoreDriver(core, FakeTransport(), None)  # type: ignore[arg-type]  # fakes with just what the driver uses

    def refuse(core: Any, now: float) -> None:
        raise ValueError("bad topic")

    def bug(core: Any, now: float) -> None:
        raise ZeroDivisionError("oops")

    with pytest.raises(ValueError):
        driver.call(refuse)
    assert driver.internal_errors == 0
    with pytest.raises(ZeroDivisionError):
        driver.call(bug)
    assert driver.internal_errors == 1
