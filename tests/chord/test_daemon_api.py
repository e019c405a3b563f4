"""The Daemon class in-process: joining, state queries, extension hooks, graceful stop."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import trio

from chord.kbr import NodeRef
from overlay.core.effects import Notice
from overlay.runtime.config import ConfigError, DaemonConfig
from overlay.runtime.daemon import ChordKind, Daemon, query_state
from overlay.runtime.transport import Inbound, Transport, TransportConfig, Unreachable
from tests.chord.helpers import RecordingApp

FAST = {"stabilize_interval": 0.2, "fix_fingers_interval": 0.2,
        "check_predecessor_interval": 0.2}


def config(tmp_path: Path, *seeds: str) -> DaemonConfig:
    return DaemonConfig(bind="127.0.0.1:0", seeds=seeds, trace_dir=tmp_path / "traces",
                        state_dir=tmp_path, protocol=FAST)


async def test_daemons_join_answer_state_queries_and_leave_cleanly(tmp_path: Path) -> None:
    apps: list[RecordingApp] = []
    notices: list[Notice] = []
    served: list[str] = []

    def app_factory(node: object) -> RecordingApp:
        apps.append(RecordingApp())
        return apps[-1]

    async def service(daemon: Daemon) -> None:
        served.append(daemon.address or "")
        await trio.sleep_forever()

    send_channel, _receive = trio.open_memory_channel[Inbound | Unreachable](math.inf)
    client = Transport(TransportConfig(), send_channel)
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        first = Daemon(config(tmp_path), ChordKind.of(config(tmp_path), app_factory))
        first.services.append(service)
        first_addr = await nursery.start(first.run)
        second = Daemon(config(tmp_path, first_addr),
                        ChordKind.of(config(tmp_path, first_addr), app_factory))
        second.notice_handlers.append(notices.append)
        second_addr = await nursery.start(second.run)
        with trio.fail_after(10):
            while True:
                state = await query_state(client, first_addr)
                if state.predecessor is not None and state.successors:
                    break
                await trio.sleep(0.05)
        assert state.successors[0].addr == second_addr and state.predecessor.addr == second_addr
        assert served == [first_addr]
        # The application sees its neighbour arrive, and lookups run through the daemon.
        assert ("update", state.successors[0].id, True) in apps[0].calls
        second.call(lambda core, now: core.lookup(now, state.node.id, tag="q"))
        with trio.fail_after(5):
            while not any(n.kind == "lookup" for n in notices):
                await trio.sleep(0.05)
        lookup = next(n.data for n in notices if n.kind == "lookup")
        assert lookup["owner"] == NodeRef(state.node.id, first_addr) and lookup["tag"] == "q"

        second.stop()
        with trio.fail_after(10):
            await second.stopped.wait()
        assert any(n.kind == "left" for n in notices)
        with trio.fail_after(10):
            while (await query_state(client, first_addr)).successors:
                await trio.sleep(0.05)
        first.stop()
        with trio.fail_after(10):
            await first.stopped.wait()
        nursery.cancel_scope.cancel()
    downs = [line for path in (tmp_path / "traces").glob("*.jsonl")
             for line in path.read_text().splitlines() if '"node_down"' in line]
    assert len(downs) == 2 and all('"leave"' in line for line in downs)


def test_unknown_protocol_settings_are_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="stabilise_interval"):
        ChordKind.of(DaemonConfig(state_dir=tmp_path, protocol={"stabilise_interval": 1.0}))
    with pytest.raises(ConfigError, match="must be float"):
        ChordKind.of(DaemonConfig(state_dir=tmp_path, protocol={"stabilize_interval": "fast"}))
