"""The structured mode's :class:`PubSubService`: the local API over Scribe on Chord."""

from __future__ import annotations

from typing import Any

from chord.kbr import NodeRef
from chord.node import ChordNode
from chord.ring import hex_id
from overlay.runtime.api import ApiError
from overlay.runtime.core_service import CoreService
from scribe.app import ScribeApp


class ScribeService(CoreService[ChordNode]):
    mode = "structured"
    capabilities = ScribeApp.capabilities

    @property
    def ready(self) -> bool:
        node = self.daemon.node
        return isinstance(node, ChordNode) and node.joined and not node.leaving

    def core_of(self, node: ChordNode) -> ScribeApp:
        if not isinstance(node.app, ScribeApp):
            raise ApiError("internal", "this node runs no Scribe application")
        return node.app

    def durable_core(self, node: ChordNode) -> ScribeApp:
        return self.core_of(node)

    def core_status(self, node: ChordNode) -> dict[str, Any]:
        state = node.state()

        def ref(n: NodeRef) -> dict[str, str]:
            return {"node": hex_id(n.id, node.config.bits), "address": n.addr}

        return {
            "successor": ref(state.successors[0]) if state.successors else None,
            "predecessor": None if state.predecessor is None else ref(state.predecessor),
            "successors": [ref(s) for s in state.successors],
            "topics": self.core_of(node).status(),
            "logs": self.core_of(node).logs(),
            "consumers": self.core_of(node).consumers.reports(),
            "storage": self._storage(),
        }

    def _storage(self) -> dict[str, Any] | None:
        storage = self.daemon.storage
        if storage is None:
            return None
        return {"path": str(storage.store.path), "sync": str(storage.store.policy),
                **storage.stats()}


__all__ = ["ScribeService"]
