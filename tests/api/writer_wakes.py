"""Counting the writes API connections' writer tasks make (the frames not written at the
end of the step that caused them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import trio

from overlay.runtime.api.outbox import Outbox


@dataclass
class WriterSends:
    count: int = 0


@contextmanager
def counting_writer_sends(monkeypatch: pytest.MonkeyPatch) -> Iterator[WriterSends]:
    """Counts ``send_all`` calls made by a connection's writer task
    (:meth:`Outbox.write_loop`) while inside."""
    sends = WriterSends()
    send_all = trio.SocketStream.send_all

    async def counted(self: trio.SocketStream, data: Any) -> None:
        coro = trio.lowlevel.current_task().coro
        if getattr(coro, "cr_code", None) is Outbox.write_loop.__code__:
            sends.count += 1
        await send_all(self, data)

    with monkeypatch.context() as patch:
        patch.setattr(trio.SocketStream, "send_all", counted)
        yield sends
