"""Durable consumers on real daemons (issue 27): ``overlay daemon`` processes on loopback,
applications as separate processes killed with SIGKILL.

- A consumer application killed with events in flight: they reach the other member of
  the work queue (at once: its connection closed), counted as a second attempt.
- The consumer's daemon killed: the consumer is attached from another daemon and
  resumes from its oldest unacknowledged event; then every daemon killed and restarted:
  the same, and nothing acknowledged comes again.
- The message-queue pattern: three workers on three daemons pull 5,000 tasks with
  ``fetch``; one worker is killed mid-run; every task is acknowledged by a worker, none
  lost, none acknowledged by two live workers.

Every wait is on a condition with a deadline; the cluster is torn down at the end."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import cbor2
import pytest
import trio

from deploy import cluster
from overlay.client import (
    AsyncClient,
    ConnectionLost,
    NotReady,
    RequestError,
    Timeout,
    connect,
    publish_event,
)
from scribe.consumer_values import Progress
from tests.integration.fast import FAST

pytestmark = pytest.mark.integration

EXTRA = FAST + "retain_count = 8192\n"
TASKS = 5000


@pytest.fixture
def ring(tmp_path: Path) -> Iterator[cluster.Inventory]:
    inventory = cluster.up(tmp_path / "cluster", 4, extra_config=EXTRA, timeout=90.0)
    try:
        yield inventory
    finally:
        outcome = cluster.down(inventory, grace=15.0)
        assert set(outcome.values()) <= {"stopped", "not running"}, outcome


def task_id(i: int) -> str:
    return f"{i + 1:032x}"


async def publish_tasks(api: str, topic: str, first: int, count: int) -> None:
    """Tasks ``first`` .. ``first + count - 1``, reliable, batched, retried until each is
    acknowledged (same msg_id: the root numbers it once)."""
    left = list(range(first, first + count))
    with trio.fail_after(90):
        while left:
            try:
                async with connect(api) as client:
                    outcomes = await client.publish_many(
                        [publish_event(topic, {"i": i}, b"task %d" % i, task_id(i))
                         for i in left])
                    left = [i for i, o in zip(left, outcomes, strict=True)
                            if not hasattr(o, "seq")]
            except (NotReady, Timeout, ConnectionLost):
                pass
            if left:
                await trio.sleep(0.3)


async def take(client: AsyncClient, topic: str, durable: str, count: int,
               ack_first: int, **settings: object) -> list[tuple[str, int, int]]:
    """Attach to ``durable`` and take ``count`` events: (msg_id, seq, attempt) each, the
    first ``ack_first`` acknowledged (the rest left in flight)."""
    got: list[tuple[str, int, int]] = []
    with trio.fail_after(60):
        async with client.subscribe(topic, durable=durable, ack=True, **settings) as sub:
            async for msg in sub:
                got.append((msg.msg_id, msg.seq or 0, msg.attempt))
                if len(got) <= ack_first:
                    await msg.ack()
                if len(got) == count:
                    break
    return got


HANGING = textwrap.dedent("""
    import sys
    from overlay.client import BlockingClient
    with BlockingClient.connect(sys.argv[1], timeout=None) as client:
        client.subscribe("jobs", durable="workers", ack=True, ack_wait=30, max_inflight=8)
        for msg in client.events():
            print(msg.msg_id, flush=True)
""")


async def test_a_killed_consumer_applications_events_go_to_the_other_member(
        ring: cluster.Inventory) -> None:
    a, b = ring.nodes[0], ring.nodes[1]
    # Member 1: an application, a separate process, that takes events and hangs before
    # it acknowledges any.
    app = subprocess.Popen([sys.executable, "-c", HANGING, a.api], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    try:
        await publish_tasks(b.api, "jobs", 0, 8)
        held = []
        with trio.fail_after(30):
            while len(held) < 8:  # the first 8 fill its max_inflight
                line = await trio.to_thread.run_sync(app.stdout.readline)  # type: ignore[union-attr]
                assert line, "the consumer application ended early"
                held.append(line)
        # A second member attaches, then the first application dies with 8 in flight.
        async with connect(b.api) as client, trio.open_nursery() as nursery:
            result: list[list[tuple[str, int, int]]] = []

            async def second() -> None:
                result.append(await take(client, "jobs", "workers", 8, ack_first=8,
                                         ack_wait=30.0, max_inflight=8))
            nursery.start_soon(second)
            await trio.sleep(1.0)  # attached (its subscribe reply came) before the kill
            os.kill(app.pid, signal.SIGKILL)
        (got,) = result
        assert sorted(m for m, _, _ in got) == [task_id(i) for i in range(8)]
        assert all(attempt == 2 for _, _, attempt in got)  # each a second delivery
        # Well before ack_wait (30 s): the connection's close detached the member.
    finally:
        if app.poll() is None:
            app.kill()
        app.wait()


def stored_floors(ring: cluster.Inventory, topic: str, name: str) -> dict[str, int]:
    """Each daemon's stored copy of a consumer: its acknowledgement floor, by node."""
    floors = {}
    for node in ring.nodes:
        path = Path(node.state_dir) / "topics.sqlite3"
        with closing(sqlite3.connect(path)) as db:
            row = db.execute("SELECT body FROM consumers WHERE topic = ? AND name = ?",
                             (topic, name)).fetchone()
        if row is not None:
            floors[node.name] = Progress.from_wire(cbor2.loads(row[0])[0]).ack_floor
    return floors


async def stored_at_least(ring: cluster.Inventory, topic: str, name: str, floor: int,
                          nodes: int) -> None:
    """Wait until ``nodes`` daemons hold the consumer on disk with its floor at ``floor``
    or more: the acknowledgements are stored (within FLUSH_DELAY of their arrival)."""
    with trio.fail_after(10):
        while sum(f >= floor for f in stored_floors(ring, topic, name).values()) < nodes:
            await trio.sleep(0.05)


async def test_a_consumer_resumes_from_another_daemon_and_after_a_whole_restart(
        ring: cluster.Inventory) -> None:
    first, second, third = ring.nodes[1], ring.nodes[2], ring.nodes[3]
    await publish_tasks(ring.nodes[0].api, "orders", 0, 30)
    async with connect(first.api) as client:
        got = await take(client, "orders", "billing", 12, ack_first=10, max_inflight=12)
    assert [s for _, s, _ in got] == list(range(1, 13))
    await stored_at_least(ring, "orders", "billing", 10, nodes=3)  # the root and 2 replicas
    # Its daemon dies with two events in flight (11, 12: never acknowledged).
    cluster.kill(ring, [first.name])
    async with connect(second.api) as client:
        got = await take(client, "orders", "billing", 10, ack_first=10, max_inflight=12)
    assert [s for _, s, _ in got] == list(range(11, 21))  # the oldest unacknowledged first
    assert [a for _, s, a in got if s in (11, 12)] == [2, 2]
    await stored_at_least(ring, "orders", "billing", 20, nodes=2)
    # Every daemon killed, and started again from its state directory: a daemon whose
    # copy is older (the first, down meanwhile) may be the root again; its replicas'
    # newer copies win.
    cluster.kill(ring, [n.name for n in ring.nodes if cluster.pid_alive(n.pid)])
    cluster.restart(ring, [n.name for n in ring.nodes], EXTRA)
    cluster.wait_until(lambda: cluster.all_ready(ring), 60.0, "every daemon to rejoin")
    async with connect(third.api) as client:
        got = await take(client, "orders", "billing", 10, ack_first=10, max_inflight=12)
    assert [s for _, s, _ in got] == list(range(21, 31))  # none of the 20 acknowledged


WORKER = textwrap.dedent("""
    import sys
    from overlay.client import BlockingClient
    api, log_path = sys.argv[1], sys.argv[2]
    with BlockingClient.connect(api, timeout=60) as client, open(log_path, "a") as log:
        sub = client.subscribe("tasks", durable="queue", ack=True, pull=True, ack_wait=20)
        while True:
            batch = client.fetch(sub, max=100, wait=1.0)
            if batch:
                # Handled (logged), then acknowledged: killed in between, the batch goes
                # to another worker; killed after the ack, the log still has it.
                log.write("".join(m.msg_id + "\\n" for m in batch))
                log.flush()
                client.ack(sub, [m.msg_id for m in batch])
""")


async def test_three_workers_pull_5000_tasks_and_one_is_killed_mid_run(
        ring: cluster.Inventory, tmp_path: Path) -> None:
    logs = [tmp_path / f"worker{i}.log" for i in range(3)]
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, node.api, str(log)],
                                stderr=subprocess.DEVNULL)
               for node, log in zip(ring.nodes[1:], logs, strict=True)]

    def handled(path: Path) -> list[str]:
        return path.read_text().split() if path.exists() else []

    try:
        await publish_tasks(ring.nodes[0].api, "tasks", 0, TASKS)
        with trio.fail_after(60):
            while len(handled(logs[0])) < 500:
                await trio.sleep(0.1)
        os.kill(workers[0].pid, signal.SIGKILL)
        everything = {task_id(i) for i in range(TASKS)}
        with trio.fail_after(120):
            while set().union(*map(handled, logs)) != everything:
                await trio.sleep(0.2)

        def floor() -> object:
            done = cli(ring.nodes[0], "consumers", "tasks", "--durable", "queue", "--json")
            return json.loads(done.stdout)["ack_floor"] if done.returncode == 0 else None

        with trio.fail_after(30):  # the last acknowledgements are on their way
            while await trio.to_thread.run_sync(floor) != TASKS:
                await trio.sleep(0.2)
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    live = handled(logs[1]) + handled(logs[2])
    assert len(live) == len(set(live)), "a task handed twice to live workers"
    assert set(live) | set(handled(logs[0])) == everything
    assert handled(logs[1]) and handled(logs[2])  # both live workers took a share


def cli(node: cluster.NodeEntry, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "overlay.cli", *args, "--api", node.api],
                          capture_output=True, text=True, timeout=60, check=False)


async def test_the_cli_subscribes_durably_fetches_and_lists_consumers(
        ring: cluster.Inventory) -> None:
    node = ring.nodes[2]
    await publish_tasks(ring.nodes[0].api, "work", 0, 5)
    # Push, acknowledging each event once printed: three now, the other two stay.
    done = await trio.to_thread.run_sync(lambda: cli(
        node, "sub", "work", "--durable", "printer", "--ack", "--count", "3", "--json"))
    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(e["seq"], e["attempt"]) for e in printed] == [(1, 1), (2, 1), (3, 1)]
    # Pull: another consumer of the topic takes all five in one fetch.
    done = await trio.to_thread.run_sync(lambda: cli(
        node, "fetch", "work", "--durable", "puller", "--ack", "--max", "10", "--wait", "2",
        "--json"))
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["seq"] for line in done.stdout.splitlines()] == [1, 2, 3, 4, 5]

    def listed() -> dict[str, dict[str, object]]:
        done = cli(ring.nodes[3], "consumers", "work", "--json")
        assert done.returncode == 0, done.stderr
        return {row["durable"]: row for row in map(json.loads, done.stdout.splitlines())}

    with trio.fail_after(10):  # the printer's last acknowledgements are on their way
        while (rows := await trio.to_thread.run_sync(listed))["printer"]["ack_floor"] != 3:
            await trio.sleep(0.1)
    assert (rows["printer"]["pending"], rows["printer"]["inflight"]) == (2, 0)
    assert (rows["puller"]["ack_floor"], rows["puller"]["pull"]) == (5, True)
    # A fetch past the limit is the daemon's bad_request: exit 1, the reason on stderr.
    done = await trio.to_thread.run_sync(lambda: cli(
        node, "fetch", "work", "--durable", "puller", "--ack", "--max", "10001"))
    assert done.returncode == 1 and "max" in done.stderr
    done = await trio.to_thread.run_sync(lambda: cli(
        node, "consumers", "work", "--durable", "printer", "--delete"))
    assert done.returncode == 0, done.stderr
    assert set(await trio.to_thread.run_sync(listed)) == {"puller"}


async def test_requests_on_durable_subscriptions_that_do_not_fit_are_refused_by_name(
        ring: cluster.Inventory) -> None:
    async with connect(ring.nodes[1].api) as client, \
            client.subscribe("misc", durable="p", ack=True, pull=True) as sub:
            with pytest.raises(RequestError, match="durable: it has no expiry") as refused:
                await sub.renew(5.0)
            assert refused.value.code == "bad_request"
            async with client.subscribe("misc") as plain:
                with pytest.raises(RequestError, match="not durable"):
                    await client.request({"op": "fetch", "sub": plain.sub})
            # A fetch waiting when its subscription ends is answered unknown_sub.
            async with trio.open_nursery() as nursery:
                outcome: list[BaseException] = []

                async def fetch() -> None:
                    try:
                        await client.request({"op": "fetch", "sub": sub.sub, "wait": 3})
                    except RequestError as exc:
                        outcome.append(exc)
                nursery.start_soon(fetch)
                await trio.sleep(0)  # the fetch is written first
                await client.request({"op": "unsubscribe", "sub": sub.sub})
            assert [getattr(e, "code", None) for e in outcome] == ["unknown_sub"]
