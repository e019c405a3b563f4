"""Chord nodes in the simulator, with the ground truth scenarios and tests check against.

:class:`ChordWorld` creates nodes with unique ids, starts them (create, join through a
seed, or tables from the oracle), crashes them, and keeps the *true* ring: the live
nodes that have completed their join, sorted by id. ``succ(key)`` over that ring is
what a lookup must return to count as correct.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from chord.config import ChordConfig
from chord.kbr import KbrApplication, NodeRef
from chord.node import ChordNode
from chord.oracle import SortedRing, build_tables, ring_errors
from chord.ring import node_id
from overlay.sim.engine import Simulator

AppFactory = Callable[[ChordNode], KbrApplication]


def sim_address(index: int) -> str:
    return f"10.{index >> 16 & 255}.{index >> 8 & 255}.{index & 255}:7400"


class ChordWorld:
    def __init__(self, sim: Simulator, config: ChordConfig,
                 app_factory: AppFactory | None = None) -> None:
        self.sim = sim
        self.config = config
        self.app_factory = app_factory
        self.nodes: list[ChordNode] = []
        self._used_ids: set[int] = set()
        self._next_index = 0
        #: Started but not yet in the true ring (joins under way).
        self._joining: list[ChordNode] = []
        self._ring_ids: list[int] = []
        self._ring_nodes: dict[int, ChordNode] = {}

    # -- nodes -----------------------------------------------------------------------------

    def spawn(self) -> ChordNode:
        """A fresh node at a new address whose id no node ever had (small rings collide)."""
        while True:
            addr = sim_address(self._next_index)
            self._next_index += 1
            ident = node_id(addr, self.config.bits)
            if ident not in self._used_ids:
                break
        self._used_ids.add(ident)
        node = ChordNode(addr, self.sim.node_rng(addr), self.config)
        if self.app_factory is not None:
            node.app = self.app_factory(node)
        self.sim.add_node(node, node.node_hex)
        self.nodes.append(node)
        return node

    def create(self, node: ChordNode) -> None:
        self.sim.invoke(node.address, lambda core, now: core.create(now))
        self._joining.append(node)

    def join(self, node: ChordNode, *seeds: ChordNode) -> None:
        self.sim.invoke(node.address, lambda core, now: core.join(
            now, [seed.address for seed in seeds]))
        self._joining.append(node)

    def bootstrap_oracle(self, count: int) -> list[ChordNode]:
        """``count`` nodes with correct tables at once."""
        fresh = [self.spawn() for _ in range(count)]
        build_tables(fresh, self.sim.now)
        for node in fresh:
            self.sim.invoke(node.address, lambda core, now: None)  # carry out its effects
            self._joining.append(node)
        return fresh

    def crash(self, node: ChordNode) -> None:
        self.sim.crash(node.address)
        self._drop(node)

    def leave(self, node: ChordNode) -> None:
        self.sim.invoke(node.address, lambda core, now: core.leave(now))
        self._drop(node)

    def _drop(self, node: ChordNode) -> None:
        if node in self._joining:
            self._joining.remove(node)
        elif node.local.id in self._ring_nodes:
            del self._ring_nodes[node.local.id]
            self._ring_ids.remove(node.local.id)

    # -- the truth ----------------------------------------------------------------------------

    def live(self) -> list[ChordNode]:
        """Live nodes that completed their join, in id order."""
        self._catch_up()
        return [self._ring_nodes[i] for i in self._ring_ids]

    def true_owner(self, key: int) -> NodeRef | None:
        self._catch_up()
        if not self._ring_ids:
            return None
        i = bisect.bisect_left(self._ring_ids, key) % len(self._ring_ids)
        return self._ring_nodes[self._ring_ids[i]].local

    def true_ring(self) -> SortedRing:
        return SortedRing([n.local for n in self.live()])

    def errors(self, fingers: bool = True, limit: int = 20) -> list[str]:
        """How the live nodes' tables differ from the true ring's (empty: all correct)."""
        return ring_errors(self.live(), fingers=fingers, limit=limit)

    def _catch_up(self) -> None:
        if not any(n.joined for n in self._joining):
            return
        still = []
        for node in self._joining:
            if node.joined:
                bisect.insort(self._ring_ids, node.local.id)
                self._ring_nodes[node.local.id] = node
            else:
                still.append(node)
        self._joining = still
