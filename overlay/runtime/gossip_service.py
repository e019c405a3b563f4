"""The unstructured mode: a daemon running a :class:`GossipNode`, and its API service.

:class:`GossipKind` tells the :class:`Daemon` how to build, start and stop the gossip
core (the daemon's seeds are the peer-sampling seeds); :class:`GossipService` is the
``PubSubService`` over it. Events carry no ``seq`` (there is no root to number them).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from overlay.core.records import TRACE_VERSION
from overlay.gossip.config import GossipConfig, config_from_settings
from overlay.gossip.node import GossipNode
from overlay.runtime.config import ConfigError
from overlay.runtime.core_service import CoreService
from overlay.runtime.logstore import LoadReport


def gossip_config(protocol: Mapping[str, Any]) -> GossipConfig:
    try:
        return config_from_settings(protocol)
    except ValueError as exc:
        raise ConfigError(f"[protocol]: {exc}") from None


@dataclass(frozen=True)
class GossipKind:
    config: GossipConfig

    def build(self, address: str, rng: random.Random) -> GossipNode:
        return GossipNode(address, rng, self.config)

    def start(self, core: GossipNode, now: float, seeds: tuple[str, ...]) -> None:
        core.trace("node_up", addr=core.address, mode="unstructured", version=TRACE_VERSION)
        core.start(now, seeds)

    def stop(self, core: GossipNode, now: float) -> bool:
        # Neighbours notice the silence (heartbeats) and replace us from their backups.
        core.trace("node_down", reason="stop")
        return False

    def leave_timeout(self) -> float:
        return 0.0  # no ``left`` notice is awaited (stop returns False)

    #: Nothing is persisted in unstructured mode: no root retains a topic's events.
    durable = False

    def restore(self, core: GossipNode, now: float, report: LoadReport) -> None:
        raise TypeError("the unstructured mode keeps no logs to restore")


class GossipService(CoreService[GossipNode]):
    mode = "unstructured"
    capabilities = GossipNode.capabilities

    @property
    def ready(self) -> bool:
        node = self.daemon.node
        return isinstance(node, GossipNode) and node.started

    def core_of(self, node: GossipNode) -> GossipNode:
        return node

    def core_status(self, node: GossipNode) -> dict[str, Any]:
        status = dict(node.status())
        for key in ("node", "address", "mode", "subscriptions"):
            status.pop(key, None)
        return status


__all__ = ["GossipKind", "GossipService", "gossip_config"]
