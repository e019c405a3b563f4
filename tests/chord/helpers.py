"""Building Chord nodes in exact states for unit tests, and reading their effects."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from chord.config import ChordConfig
from chord.kbr import NodeRef
from chord.node import ChordNode
from chord.oracle import SortedRing
from chord.ring import node_id
from overlay.core.effects import Effect, Notice, Send, Trace
from overlay.core.messages import Message, message

BITS = 16


def ring_refs(count: int, bits: int = BITS) -> list[NodeRef]:
    """``count`` nodes with distinct ids, in ring (id) order."""
    refs: dict[int, NodeRef] = {}
    i = 0
    while len(refs) < count:
        addr = f"10.9.0.{i}:7000"
        refs.setdefault(node_id(addr, bits), NodeRef(node_id(addr, bits), addr))
        i += 1
    return [refs[k] for k in sorted(refs)]


def config(**overrides: Any) -> ChordConfig:
    """Small ring, no jitter: timers fire exactly one interval apart. Only stabilize
    runs within the first 100 s unless a test asks for the other timers."""
    settings: dict[str, Any] = {"bits": BITS, "jitter": 0.0, "successors": 3,
                                "fix_fingers_interval": 100.0,
                                "check_predecessor_interval": 100.0,
                                "merge_interval": 100.0}
    settings.update(overrides)
    return ChordConfig(**settings)


def make_node(ref: NodeRef, app: Any = None, **overrides: Any) -> ChordNode:
    return ChordNode(ref.addr, random.Random(1), config(**overrides), app=app)


def in_ring(ref: NodeRef, pred: NodeRef | None, successors: list[NodeRef],
            knows: list[NodeRef] | None = None, app: Any = None,
            **overrides: Any) -> ChordNode:
    """A node already in a ring with the given predecessor and successor list, and the
    fingers it would have in a ring of itself and ``knows`` (default: its successors)."""
    node = make_node(ref, app=app, **overrides)
    node.successors.replace(successors)
    node.fingers.nodes = SortedRing([ref, *(knows or successors)]).fingers(node)
    node.set_predecessor(0.0, pred)
    node.became_member(0.0)
    node.on_timer(0.0)  # the stabilize that joining schedules at once
    node.drain_effects()
    return node


def sends(effects: list[Effect]) -> list[tuple[str, Message]]:
    return [(e.dest, e.msg) for e in effects if isinstance(e, Send)]


def traces(effects: list[Effect], ev: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    return [(e.ev, e.fields) for e in effects if isinstance(e, Trace) and ev in (None, e.ev)]


def notices(effects: list[Effect]) -> list[tuple[str, dict[str, Any]]]:
    return [(e.kind, e.data) for e in effects if isinstance(e, Notice)]


@message("test.chord_payload")
class Payload(Message):
    text: str


@dataclass
class RecordingApp:
    """A KBR application that records every up-call; ``stop_at`` makes forward stop."""

    stop: bool = False
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    deadline: float | None = None

    def forward(self, now: float, key: int, msg: Message, next_hop: NodeRef) -> Message | None:
        self.calls.append(("forward", key, msg, next_hop.id))
        return None if self.stop else msg

    def deliver(self, now: float, key: int, msg: Message, hops: int) -> None:
        self.calls.append(("deliver", key, msg, hops))

    def on_direct(self, now: float, src: str, msg: Message) -> None:
        self.calls.append(("direct", src, msg))

    def on_unreachable(self, now: float, dest: str, msg: Message) -> None:
        self.calls.append(("unreachable", dest, msg))

    def on_route_failed(self, now: float, key: int, msg: Message) -> None:
        self.calls.append(("route_failed", key, msg))

    def update(self, now: float, node: NodeRef, joined: bool) -> None:
        self.calls.append(("update", node.id, joined))

    def on_timer(self, now: float) -> None:
        self.calls.append(("timer", now))
        self.deadline = None

    def next_deadline(self) -> float | None:
        return self.deadline

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == kind]
