"""A whole node as ``overlay daemon`` runs it: the local API over Scribe on Chord
(structured mode) or over gossip (unstructured mode).

:func:`build_node` assembles the pieces around a :class:`Daemon`; the API server
runs as one of the daemon's services, in its nursery. Once the API listens, the daemon
writes ``<state_dir>/daemon.json`` (``pid``, ``node``, ``address``, ``api``, ``tcp``,
``trace_dir``, ``mode``) atomically, which is how ``overlay cluster`` and scripts learn
the ports a daemon bound (port 0 means any free one); the file is removed on stop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

import trio

from chord.node import ChordNode
from overlay.core.messages import Message
from overlay.gossip.node import GossipNode
from overlay.runtime.api import ApiConfig, ApiServer
from overlay.runtime.config import ConfigError, DaemonConfig
from overlay.runtime.core_service import CoreService
from overlay.runtime.daemon import ChordKind, Daemon
from overlay.runtime.gossip_service import GossipKind, GossipService, gossip_config
from overlay.runtime.scribe_service import ScribeService
from scribe.app import ScribeApp
from scribe.config import ScribeConfig
from scribe.messages import TreeQuery

DAEMON_INFO = "daemon.json"
#: Scribe's ``[protocol]`` settings (the size model comes from ``[limits]``, the
#: retention rules from ``[[retention]]``).
_SCRIBE_SETTINGS = {f.name: f for f in dataclasses.fields(ScribeConfig)
                    if f.init and f.name not in ("sizes", "retention")}


def split_protocol(protocol: Mapping[str, Any]) -> tuple[dict[str, Any], ScribeConfig]:
    """``[protocol]`` names Chord and Scribe settings side by side: the Scribe ones
    (``heartbeat_interval``, ``max_children``, ...) are taken out and checked here."""
    chord: dict[str, Any] = {}
    scribe: dict[str, Any] = {}
    for name, value in protocol.items():
        (scribe if name in _SCRIBE_SETTINGS else chord)[name] = value
    for name, value in scribe.items():
        default = _SCRIBE_SETTINGS[name].default
        if isinstance(default, bool) and not isinstance(value, bool):
            raise ConfigError(f"[protocol] {name} must be true or false, got {value!r}")
        if isinstance(default, float) and (isinstance(value, bool)
                                           or not isinstance(value, int | float)):
            raise ConfigError(f"[protocol] {name} must be a number, got {value!r}")
    try:
        return chord, ScribeConfig(**scribe)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"[protocol]: {exc}") from None


def api_config(config: DaemonConfig) -> ApiConfig:
    tcp = None
    if config.api_tcp is not None:
        host, _, port = config.api_tcp.rpartition(":")
        tcp = (host.strip("[]"), int(port))
    try:
        return ApiConfig(socket_path=config.api_socket_path, tcp=tcp,
                         max_frame=config.limits.max_frame,
                         max_queue_bytes=config.limits.api_queue_bytes,
                         max_connections=config.limits.api_max_connections,
                         max_subscriptions_per_connection=config.limits.subscriptions_per_connection)
    except ValueError as exc:
        raise ConfigError(f"[api]: {exc}") from None


N = TypeVar("N", ChordNode, GossipNode)


@dataclasses.dataclass
class Node(Generic[N]):
    daemon: Daemon[N]
    service: CoreService[N]
    api: ApiServer


def build_node(config: DaemonConfig) -> Node[ChordNode] | Node[GossipNode]:
    """The daemon of ``config.mode`` serving the local API (raises ConfigError)."""
    # Absolute paths: daemon.json is read from other working directories. Every node
    # traces (TRACES.md): without a trace_dir, <state_dir>/traces.
    config = dataclasses.replace(config, state_dir=config.state_dir.resolve())
    config = dataclasses.replace(config, trace_dir=config.trace_path.resolve(),
                                 api_socket=config.api_socket_path.resolve())
    if config.mode == "structured":
        return _serving(config, _structured_service(config))
    if config.mode == "unstructured":
        daemon = Daemon(config, GossipKind(dataclasses.replace(
            gossip_config(config.protocol), sizes=config.limits.sizes)))
        return _serving(config, GossipService(daemon))
    raise ConfigError(f"mode must be structured or unstructured, got {config.mode!r}")


def _structured_service(config: DaemonConfig) -> ScribeService:
    chord_settings, scribe_config = split_protocol(config.protocol)
    durable = config.storage.enabled
    scribe_config = dataclasses.replace(scribe_config, sizes=config.limits.sizes,
                                        durable=durable, retention=config.retention)

    def make_app(node: ChordNode) -> ScribeApp:
        # The node's clock is trio's: events' ttl counts on the wall clock (their ts).
        offset = time.time() - trio.current_time()
        return ScribeApp(node, dataclasses.replace(scribe_config, clock_offset=offset))

    daemon = Daemon(config, ChordKind.of(dataclasses.replace(config, protocol=chord_settings),
                                         make_app, durable))
    service = ScribeService(daemon)

    def answer_tree_query(src: str, msg: Message) -> Message | None:
        node = daemon.node
        if node is None or not isinstance(msg, TreeQuery):
            return None
        return service.core_of(node).tree_info(msg.topic)

    daemon.request_handlers[TreeQuery] = answer_tree_query
    return service


def _serving(config: DaemonConfig, service: CoreService[N]) -> Node[N]:
    """``service``'s daemon, serving the API once it runs."""
    daemon = service.daemon
    api = ApiServer(service, api_config(config), daemon.turn_writes)
    node = Node(daemon, service, api)

    async def serve_api(d: Daemon[N]) -> None:
        config.state_dir.mkdir(parents=True, exist_ok=True)
        info_path = config.state_dir / DAEMON_INFO
        written = False  # another daemon's file (same state_dir) is not ours to remove
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(api.run)
                write_info(info_path, node)
                written = True
        finally:
            if written:
                with contextlib.suppress(FileNotFoundError):
                    info_path.unlink()

    daemon.services.append(serve_api)
    return node


def write_info(path: Path, node: Node[ChordNode] | Node[GossipNode]) -> None:
    daemon, config = node.daemon, node.daemon.config
    tcp = node.api.tcp_address
    info = {"pid": os.getpid(), "node": node.service.node_hex, "address": daemon.address,
            "api": str(config.api_socket_path),
            "tcp": None if tcp is None else f"tcp:{tcp[0]}:{tcp[1]}",
            "trace_dir": str(config.trace_path), "mode": config.mode}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info) + "\n")
    tmp.replace(path)  # readers never see a half-written file


__all__ = ["DAEMON_INFO", "Node", "api_config", "build_node", "split_protocol", "write_info"]
