"""Dissemination strategies, one per module; :func:`make_strategy` picks one by its config."""

from __future__ import annotations

from typing import TYPE_CHECKING

from overlay.gossip.config import (
    AntiEntropyConfig,
    BlindCounterConfig,
    FloodConfig,
    PbcastConfig,
    RandomWalkConfig,
    RumorConfig,
    StrategyConfig,
)
from overlay.gossip.strategies.anti_entropy import AntiEntropy
from overlay.gossip.strategies.base import Strategy
from overlay.gossip.strategies.blind_counter import BlindCounter
from overlay.gossip.strategies.flood import Flood, Pbcast
from overlay.gossip.strategies.random_walk import RandomWalk
from overlay.gossip.strategies.rumor import RumorMongering

if TYPE_CHECKING:
    from overlay.gossip.node import GossipNode


def make_strategy(node: GossipNode, config: StrategyConfig) -> Strategy:
    if isinstance(config, PbcastConfig):
        return Pbcast(node, config)
    if isinstance(config, FloodConfig):
        return Flood(node, config)
    if isinstance(config, RandomWalkConfig):
        return RandomWalk(node, config)
    if isinstance(config, RumorConfig):
        return RumorMongering(node, config)
    if isinstance(config, BlindCounterConfig):
        return BlindCounter(node, config)
    if isinstance(config, AntiEntropyConfig):
        return AntiEntropy(node, config)
    raise TypeError(f"no strategy for {config!r}")


__all__ = ["Strategy", "make_strategy"]
