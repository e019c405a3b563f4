"""Same seed, same bytes; another seed, other bytes."""

from __future__ import annotations

from pathlib import Path

from overlay.core.ids import format_id, hash_id
from overlay.sim.engine import Simulator
from overlay.sim.network import NetworkConfig
from overlay.testing.pingpong import PingPongCore


def run_scenario(seed: int, trace_dir: Path) -> dict[str, bytes]:
    """Ten nodes ping random others over a lossy, jittery network, one crashes."""
    sim = Simulator(seed, NetworkConfig(loss=0.1, jitter=0.02), trace_dir=trace_dir, run_id="det")
    addrs = [f"10.0.0.{i}:7000" for i in range(10)]
    for addr in addrs:
        sim.add_node(PingPongCore(addr, timeout=0.5), format_id(hash_id(addr)))
    for i, addr in enumerate(addrs):
        peer = addrs[sim.rng.randrange(len(addrs))]
        sim.at(i * 0.01, lambda a=addr, p=peer: sim.invoke(
            a, lambda core, now: core.start(now, p, count=20, window=4)))
    sim.at(0.3, lambda: sim.crash(addrs[sim.rng.randrange(len(addrs))]))
    sim.run(until=30.0)
    sim.close()
    return {p.name: p.read_bytes() for p in sorted(trace_dir.iterdir())}


def test_same_seed_gives_byte_identical_traces(tmp_path: Path) -> None:
    first = run_scenario(42, tmp_path / "a")
    second = run_scenario(42, tmp_path / "b")
    assert first == second
    assert sum(len(v) for v in first.values()) > 1000  # the scenario did write traces


def test_another_seed_gives_other_traces(tmp_path: Path) -> None:
    assert run_scenario(42, tmp_path / "a") != run_scenario(43, tmp_path / "b")


def test_lost_pings_are_retried_until_answered(tmp_path: Path) -> None:
    sim = Simulator(7, NetworkConfig(loss=0.3))
    a = sim.add_node(PingPongCore("a:1", timeout=0.5), "0a")
    sim.add_node(PingPongCore("b:1"), "0b")
    sim.invoke("a:1", lambda core, now: core.start(now, "b:1", count=30, window=5))
    sim.run(until=120.0)
    assert a.done and sorted(a.rtts) == list(range(30))
    assert sim.stats.messages_lost > 0


def test_partition_makes_peers_unreachable_until_healed() -> None:
    sim = Simulator(1, NetworkConfig(unreachable_after=0.5))
    a = sim.add_node(PingPongCore("a:1", timeout=100), "0a")
    sim.add_node(PingPongCore("b:1"), "0b")
    sim.partition([["a:1"], ["b:1"]])
    sim.invoke("a:1", lambda core, now: core.start(now, "b:1", count=1))
    sim.run(until=1.0)
    assert a.unreachable == [("b:1", 0)]
    sim.heal()
    sim.invoke("a:1", lambda core, now: core.start(now, "b:1", count=1))
    sim.run(until=2.0)
    assert a.rtts.keys() == {1}
