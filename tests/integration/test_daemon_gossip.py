"""``overlay daemon --mode unstructured``: the same local API over gossip, on real
processes; and the daemon's refusals (bad gossip settings, a state directory in use)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from deploy import cluster
from overlay.client import Event, RequestError, connect

pytestmark = pytest.mark.integration

GOSSIP = """
[protocol]
strategy = "pbcast"
round_interval = 0.3
"""


@pytest.fixture
def gossip_cluster(tmp_path: Path) -> Iterator[cluster.Inventory]:
    inventory = cluster.up(tmp_path / "c", 4, mode="unstructured", extra_config=GOSSIP)
    try:
        yield inventory
    finally:
        assert set(cluster.down(inventory).values()) <= {"stopped", "not running"}


async def test_gossip_daemons_deliver_filtered_events_without_seq(
        gossip_cluster: cluster.Inventory) -> None:
    n = gossip_cluster.nodes
    big: list[Event] = []
    async with connect(n[1].api) as sub_client, connect(n[3].api) as pub:
        assert sub_client.hello["mode"] == "unstructured"
        with pytest.raises(RequestError) as refused:
            async with sub_client.subscribe("jobs", "", group="workers"):
                pass
        assert refused.value.code == "bad_request"
        async with sub_client.subscribe("jobs", "size >= 10") as sub, \
                trio.open_nursery() as nursery:

            async def collect() -> None:
                async for event in sub:
                    big.append(event)

            nursery.start_soon(collect)
            published = []
            for size in (5, 50, 7, 500):
                result = await pub.publish("jobs", b"x", attrs={"size": size})
                assert result.seq is None  # no root numbers events in gossip mode
                published.append(result.msg_id)
            with trio.fail_after(20):
                while len(big) < 2:
                    await trio.sleep(0.05)
            # One more matching event as a barrier: nothing else arrives before it.
            last = await pub.publish("jobs", b"x", attrs={"size": 10})
            with trio.fail_after(20):
                while last.msg_id not in {e.msg_id for e in big}:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    assert [e.attrs["size"] for e in big] == [50, 500, 10]
    assert [e.msg_id for e in big[:2]] == [published[1], published[3]]
    assert all(e.seq is None and e.publisher == n[3].node for e in big)


def daemon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "overlay.cli", "daemon", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_bad_gossip_settings_are_refused_with_the_setting_named(tmp_path: Path) -> None:
    config = tmp_path / "overlay.toml"
    config.write_text('mode = "unstructured"\n[protocol]\nstrategy = "flood"\nfanout = 3\n')
    result = daemon("--config", str(config), "--bind", "127.0.0.1:0",
                    "--state-dir", str(tmp_path))
    assert result.returncode == 2
    assert "fanout" in result.stderr and "flood" in result.stderr


def test_a_second_daemon_on_the_same_state_dir_exits_with_a_clear_message(
        gossip_cluster: cluster.Inventory) -> None:
    taken = gossip_cluster.nodes[0].state_dir
    result = daemon("--bind", "127.0.0.1:0", "--state-dir", taken)
    assert result.returncode == 1
    assert "another daemon serves" in result.stderr and "--state-dir" in result.stderr
    assert cluster.node_status(gossip_cluster.nodes[0]) is not None  # the first one serves on
