"""Peer sampling: which peers a node can send events to, and random choices among them.

Two kinds of view share the :class:`PeerSampler` interface: the bounded, self-healing
HyParView view (:mod:`overlay.gossip.hyparview`) and :class:`FullView`, where every node
knows every other, for experiments that assume uniform choice among all nodes. Both
drop a peer reported unreachable.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

from overlay.core.messages import Message

#: How a view sends its own messages (the node's ``send``).
SendFn = Callable[[str, Message], None]
#: Told when a peer becomes a neighbour (True) or stops being one (False).
ChangeFn = Callable[[str, bool], None]


class PeerSampler(Protocol):
    #: Whether the view needs the node's rounds (shuffles, heartbeats).
    wants_rounds: bool

    def start(self, now: float, seeds: Sequence[str]) -> None:
        """Begin with ``seeds``: addresses to join through, or the whole membership."""
        ...

    def neighbours(self) -> list[str]:
        """The peers events may be sent to directly, in a deterministic order."""
        ...

    def sample(self, count: int, exclude: Collection[str] = ()) -> list[str]:
        """Up to ``count`` distinct random neighbours, none of them in ``exclude``."""
        ...

    def on_round(self, now: float) -> None: ...

    def on_message(self, now: float, src: str, msg: Message) -> bool:
        """Handle a peer sampling message; False if ``msg`` is not one."""
        ...

    def on_unreachable(self, now: float, dest: str) -> None: ...

    def note_traffic(self, peer: str) -> None:
        """Something went to or came from ``peer``: a busy link needs no heartbeat."""
        ...

    def status(self) -> dict[str, Any]: ...


def sample_from(rng: random.Random, peers: Sequence[str], count: int,
                exclude: Collection[str]) -> list[str]:
    """``count`` distinct random members of ``peers`` outside ``exclude`` (fewer if short)."""
    candidates = [peer for peer in peers if peer not in exclude] if exclude else list(peers)
    if count >= len(candidates):
        rng.shuffle(candidates)
        return candidates
    return rng.sample(candidates, count)


class FullView:
    """Every member is a neighbour. The membership sequence is shared, not copied, so
    ten thousand nodes can hold it; each node keeps only the few it found dead."""

    #: Random draws tried before sampling falls back to listing the candidates.
    _DRAWS_PER_PICK = 8
    wants_rounds = False

    def __init__(self, address: str, rng: random.Random) -> None:
        self.address = address
        self.rng = rng
        self.members: Sequence[str] = ()
        self.dead: set[str] = set()

    def start(self, now: float, seeds: Sequence[str]) -> None:
        self.members = seeds

    def neighbours(self) -> list[str]:
        return [m for m in self.members if m != self.address and m not in self.dead]

    def sample(self, count: int, exclude: Collection[str] = ()) -> list[str]:
        members, rng = self.members, self.rng
        chosen: list[str] = []
        # Drawing at random and skipping misses avoids building a list of every member.
        for _ in range(self._DRAWS_PER_PICK * count):
            if len(chosen) == count:
                return chosen
            peer = members[rng.randrange(len(members))] if members else self.address
            if peer != self.address and peer not in self.dead and peer not in exclude \
                    and peer not in chosen:
                chosen.append(peer)
        if len(chosen) == count:
            return chosen
        return chosen + sample_from(rng, self.neighbours(), count - len(chosen),
                                    {*exclude, *chosen})

    def on_round(self, now: float) -> None:
        pass

    def on_message(self, now: float, src: str, msg: Message) -> bool:
        return False

    def on_unreachable(self, now: float, dest: str) -> None:
        self.dead.add(dest)

    def note_traffic(self, peer: str) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {"view": "full", "members": len(self.members), "dead": len(self.dead)}
