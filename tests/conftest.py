"""Shared pytest configuration.

pytest-trio 0.8 with trio >= 0.25 wraps every failure of a trio test in an
ExceptionGroup. That makes tracebacks noisy and breaks ``pytest.raises``-style
expectations around whole tests, so we unwrap a group holding a single leaf.
"""

from __future__ import annotations

from collections.abc import Generator

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
