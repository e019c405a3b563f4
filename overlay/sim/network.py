"""The simulated network: link delays from node coordinates, loss, and partitions.

Every node gets a point in the unit square (drawn from the simulation's seeded RNG);
a link's one-way delay is ``base + distance * per_unit`` plus optional uniform jitter.
Links stay FIFO, as TCP connections are, even with jitter.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class NetworkConfig:
    """Parameters of the latency, loss and failure-detection model (seconds)."""

    base_delay: float = 0.005
    delay_per_unit: float = 0.100
    jitter: float = 0.0
    loss: float = 0.0
    #: How long a sender waits before learning that a peer is unreachable (crashed or
    #: across a partition): a connect or write timeout of the real transport.
    unreachable_after: float = 1.0

    def __post_init__(self) -> None:
        for name in ("base_delay", "delay_per_unit", "jitter", "unreachable_after"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if not 0.0 <= self.loss < 1.0:
            raise ValueError(f"loss must be within [0, 1), got {self.loss}")


class Network:
    """Decides, for each message, whether and when it arrives."""

    def __init__(self, config: NetworkConfig, rng: random.Random) -> None:
        self.config = config
        self._rng = rng
        self._coords: dict[str, tuple[float, float]] = {}
        self._group: dict[str, int] = {}
        self._last_arrival: dict[tuple[str, str], float] = {}
        self.link_loss: dict[tuple[str, str], float] = {}

    def place(self, addr: str, coords: tuple[float, float] | None = None) -> None:
        if coords is None:
            coords = (self._rng.random(), self._rng.random())
        self._coords[addr] = coords

    def coords(self, addr: str) -> tuple[float, float]:
        return self._coords[addr]

    def delay(self, src: str, dest: str) -> float:
        (x1, y1), (x2, y2) = self._coords[src], self._coords[dest]
        cfg = self.config
        delay = cfg.base_delay + math.hypot(x1 - x2, y1 - y2) * cfg.delay_per_unit
        if cfg.jitter:
            delay += self._rng.random() * cfg.jitter
        return delay

    def arrival(self, now: float, src: str, dest: str) -> float:
        """When a message sent now from src reaches dest, keeping the link FIFO."""
        at = now + self.delay(src, dest)
        if self.config.jitter:
            key = (src, dest)
            at = max(at, self._last_arrival.get(key, 0.0))
            self._last_arrival[key] = at
        return at

    def lost(self, src: str, dest: str) -> bool:
        loss = self.link_loss.get((src, dest), self.config.loss)
        return loss > 0 and self._rng.random() < loss

    # -- partitions -----------------------------------------------------------------

    def partition(self, groups: list[list[str]]) -> None:
        """Split the network: nodes in different groups cannot reach each other.

        Nodes named in no group form one more group together.
        """
        self._group = {addr: i for i, group in enumerate(groups) for addr in group}

    def heal(self) -> None:
        self._group = {}

    def connected(self, src: str, dest: str) -> bool:
        if not self._group:
            return True
        return self._group.get(src, -1) == self._group.get(dest, -1)
