"""Shared pytest configuration.

pytest-trio 0.8 with trio >= 0.25 wraps every failure of a trio test in an
ExceptionGroup. That makes tracebacks noisy and breaks ``pytest.raises``-style
expectations around whole tests, so we unwrap a group holding a single leaf.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest


def _lone_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, None, None]:
    outcome = yield
    excinfo = outcome.excinfo
    if excinfo is not None and isinstance(excinfo[1], BaseExceptionGroup):
        leaf = _lone_leaf(excinfo[1])
        if leaf is not excinfo[1]:
            outcome.force_exception(leaf)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Callable[[type, str], list[tuple[Any, ...]]]:
    """``calls(cls, name)``: a list that gets the arguments (after ``self``) of every
    call of the method ``cls.name`` from then on, the method still doing its work."""
    def watch(cls: type, name: str) -> list[tuple[Any, ...]]:
        seen: list[tuple[Any, ...]] = []
        method = getattr(cls, name)

        def watched(self: object, *args: Any) -> Any:
            seen.append(args)
            return method(self, *args)

        monkeypatch.setattr(cls, name, watched)
        return seen
    return watch
