"""One interface over both drivers, so a conformance suite runs a core on each.

``SimHarness`` places cores in the discrete-event simulator; ``TcpHarness`` gives each
core its own trio TCP transport on loopback (free ports). Both offer ``spawn`` (build a
core for a fresh address), ``call`` (an application call), ``wait_for`` (run until a
condition holds, with a deadline) and ``dead_address`` (an address nobody serves).
"""

from __future__ import annotations

import math
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

import trio

from overlay.core.ids import format_id, hash_id
from overlay.core.protocol import ProtocolCore
from overlay.runtime.driver import CoreDriver
from overlay.runtime.transport import Inbound, Transport, TransportConfig, Unreachable
from overlay.sim.engine import Simulator
from overlay.sim.network import NetworkConfig

C = TypeVar("C", bound=ProtocolCore)


class Harness(Protocol):
    async def spawn(self, factory: Callable[[str], C]) -> C: ...

    async def call(self, core: ProtocolCore, fn: Callable[[Any, float], Any]) -> Any: ...

    async def wait_for(self, condition: Callable[[], bool], timeout: float) -> None: ...

    def dead_address(self) -> str: ...


class SimHarness:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self._next = 0

    async def spawn(self, factory: Callable[[str], C]) -> C:
        self._next += 1
        addr = f"10.0.{self._next // 250}.{self._next % 250}:7000"
        return self.sim.add_node(factory(addr), format_id(hash_id(addr)))

    async def call(self, core: ProtocolCore, fn: Callable[[Any, float], Any]) -> Any:
        return self.sim.invoke(core.address, fn)

    async def wait_for(self, condition: Callable[[], bool], timeout: float) -> None:
        deadline = self.sim.now + timeout
        while not condition():
            if self.sim.now >= deadline or not self.sim._heap:
                raise TimeoutError(f"condition not met within {timeout} simulated seconds")
            self.sim.run(until=deadline, max_events=1)

    def dead_address(self) -> str:
        return "10.255.255.1:7000"


class TcpHarness:
    def __init__(self, nursery: trio.Nursery, config: TransportConfig) -> None:
        self.nursery = nursery
        self.config = config
        self.drivers: dict[str, CoreDriver] = {}
        self.transports: dict[str, Transport] = {}

    async def spawn(self, factory: Callable[[str], C], config: TransportConfig | None = None) -> C:
        send_channel, receive_channel = trio.open_memory_channel[Inbound | Unreachable](
            math.inf
        )
        transport = Transport(config or self.config, send_channel)
        addr = await self.nursery.start(transport.run)
        core = factory(addr)
        driver = CoreDriver(core, transport)
        self.drivers[addr] = driver
        self.transports[addr] = transport
        self.nursery.start_soon(driver.run, receive_channel)
        return core

    async def call(self, core: ProtocolCore, fn: Callable[[Any, float], Any]) -> Any:
        return self.drivers[core.address].call(fn)

    async def wait_for(self, condition: Callable[[], bool], timeout: float) -> None:
        with trio.fail_after(timeout):
            while not condition():
                await trio.sleep(0.005)

    def dead_address(self) -> str:
        # A port that was free a moment ago: connecting to it is refused.
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        return f"127.0.0.1:{port}"


@asynccontextmanager
async def tcp_harness(config: TransportConfig | None = None) -> AsyncIterator[TcpHarness]:
    async with trio.open_nursery() as nursery:
        yield TcpHarness(nursery, config or TransportConfig(connect_timeout=2.0))
        nursery.cancel_scope.cancel()


def sim_harness(seed: int = 1, network: NetworkConfig | None = None) -> SimHarness:
    return SimHarness(Simulator(seed, network, check_wire=True))
