"""A root whose disk fails in the simulator (issue 26): its reliable publishes are
refused (``storage_error``), never acknowledged; unreliable events still reach the
subscribers; once the disk writes again publishes are acknowledged, and after a crash
of every node no seq is given twice, the refused one included (the store kept the
counter without the event)."""

from __future__ import annotations

from overlay.core.effects import Notice
from overlay.core.storage import SyncPolicy
from overlay.sim.scenarios.chord_world import sim_address
from scribe.durability import MemoryLogs
from tests.scribe.test_durable_sim import STREAM_AT, World, build, crash_and_restart_everyone

TOPIC = "orders"


def root_of(world: World, topic: str) -> str:
    (root,) = [a for a in world.nodes
               if world.sim.alive(a) and topic in world.app(a).state.numbering]
    return root


def publish(world: World, at: float, addr: str, msg_id: str, reliable: bool = True) -> None:
    sim = world.sim
    sim.at(at, lambda: sim.invoke(addr, lambda core, now: core.app.publish(
        now, TOPIC, {}, b"x", msg_id, reliable=reliable)))


def test_a_failing_root_refuses_reliable_publishes_and_never_reuses_their_seq() -> None:
    world = build(5, 12, SyncPolicy("always"))
    sim = world.sim
    refused: list[str] = []

    def on_notice(addr: str, notice: Notice, now: float) -> None:
        if notice.kind == "refused":
            assert notice.data["code"] == "storage_error"
            refused.append(notice.data["msg_id"])

    sim.on_notice.append(on_notice)
    reader = sim_address(5)
    sim.at(1.0, lambda: sim.invoke(reader, lambda core, now: core.app.subscribe(
        now, TOPIC, "", 1)))
    publish(world, 1.0, sim_address(1), "01")  # the root starts numbering
    sim.run(until=STREAM_AT)
    root = root_of(world, TOPIC)
    publisher = next(a for a in sorted(world.nodes) if a not in (root, reader))
    assert (TOPIC, "01") in world.acked
    before = world.app(root).state.seq[TOPIC]

    sim.fail_storage(root)
    publish(world, STREAM_AT + 0.5, publisher, "02")  # numbered, then its copy fails
    publish(world, STREAM_AT + 0.6, publisher, "03")  # refused before numbering
    publish(world, STREAM_AT + 0.7, publisher, "04", reliable=False)
    sim.run(until=STREAM_AT + 1.0)
    assert refused == ["02", "03"]
    assert (TOPIC, "02") not in world.acked and (TOPIC, "03") not in world.acked
    spent = world.app(root).state.seq[TOPIC]
    assert spent == before + 2  # "02" got a seq and lost it; "03" got none; "04" one
    delivered = [m for _, m, _ in world.delivered[(reader, 1)]]
    assert "04" in delivered and "02" not in delivered and "03" not in delivered
    disk = sim.storage(root)
    assert isinstance(disk, MemoryLogs)
    (log,) = [log for log in disk.load() if log.topic == TOPIC]
    assert log.counter >= spent and "02" not in {e.msg_id for e in log.events}

    sim.fail_storage(root, None)
    publish(world, STREAM_AT + 2.5, publisher, "05")  # REFUSE_SECONDS later: stored
    publish(world, STREAM_AT + 2.6, publisher, "02")  # the refused one, again
    sim.run(until=STREAM_AT + 4.0)
    assert world.acked[(TOPIC, "05")] == spent + 1
    assert world.acked[(TOPIC, "02")] == spent + 2  # numbered afresh, not before + 1

    crash_and_restart_everyone(world, STREAM_AT + 4.5)
    for i in range(6, 12):
        publish(world, 25.0 + 0.1 * i, publisher, f"{i:02x}")
    sim.run(until=40.0)
    seqs = [seq for (topic, _), seq in world.acked.items() if topic == TOPIC]
    assert len(seqs) == len(set(seqs)), "a seq was given twice"
    assert all(world.acked[(TOPIC, f"{i:02x}")] > spent + 2 for i in range(6, 12))
