"""Issue 9's lab on real namespaces: six hosts, 5% loss on every host's way out, 20 ms
added by the daemons to every peer frame. Subscriptions and reliable publishes work
across hosts; a partition into 4 + 2 hosts then a heal ends with one ring, and the
reliable events published on one side during the partition reach the subscribers on
the other side (the root retains them).

Needs root, ``ip netns`` and ``nft``: skipped with the reason where they are missing.
Every wait is on a condition with a deadline; the lab is removed even on failure."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import trio

from deploy import lab
from deploy.netns import lab_support
from overlay.client import ConnectionLost, Event, NotReady, Timeout, connect
from overlay.core.ids import hash_id
from tests.integration.fast import FAST

pytestmark = pytest.mark.integration

HOSTS = 6
SIDE_A, SIDE_B = [0, 1, 2, 3], [4, 5]
#: Rings split by the partition look for each other every second (10 s by default).
PROTOCOL = FAST + "merge_interval = 1.0\n"


@pytest.fixture(scope="module")
def six_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lab.LabInventory]:
    reason = lab_support()
    if reason is not None:
        pytest.skip(f"no network-namespace lab here: {reason}")
    directory = tmp_path_factory.mktemp("lab")
    inventory = lab.up(directory, HOSTS, loss=0.05, delay_ms=20.0,
                       name=f"t{os.getpid() % 10**6}", extra_config=PROTOCOL, timeout=60.0)
    try:
        yield inventory
    finally:
        lab.down(inventory, grace=10.0)
        assert not inventory.topology.existing_namespaces()


def owner(inventory: lab.LabInventory, topic: str, hosts: list[int]) -> int:
    """Index of the host responsible for ``topic``'s key among ``hosts``."""
    key = hash_id(topic, len(inventory.nodes[0].node) * 4)
    ranked = sorted(hosts, key=lambda i: int(inventory.nodes[i].node, 16))
    return next((i for i in ranked if int(inventory.nodes[i].node, 16) >= key), ranked[0])


async def publish_acknowledged(api: str, topic: str, msg_id: str, number: int,
                               deadline: float = 60.0) -> int | None:
    """Publish one reliable event until acknowledged (same msg_id on every try)."""
    with trio.fail_after(deadline):
        while True:
            try:
                async with connect(api) as client:
                    return (await client.publish(topic, b"x", attrs={"n": number},
                                                 msg_id=msg_id)).seq
            except (NotReady, Timeout, ConnectionLost):
                await trio.sleep(0.2)


class Listeners:
    """Subscriptions to every topic on some hosts, recording what each receives."""

    def __init__(self, inventory: lab.LabInventory, hosts: list[int], topics: list[str]):
        self.inventory, self.hosts, self.topics = inventory, hosts, topics
        self.received: dict[tuple[int, str], list[Event]] = {
            (h, t): [] for h in hosts for t in topics}

    async def run(self, nursery: trio.Nursery) -> None:
        for host in self.hosts:
            for topic in self.topics:
                await nursery.start(self._listen, host, topic)

    async def _listen(self, host: int, topic: str,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with connect(self.inventory.nodes[host].api) as client, \
                client.subscribe(topic, "") as sub:
            task_status.started()
            async for event in sub:
                self.received[host, topic].append(event)

    def missing(self, sent: dict[str, set[str]], hosts: list[int]) -> dict[str, int]:
        """For each (host, topic) on ``hosts`` lacking some of the msg_ids ``sent`` on
        its topic: how many it lacks."""
        lacking = {f"h{h}/{t}": len(sent[t] - {e.msg_id for e in got})
                   for (h, t), got in self.received.items() if h in hosts and t in sent}
        return {name: count for name, count in lacking.items() if count}

    async def wait_in_trees(self, publisher: str, deadline: float) -> None:
        """Probe until every subscription has heard one (an event numbered before a
        subscription joined is not that subscription's)."""
        with trio.fail_after(deadline):
            probe = 0
            while True:
                probe += 1
                for topic in self.topics:
                    await publish_acknowledged(publisher, topic, f"ee{probe:030x}", -1)
                await trio.sleep(0.5)
                if all(any(e.attrs["n"] == -1 for e in got) for got in self.received.values()):
                    return

    def describe(self) -> str:
        """What each subscription received: (attribute n, seq) in arrival order."""
        return "\n".join(f"h{h}/{t}: {[(e.attrs['n'], e.seq) for e in got]}"
                         for (h, t), got in self.received.items())

    def check_once_in_order(self) -> None:
        for (host, topic), got in self.received.items():
            counts = Counter(e.msg_id for e in got)
            assert not [m for m, c in counts.items() if c > 1], f"h{host}/{topic}: twice"
            seqs = [e.seq for e in got]
            assert seqs == sorted(seqs), f"h{host}/{topic}: out of seq order {seqs}"


async def wait_until_none(problem: Callable[[], object], deadline: float, what: str,
                          details: Callable[[], str] = str) -> None:
    """Wait until ``problem()`` says nothing is wrong; past the deadline, fail with the
    last thing it said (and ``details()``)."""
    said: object = None
    with trio.move_on_after(deadline):
        while (said := await trio.to_thread.run_sync(problem)):
            await trio.sleep(0.2)
        return
    raise AssertionError(f"timed out after {deadline:.0f} s waiting for {what}: {said}\n"
                         f"{details()}")


def first_n(topic: str) -> int:
    """Numbers (and msg_ids) of one test's events on ``part.<i>``: its own range."""
    return 10_000 + 100 * int(topic.rsplit(".", 1)[1])


async def publish_many(inventory: lab.LabInventory, host: int, topic: str, first: int,
                       count: int) -> set[str]:
    """``count`` reliable events on ``topic`` from ``host``, each until acknowledged."""
    sent = set()
    for i in range(first, first + count):
        msg_id = f"{i:032x}"
        await publish_acknowledged(inventory.nodes[host].api, topic, msg_id, i)
        sent.add(msg_id)
    return sent


async def test_subscriptions_and_reliable_publishes_work_across_hosts(
        six_hosts: lab.LabInventory) -> None:
    assert lab.ring_problem(six_hosts) is None
    listeners = Listeners(six_hosts, [1, 3, 5], ["lab.a", "lab.b"])
    async with trio.open_nursery() as nursery:
        await listeners.run(nursery)
        await listeners.wait_in_trees(six_hosts.nodes[0].api, deadline=45)
        sent = {"lab.a": await publish_many(six_hosts, 0, "lab.a", 1, 5),
                "lab.b": await publish_many(six_hosts, 4, "lab.b", 101, 5)}
        await wait_until_none(lambda: listeners.missing(sent, [1, 3, 5]), 45,
                              "every subscriber to have every event")
        nursery.cancel_scope.cancel()
    listeners.check_once_in_order()


@pytest.mark.parametrize("root_side", [pytest.param(SIDE_A, id="root-with-publisher"),
                                       pytest.param(SIDE_B, id="root-across")])
async def test_events_published_during_a_partition_reach_the_other_side_after_heal(
        six_hosts: lab.LabInventory, root_side: list[int]) -> None:
    # Topics whose root on the whole ring is on ``root_side`` of the cut to come.
    whole = list(range(HOSTS))
    topics = [t for t in (f"part.{i}" for i in range(400))
              if owner(six_hosts, t, whole) in root_side][:2]
    listeners = Listeners(six_hosts, [1, 4, 5], topics)
    async with trio.open_nursery() as nursery:
        await listeners.run(nursery)
        await listeners.wait_in_trees(six_hosts.nodes[0].api, deadline=45)
        lab.partition(six_hosts, SIDE_A, SIDE_B)
        try:
            # Host 0 publishes: its side's ring repairs itself, then numbers them.
            sent = {topic: await publish_many(six_hosts, 0, topic, first_n(topic), 5)
                    for topic in topics}
            await wait_until_none(lambda: listeners.missing(sent, [1]), 45,
                                  "the subscriber on the publisher's side")
            assert listeners.missing(sent, [4, 5]) == {f"h{h}/{t}": 5 for h in (4, 5)
                                                       for t in topics}, "partition leaked"
        finally:
            lab.heal(six_hosts)
        await wait_until_none(lambda: lab.ring_problem(six_hosts), 60, "one ring again")
        await wait_until_none(lambda: listeners.missing(sent, [4, 5]), 60,
                              "the partition's events on the other side", listeners.describe)
        # The trees are whole again: a new event reaches every subscriber.
        after = {topic: await publish_many(six_hosts, 5, topic, first_n(topic) + 50, 1)
                 for topic in topics}
        await wait_until_none(lambda: listeners.missing(after, [1, 4, 5]), 45,
                              "an event published after the heal")
        nursery.cancel_scope.cancel()
    listeners.check_once_in_order()


async def test_both_sides_publish_on_one_topic_and_every_subscriber_gets_every_event_once(
        six_hosts: lab.LabInventory) -> None:
    """Issue 26's lab: a 3 + 3 partition, a root on each side numbering the same topic;
    at the heal the root that keeps the key merges the other's log (scribe.merge)."""
    left, right = [0, 1, 2], [3, 4, 5]
    topic = "split.0"
    listeners = Listeners(six_hosts, [1, 2, 4, 5], [topic])
    async with trio.open_nursery() as nursery:
        await listeners.run(nursery)
        await listeners.wait_in_trees(six_hosts.nodes[0].api, deadline=45)
        lab.partition(six_hosts, left, right)
        try:
            sent: dict[str, set[str]] = {topic: set()}
            for host, first in ((0, 20_000), (3, 20_100)):
                sent[topic] |= await publish_many(six_hosts, host, topic, first, 6)
            # Each side's subscribers have their side's events, and only those.
            await wait_until_none(lambda: listeners.missing(sent, [1, 2, 4, 5]) != {
                f"h{h}/{topic}": 6 for h in (1, 2, 4, 5)}, 45,
                "each side's subscribers to have their side's events", listeners.describe)
        finally:
            lab.heal(six_hosts)
        await wait_until_none(lambda: lab.ring_problem(six_hosts), 60, "one ring again")
        await wait_until_none(lambda: listeners.missing(sent, [1, 2, 4, 5]), 60,
                              "every event on both sides", listeners.describe)
        after = {topic: await publish_many(six_hosts, 5, topic, 20_200, 1)}
        await wait_until_none(lambda: listeners.missing(after, [1, 2, 4, 5]), 45,
                              "an event published after the heal", listeners.describe)
        nursery.cancel_scope.cancel()
    listeners.check_once_in_order()
