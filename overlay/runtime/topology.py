"""Asking running daemons over the peer protocol what the overlay looks like.

``overlay ring`` walks the ring from one node by successor pointers (``chord.state_query``
at each node); ``overlay tree`` asks every node of the ring for its place in a topic's
tree (``scribe.tree_query``) and assembles the tree. A node that does not answer is
stepped over by the next entry of its predecessor's successor list.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from chord.messages import RingState, StateQuery
from overlay.core.messages import Message
from overlay.runtime.transport import Inbound, Transport, TransportConfig, Unreachable
from scribe.messages import TreeInfo, TreeQuery

MAX_RING = 65536


class TopologyError(Exception):
    """The overlay could not be asked (the start node does not answer, ...)."""


@asynccontextmanager
async def peer_client(cluster_key: bytes | None = None,
                      timeout: float = 3.0) -> AsyncIterator[Transport]:
    """A transport that only asks (it listens on a free loopback port it never uses)."""
    send, _receive = trio.open_memory_channel[Inbound | Unreachable](math.inf)
    transport = Transport(TransportConfig(bind_host="127.0.0.1", bind_port=0,
                                          connect_timeout=timeout, cluster_key=cluster_key),
                          send)
    async with trio.open_nursery() as nursery:
        await nursery.start(transport.run)
        yield transport
        nursery.cancel_scope.cancel()


async def _ask(transport: Transport, address: str, msg: Message,
               timeout: float) -> Message | None:
    try:
        return await transport.request(address, msg, timeout=timeout)
    except (trio.TooSlowError, OSError):
        return None


@dataclass
class RingWalk:
    states: list[RingState] = field(default_factory=list)
    #: Addresses that did not answer (stepped over).
    silent: list[str] = field(default_factory=list)
    #: Whether the walk came back to where it started.
    closed: bool = False


async def walk_ring(transport: Transport, start: str, timeout: float = 3.0) -> RingWalk:
    walk = RingWalk()
    first = await _ask(transport, start, StateQuery(), timeout)
    if not isinstance(first, RingState):
        raise TopologyError(f"{start} does not answer ring state queries")
    seen = {first.node.addr}
    walk.states.append(first)
    state = first
    while len(walk.states) < MAX_RING:
        nxt: RingState | None = None
        for succ in state.successors:
            if succ.addr == first.node.addr:
                walk.closed = True
                return walk
            if succ.addr in seen:
                return walk  # a loop that skips the start: the ring is not consistent
            answer = await _ask(transport, succ.addr, StateQuery(), timeout)
            if isinstance(answer, RingState):
                nxt = answer
                break
            walk.silent.append(succ.addr)
        if nxt is None:
            return walk
        seen.add(nxt.node.addr)
        walk.states.append(nxt)
        state = nxt
    return walk


async def tree_infos(transport: Transport, addresses: list[str], topic: str,
                     timeout: float = 3.0, parallel: int = 32) -> list[TreeInfo]:
    """Every answering node's place in ``topic``'s tree (those in the tree only)."""
    found: list[TreeInfo] = []
    limit = trio.CapacityLimiter(parallel)

    async def one(address: str) -> None:
        async with limit:
            info = await _ask(transport, address, TreeQuery(topic), timeout)
        if isinstance(info, TreeInfo) and info.role is not None:
            found.append(info)

    async with trio.open_nursery() as nursery:
        for address in addresses:
            nursery.start_soon(one, address)
    return found


__all__ = ["RingWalk", "TopologyError", "peer_client", "tree_infos", "walk_ring"]
