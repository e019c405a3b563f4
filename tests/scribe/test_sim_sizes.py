"""Every input the API accepts, through Scribe on a simulated Chord ring: events from 0
bytes to the largest payload, filters at every limit, attributes at the edges of their
types, replays, groups, expiries and unsubscribes, with loss and a crashed root.

Every message crosses the CBOR codec and is held to ``max_frame`` (``check_wire``): a
message the size model would let the daemon build but its transport refuse fails the
run. Invariants: no exception escapes a core; every acknowledged event reaches every
matching plain subscription that was in effect when it was published (and never ended)
exactly once; no subscription gets an event twice or out of seq order.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from matching import parse
from overlay.core.ids import hash_id
from overlay.core.limits import SizeLimits
from overlay.sim.engine import Simulator
from overlay.sim.network import NetworkConfig
from overlay.sim.scenarios.scribe import ChordRing
from overlay.sim.scenarios.trace_check import TraceCheck
from scribe import ScribeApp, ScribeConfig

#: The smallest max_frame: its limits are reached with events small enough to run fast.
SIZES = SizeLimits(1 << 16)
NODES = 8
BITS = 32
TOPICS = ("a", "\U0001f600" * 1024)  # the longest topic, in 4-byte characters


def _deepest() -> str:
    text = "(" * 64 + "a = 1" + ")" * 64
    parse(text)
    return text


def _longest_in() -> str:
    text = "a IN (" + ",".join(str(i) for i in range(1024)) + ")"
    parse(text)
    return text


def _longest_canonical() -> str:
    # Within the client's 4096 characters; its canonical text is about four times that.
    text = "a IN (" + ",".join(["1e15"] * 818) + ")"
    assert len(text) == 4096 and len(str(parse(text))) > 16000
    return text


def _longest_string() -> str:
    text = "s = '" + "\u00e9" * (4096 - 6) + "'"
    assert len(text) == 4096
    return text


FILTERS = ("", "a > 5", "s LIKE 'x%'", "b = TRUE OR a IS NULL", _deepest(), _longest_in(),
           _longest_canonical(), _longest_string(), f"a = {(1 << 63) - 1}",
           f"a = {-(1 << 63)}", "f < 1e-300", "a BETWEEN -5 AND 1000000000000000")

ATTR_VALUES = st.sampled_from([0, 1, 7, 1000, (1 << 63) - 1, -(1 << 63), 5e-324, 1e15,
                               -0.0, 1.5, True, False, "", "x", "xyz", "\u00e9" * 100,
                               "\U0001f600"])
ATTRS = st.dictionaries(st.sampled_from(["a", "b", "f", "s", "\u00e9t\u00e9"]), ATTR_VALUES,
                        max_size=5)
PAYLOADS = st.sampled_from([0, 1, 1000, 16384, SIZES.max_payload])


@dataclass(frozen=True)
class Subscribe:
    node: int
    topic: int
    filter: str
    group: str | None
    expiry: float | None
    replay_last: int | None


@dataclass(frozen=True)
class Publish:
    node: int
    topic: int
    attrs: dict[str, Any]
    payload: int
    reliable: bool


@dataclass(frozen=True)
class Unsubscribe:
    nth: int


CALLS = st.one_of(
    st.builds(Subscribe, st.integers(0, NODES - 1), st.integers(0, 1), st.sampled_from(FILTERS),
              st.sampled_from([None, None, None, "g"]), st.sampled_from([None, None, 5.0]),
              st.sampled_from([None, None, 0, 40])),
    st.builds(Publish, st.integers(0, NODES - 1), st.integers(0, 1), ATTRS, PAYLOADS,
              st.booleans()),
    st.builds(Unsubscribe, st.integers(0, 50)),
)


def run(calls: list[Subscribe | Publish | Unsubscribe], loss: float, crash_root: bool,
        trace_dir: Path, seed: int = 1) -> TraceCheck:
    sim = Simulator(seed, NetworkConfig(loss=loss), trace_dir=trace_dir, check_wire=True,
                    max_frame=SIZES.max_frame)
    config = ScribeConfig(sizes=SIZES, retain_count=64)
    ring = ChordRing(bootstrap="oracle", bits=BITS, stabilize_interval=1.0)
    nodes = ring.build(sim, NODES, lambda host: ScribeApp(host, config))
    start = ring.ready_at + 1.0
    subs: list[tuple[int, int]] = []  # (node, sub id) in the order made
    step = 0.5
    for i, call in enumerate(calls):
        at = start + i * step
        if isinstance(call, Subscribe):
            sub_id = i + 1
            subs.append((call.node, sub_id))
            replay = call.replay_last if call.group is None else None
            sim.at(at, lambda c=call, s=sub_id, r=replay: _invoke(
                sim, nodes[c.node].address, lambda core, now: core.app.subscribe(
                    now, TOPICS[c.topic], c.filter, s, c.expiry, c.group, replay_last=r)))
        elif isinstance(call, Publish):
            payload = b"\xa5" * call.payload
            sim.at(at, lambda c=call, p=payload: _invoke(
                sim, nodes[c.node].address, lambda core, now: core.app.publish(
                    now, TOPICS[c.topic], c.attrs, p, reliable=c.reliable)))
        elif subs:
            node, sub_id = subs[call.nth % len(subs)]
            sim.at(at, lambda n=node, s=sub_id: _invoke(
                sim, nodes[n].address, lambda core, now: _unsubscribe(core.app, now, s)))
    if crash_root:
        mid = hash_id(TOPICS[0], BITS)
        root = next(n for n in nodes if n.is_responsible(mid))
        sim.at(start + len(calls) * step / 2, lambda: ring.crash(sim, root))
    sim.run(until=start + len(calls) * step + 90.0)
    for node in nodes:
        if sim.alive(node.address):
            sim.invoke(node.address, lambda core, now: core.trace("node_down", reason="stop"))
    sim.close()
    return TraceCheck(trace_dir)


def _invoke(sim: Simulator, address: str, call: Any) -> None:
    if sim.alive(address):  # an application on a crashed host makes no calls
        sim.invoke(address, call)


def _unsubscribe(app: ScribeApp, now: float, sub_id: int) -> None:
    if sub_id in app.state.subs:  # it may have expired already
        app.unsubscribe(now, sub_id)


def check_promise(check: TraceCheck) -> dict[str, int]:
    """The promise over subscriptions that never ended, and no duplicate to any."""
    promise = check.reliability(only_lasting=True)
    counts = Counter((r["node"], r["sub"], r["msg_id"]) for r in check.by_ev["deliver"])
    promise["twice"] = sum(1 for n in counts.values() if n > 1)
    return promise


def test_bursts_of_the_largest_events_with_loss_and_a_root_crash(tmp_path: Path) -> None:
    """Deterministic: 60 events at the payload limit and 60 of 16 KiB on both topics,
    subscribers everywhere (filters at their limits among them), a replay of the last
    40, 5% loss, the first topic's root crashed halfway: gap fills, replays, replica
    syncs and handovers all carry more than one message's worth."""
    calls: list[Subscribe | Publish | Unsubscribe] = [
        Subscribe(n, t, FILTERS[(n + t) % len(FILTERS)] if n % 3 else "", None, None, None)
        for n in range(NODES) for t in range(2)]
    for i in range(120):
        calls.append(Publish(i % NODES, i % 2, {"a": i, "s": "x" * (i % 7), "b": i % 2 == 0},
                             SIZES.max_payload if i % 2 else 16384, True))
    calls.append(Subscribe(3, 0, "", None, None, 40))
    check = run(calls, loss=0.05, crash_root=True, trace_dir=tmp_path)
    promise = check_promise(check)
    assert promise["acknowledged"] >= 110 and promise["expected"] > 500, promise
    assert promise["lost"] == promise["twice"] == promise["out_of_order"] == 0, promise
    replayed = [r for r in check.by_ev["deliver"] if r.get("replay")]
    assert replayed, "the replay of the last 40 retained events delivered nothing"


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(calls=st.lists(CALLS, min_size=4, max_size=60), loss=st.sampled_from([0.0, 0.03]),
       crash_root=st.booleans())
def test_any_valid_call_sequence_keeps_the_delivery_promise(
        calls: list[Subscribe | Publish | Unsubscribe], loss: float, crash_root: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="sizes-") as tmp:
        promise = check_promise(run(calls, loss, crash_root, Path(tmp)))
    assert promise["lost"] == promise["twice"] == promise["out_of_order"] == 0, promise
