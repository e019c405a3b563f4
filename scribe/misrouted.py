"""Messages for a topic's root that reached a node which does not know it owns the key.

Chord's routing takes the sender's word when the last hop says "you are the successor of
this key" and the receiver has no predecessor to contradict it (``chord.steps``): a
lookup must end somewhere while the ring repairs. For Scribe that is not enough. A node
that takes a JOIN, a publish or a root handover on that word would number the topic's
events while the true owner (behind a node whose successor pointer skipped it) numbers
them too: two roots, one sequence forked, and events with the same number lost on one
side. So the root role goes only with ``is_responsible(key)`` as the node itself knows
it, and what arrives without it waits here:

- as soon as the node learns that it owns the key (its predecessor notified it), the
  message is handled as delivered;
- otherwise, every ``heartbeat_interval`` it is routed toward the key again (the ring
  may have found the true owner meanwhile);
- at most ``MAX_PARKED`` wait; past that the oldest is given up (JOINs, pulls and
  reliable publishes are sent again by their origin; an unreliable publish is traced
  as a ``drop`` with reason ``overload``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from overlay.core.messages import Message

#: Messages a node keeps for keys it may own soon.
MAX_PARKED = 4096


@dataclass(frozen=True)
class Parked:
    key: int
    msg: Message
    since: float


class Misrouted:
    def __init__(self) -> None:
        self.parked: deque[Parked] = deque()

    def __len__(self) -> int:
        return len(self.parked)

    def park(self, now: float, key: int, msg: Message) -> Parked | None:
        """Keep ``msg``; returns the oldest message given up to make room, if any."""
        self.parked.append(Parked(key, msg, now))
        if len(self.parked) > MAX_PARKED:
            return self.parked.popleft()
        return None

    def take(self, now: float, retry_after: float,
             owns: Callable[[int], bool]) -> tuple[list[Parked], list[Parked]]:
        """Split off what can go now: (messages whose key this node owns now, messages
        parked at least ``retry_after`` ago, to route toward their key again)."""
        deliver: list[Parked] = []
        reroute: list[Parked] = []
        keep: deque[Parked] = deque()
        answers: dict[int, bool] = {}
        for item in self.parked:
            if item.key not in answers:
                answers[item.key] = owns(item.key)
            if answers[item.key]:
                deliver.append(item)
            elif now - item.since >= retry_after:
                reroute.append(item)
            else:
                keep.append(item)
        self.parked = keep
        return deliver, reroute


__all__ = ["MAX_PARKED", "Misrouted", "Parked"]
