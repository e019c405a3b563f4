"""Real daemons on loopback: eight ``overlay daemon`` processes form one correct ring,
which repairs itself after two are killed (SIGKILL) and one leaves (SIGTERM).

Every wait is on a condition with a deadline; every process is killed at the end."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from chord.messages import RingState
from chord.oracle import SortedRing
from overlay.runtime.daemon import query_state
from overlay.runtime.transport import Inbound, Transport, TransportConfig, Unreachable

pytestmark = pytest.mark.integration

STABILIZE = "0.3"


class Daemons:
    def __init__(self, nursery: trio.Nursery, trace_dir: Path, client: Transport) -> None:
        self.nursery = nursery
        self.trace_dir = trace_dir
        self.client = client
        self.procs: dict[str, trio.Process] = {}
        self.started = 0

    async def start(self, join: str | None = None) -> str:
        # Each daemon has its own state directory (its API socket lives there).
        self.started += 1  # counted before any await: daemons start concurrently
        state_dir = self.trace_dir.parent / f"state-{self.started}"
        cmd = [sys.executable, "-m", "overlay.cli", "daemon", "--bind", "127.0.0.1:0",
               "--trace-dir", str(self.trace_dir), "--stabilize-interval", STABILIZE,
               "--state-dir", str(state_dir)]
        if join is not None:
            cmd += ["--join", join]
        proc = await trio.lowlevel.open_process(cmd, stdout=subprocess.PIPE,
                                                stdin=subprocess.DEVNULL)
        assert proc.stdout is not None
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, f"daemon exited with {proc.poll()} before it was ready"
                line += chunk
        ready = json.loads(line)
        assert ready["event"] == "ready"
        self.procs[ready["address"]] = proc
        return ready["address"]

    async def states(self) -> dict[str, RingState]:
        return {addr: await query_state(self.client, addr) for addr in self.procs}

    async def wait_for_correct_ring(self, timeout: float) -> None:
        """Until every daemon's predecessor and successor list are the sorted ring's."""
        with trio.fail_after(timeout):
            while True:
                try:
                    states = await self.states()
                except (trio.TooSlowError, OSError):
                    states = {}
                if states and ring_is_correct(states):
                    return
                await trio.sleep(0.2)

    def kill(self, addr: str, sig: int) -> trio.Process:
        proc = self.procs.pop(addr)
        proc.send_signal(sig)
        return proc

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()


def ring_is_correct(states: dict[str, RingState]) -> bool:
    ring = SortedRing([s.node for s in states.values()])
    return all(s.joined and s.predecessor == ring.predecessor(s.node)
               and list(s.successors) == ring.successors(s.node, 8)
               for s in states.values())


@asynccontextmanager
async def daemons(trace_dir: Path) -> AsyncIterator[Daemons]:
    send_channel, _receive = trio.open_memory_channel[Inbound | Unreachable](math.inf)
    client = Transport(TransportConfig(connect_timeout=2.0), send_channel)
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        group = Daemons(nursery, trace_dir, client)
        try:
            yield group
        finally:
            group.kill_all()
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                for proc in list(group.procs.values()):
                    await proc.wait()
            nursery.cancel_scope.cancel()


async def test_eight_daemons_form_a_ring_repair_kills_and_a_clean_leave(tmp_path: Path) -> None:
    async with daemons(tmp_path / "traces") as group:
        first = await group.start()
        async with trio.open_nursery() as starting:
            for _ in range(7):
                starting.start_soon(group.start, first)
        await group.wait_for_correct_ring(timeout=30)
        assert len(group.procs) == 8
        # Traces reach their files once a second: a node killed before its first flush
        # leaves none. Kill only once every node's node_up is on disk.
        with trio.fail_after(15):
            while not all('"node_up"' in path.read_text()
                          for path in (tmp_path / "traces").glob("*.jsonl")) or \
                    len(list((tmp_path / "traces").glob("*.jsonl"))) < 8:
                await trio.sleep(0.1)

        victims = sorted(group.procs)[1:3]
        for addr in victims:
            killed = group.kill(addr, signal.SIGKILL)
            with trio.fail_after(10):
                await killed.wait()
        await group.wait_for_correct_ring(timeout=30)
        assert len(await group.states()) == 6

        leaver = sorted(group.procs)[0]
        proc = group.kill(leaver, signal.SIGTERM)
        with trio.fail_after(15):
            assert await proc.wait() == 0
        await group.wait_for_correct_ring(timeout=30)
        assert len(await group.states()) == 5

    # The leaver's trace ends with a clean node_down; the killed ones' do not.
    ends = {p.name: _records(p)[-1] for p in (tmp_path / "traces").glob("*.jsonl")}
    assert len(ends) == 8
    assert sorted(r.get("reason", "") for r in ends.values() if r["ev"] == "node_down") == \
        ["leave"]


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]
