"""The local API server: Unix socket (mode 0600) and optional loopback TCP (API.md)."""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from overlay.core.limits import DEFAULT_MAX_FRAME
from overlay.runtime.api.connection import ApiConnection
from overlay.runtime.api.service import PubSubService
from overlay.runtime.turn_writes import TurnWrites

log = logging.getLogger("overlay.api")

LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}


@dataclass(frozen=True)
class ApiConfig:
    socket_path: Path | None = None
    #: ``(host, port)`` for TCP; port 0 picks a free one. Loopback only unless allowed.
    tcp: tuple[str, int] | None = None
    allow_remote_tcp: bool = False
    max_frame: int = DEFAULT_MAX_FRAME
    max_queue_bytes: int = 64 << 20
    max_subscriptions_per_connection: int = 10_000
    max_inflight_publishes: int = 4096
    max_connections: int = 1024
    close_grace: float = 2.0

    def __post_init__(self) -> None:
        if self.socket_path is None and self.tcp is None:
            raise ValueError("the API needs a Unix socket path or a TCP address")
        if self.tcp is not None and self.tcp[0] not in LOOPBACK_HOSTS and not self.allow_remote_tcp:
            raise ValueError(f"API TCP address {self.tcp[0]} is not loopback; "
                             "set allow_remote_tcp to expose it")


class ApiServer:
    def __init__(self, service: PubSubService, config: ApiConfig,
                 turn_writes: TurnWrites | None = None) -> None:
        self.service = service
        self.config = config
        #: ``requests`` / ``reads``: how many requests one read of a client brings.
        self.stats: dict[str, int] = {"connections": 0, "connections_total": 0, "requests": 0,
                                      "reads": 0, "bad_frames": 0, "overloaded_closes": 0,
                                      "refused": 0}
        self.tcp_address: tuple[str, int] | None = None
        self._ids = itertools.count(1)
        #: The connections with frames to write when the current step ends: a reader's
        #: turn, or (given the daemon's) a core step its driver carries out.
        self.turn_writes = TurnWrites() if turn_writes is None else turn_writes

    def status(self) -> dict[str, Any]:
        return dict(self.stats)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners: list[trio.SocketListener] = []
        bound_socket = False  # only a socket we created is ours to remove
        try:
            if self.config.socket_path is not None:
                listeners.append(await _unix_listener(self.config.socket_path))
                bound_socket = True
            if self.config.tcp is not None:
                host, port = self.config.tcp
                tcp = await trio.open_tcp_listeners(port, host=host)
                self.tcp_address = tcp[0].socket.getsockname()[:2]
                listeners += tcp
            async with trio.open_nursery() as nursery:
                await nursery.start(trio.serve_listeners, self._serve, listeners)
                task_status.started()
        finally:
            if bound_socket and self.config.socket_path is not None:
                with contextlib.suppress(FileNotFoundError):
                    self.config.socket_path.unlink()

    async def _serve(self, stream: trio.SocketStream) -> None:
        async with stream:
            if self.stats["connections"] >= self.config.max_connections:
                self.stats["refused"] += 1
                return
            self.stats["connections"] += 1
            self.stats["connections_total"] += 1
            try:
                await ApiConnection(self, stream, next(self._ids)).serve()
            except Exception:
                log.exception("internal error on an API connection")
            finally:
                self.stats["connections"] -= 1


async def _unix_listener(path: Path) -> trio.SocketListener:
    path.parent.mkdir(parents=True, exist_ok=True)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with contextlib.suppress(FileNotFoundError):
            if _socket_in_use(path):
                raise OSError(errno.EADDRINUSE, f"another daemon serves {path}")
            path.unlink()
        # Create the socket file as 0600 from the start: no window where others may connect.
        old_umask = os.umask(0o177)
        try:
            await sock.bind(str(path))
        finally:
            os.umask(old_umask)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return trio.SocketListener(sock)


def _socket_in_use(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:
        return False
    finally:
        probe.close()
    return True
