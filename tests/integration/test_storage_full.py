"""A daemon whose topic log is full (issue 26), on a real process: ``[storage] max_bytes``
makes SQLite refuse writes past the quota as a full disk would. Reliable publishes are
refused with ``storage_error`` (never acknowledged, never delivered); the daemon keeps
serving (unreliable publishes, ``status``, a new subscriber); once retention has
dropped old events (``retain_seconds``), or the daemon was restarted with a larger
quota, reliable publishes are acknowledged again, with seqs never given before.

Every wait is on a condition with a deadline; the daemon is torn down at the end."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from deploy import cluster
from overlay.client import AsyncClient, Event, StorageError, Subscription, connect
from tests.integration.fast import FAST

pytestmark = pytest.mark.integration

TOPIC = "logs"
#: 64 pages of 4 KiB; events of 8 KiB fill it within a few dozen publishes, well before
#: retention (5 s in the first test) drops any.
MAX_BYTES = 256 << 10
PAYLOAD = b"\x5a" * (8 << 10)


def config(retain_seconds: float, max_bytes: int) -> str:
    return FAST + f"retain_seconds = {retain_seconds}\n\n[storage]\nmax_bytes = {max_bytes}\n"


@pytest.fixture
def one(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[cluster.Inventory]:
    """One daemon, its protocol's ``retain_seconds`` the test's parameter."""
    inventory = cluster.up(tmp_path / "cluster", 1, extra_config=config(request.param, MAX_BYTES),
                           timeout=60.0)
    try:
        yield inventory
    finally:
        outcome = cluster.down(inventory, grace=15.0)
        assert set(outcome.values()) <= {"stopped", "not running"}, outcome


async def next_event(sub: Subscription, within: float = 10.0) -> Event:
    with trio.fail_after(within):
        return await sub.__anext__()


async def storage(client: AsyncClient) -> dict[str, object]:
    status = await client.status()
    assert isinstance(status["storage"], dict)
    return status["storage"]


async def fill(client: AsyncClient) -> tuple[dict[str, int], str]:
    """Reliable publishes until one is refused: the acknowledged ones (msg_id -> seq), and
    the refused msg_id."""
    acked: dict[str, int] = {}
    with trio.fail_after(60):
        for i in range(1, 200):
            msg_id = f"{i:032x}"
            try:
                seq = (await client.publish(TOPIC, PAYLOAD, msg_id=msg_id)).seq
            except StorageError as exc:
                assert exc.code == "storage_error" and exc.extra["msg_id"] == msg_id
                assert len(acked) >= 5
                return acked, msg_id
            assert seq is not None
            acked[msg_id] = seq
    raise AssertionError("the quota was never reached")


@pytest.mark.parametrize("one", [5.0], indirect=True)
async def test_a_full_log_refuses_reliable_publishes_and_the_daemon_keeps_serving(
        one: cluster.Inventory) -> None:
    daemon = one.nodes[0]
    async with connect(daemon.api) as client, client.subscribe(TOPIC) as reader:
        acked, refused = await fill(client)
        state = await storage(client)
        assert state["failing"] and state["failures"] >= 1 and state["max_bytes"] == MAX_BYTES
        topics = await trio.to_thread.run_sync(lambda: subprocess.run(
            [sys.executable, "-m", "overlay.cli", "topics", "--api", daemon.api],
            capture_output=True, text=True, timeout=30, check=True))
        assert f"max_bytes {MAX_BYTES}" in topics.stdout
        assert "storage: FAILING: database or disk is full" in topics.stdout

        # Unreliable events are served (delivered, not stored); so is a new subscriber.
        async with client.subscribe(TOPIC) as late:
            sent = await client.publish(TOPIC, b"still here", reliable=False)
            assert sent.seq is None
            for sub in (reader, late):
                while (event := await next_event(sub)).msg_id != sent.msg_id:
                    assert event.msg_id in acked  # nothing refused was delivered
        delivered_so_far = set(acked) | {sent.msg_id}

        # Retention drops the oldest events (5 s): the room they free takes reliable
        # publishes again. The refused msg_id is numbered afresh, after every seq given.
        with trio.fail_after(60):
            while True:
                try:
                    seq = (await client.publish(TOPIC, PAYLOAD, msg_id=refused)).seq
                    break
                except StorageError:
                    await trio.sleep(0.2)
        assert seq is not None and seq > max(acked.values()) + 1  # + the unreliable one
        event = await next_event(reader)
        assert (event.msg_id, event.seq) == (refused, seq)
        assert (await storage(client))["failing"] is None
        assert refused not in delivered_so_far


@pytest.mark.parametrize("one", [300.0], indirect=True)
async def test_a_larger_quota_after_a_restart_takes_publishes_without_reusing_a_seq(
        one: cluster.Inventory) -> None:
    async with connect(one.nodes[0].api) as client:
        acked, refused = await fill(client)
        # The topic's counter, the refused event's seq included (kept without its event).
        counter = (await client.status())["logs"][TOPIC]["counter"]
    assert counter > max(acked.values())
    cluster.kill(one, ["n00"])
    (daemon,) = cluster.restart(one, ["n00"], config(300.0, 4 * MAX_BYTES))
    await trio.to_thread.run_sync(cluster.wait_until, lambda: cluster.all_ready(one), 60.0,
                                  "the daemon to restart")
    async with connect(daemon.api) as client:
        with trio.fail_after(60):  # the restarted root recovers the topic first
            seq = (await client.publish(TOPIC, PAYLOAD, msg_id=refused)).seq
        assert seq is not None and seq > counter
        assert (await storage(client))["max_bytes"] == 4 * MAX_BYTES
        async with client.subscribe(TOPIC, since_seq=0) as replay:
            kept = {}
            while len(kept) < len(acked) + 1:
                event = await next_event(replay)
                kept[event.msg_id] = event.seq
        assert kept == {**acked, refused: seq}  # every acknowledged event, none refused
