"""Chord's peer-to-peer messages.

Requests carry a request id ``rid`` chosen by the asking node; the answer carries it back,
so a node matches answers to its own pending RPCs without help from the transport. Keys
and ids are checked against the receiver's ring size by the node, which knows it.
"""

from __future__ import annotations

from chord.kbr import NodeRef
from overlay.core.messages import Message, message

#: Most addresses a lookup step may ask the answering node to avoid (nodes that failed
#: during this lookup); a longer list is cut, never refused.
MAX_AVOID = 16


@message("chord.find_successor")
class FindSuccessor(Message):
    """One step of an iterative lookup: who is ``succ(key)``, or who is closer to it?"""

    rid: int
    key: int
    #: Addresses the asker found dead during this lookup: answer without them.
    avoid: tuple[str, ...] = ()
    #: The asker was told the receiver owns ``key`` and asks it to confirm.
    owner_check: bool = False

    def __post_init__(self) -> None:
        if len(self.avoid) > MAX_AVOID:
            raise ValueError(f"avoid holds at most {MAX_AVOID} addresses")


@message("chord.found")
class Found(Message):
    """Answer to :class:`FindSuccessor`: ``done`` means ``node`` is ``succ(key)`` (a
    confirmation when ``node`` is the answerer itself), otherwise ``node`` is the node
    to ask next. ``node`` is None when the answerer is not (or no longer) in a ring."""

    rid: int
    done: bool
    node: NodeRef | None


@message("chord.get_neighbours")
class GetNeighbours(Message):
    """Stabilize's question to our successor: its predecessor and successor list."""

    rid: int


@message("chord.neighbours")
class Neighbours(Message):
    rid: int
    predecessor: NodeRef | None
    successors: tuple[NodeRef, ...]


@message("chord.notify")
class Notify(Message):
    """``node`` believes it may be the receiver's predecessor."""

    node: NodeRef


@message("chord.successor_hint")
class SuccessorHint(Message):
    """``node`` just became the sender's predecessor in place of the receiver: it may
    lie between the receiver and its successor (then the receiver adopts it at once
    instead of at its next stabilize)."""

    node: NodeRef


@message("chord.ping")
class Ping(Message):
    """check_predecessor: is the receiver still there?"""

    rid: int


@message("chord.pong")
class Pong(Message):
    rid: int


@message("chord.leave")
class Leave(Message):
    """``node`` leaves the ring. To its successor it hands its ``predecessor``, to its
    predecessor its ``successors``, so both close the gap without waiting for a
    time-out. Answered with :class:`LeaveAck`."""

    rid: int
    node: NodeRef
    predecessor: NodeRef | None
    successors: tuple[NodeRef, ...]


@message("chord.leave_ack")
class LeaveAck(Message):
    rid: int


@message("chord.route")
class Route(Message):
    """A KBR message on its way to ``succ(key)``, forwarded hop by hop.

    ``hops`` counts the transmissions so far. ``final`` is set by the hop that found
    ``key`` between itself and its successor: the receiver should be the owner.
    ``ack`` asks the owner to send :class:`RouteAck` to ``origin`` with ``rid``.
    """

    key: int
    origin: NodeRef
    rid: int
    hops: int
    final: bool
    ack: bool
    payload: Message


@message("chord.route_ack")
class RouteAck(Message):
    """The owner of a routed message's key got it after ``hops`` transmissions."""

    rid: int
    owner: NodeRef
    hops: int


@message("chord.state_query")
class StateQuery(Message):
    """A runtime-level request (daemon tests, ring checks): this node's ring state."""


@message("chord.state")
class RingState(Message):
    """Answer to :class:`StateQuery`."""

    node: NodeRef
    joined: bool
    predecessor: NodeRef | None
    successors: tuple[NodeRef, ...]
    #: Finger i for i in 0..bits-1; None where the node has no entry.
    fingers: tuple[NodeRef | None, ...]
