"""A durable consumer as its topic's root hosts it (scribe.consumer_root): the state
machine with its members' leases, and what waits while the root gathers the consumer's
latest copy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scribe.consumer_messages import ConsumerFetch
from scribe.consumer_values import Member, Progress
from scribe.consumers import Consumer


@dataclass
class Hosted:
    """A consumer at this root, with what the registry keeps beside it."""

    consumer: Consumer
    filter_text: str
    #: Member -> when its lease ends.
    leases: dict[Member, float] = field(default_factory=dict)
    #: Changed since it was last persisted and copied.
    dirty: bool = True
    #: Resumed from this node's copy as it became root: until then the replicas may
    #: answer with newer copies (``on_sync``), and members attaching meanwhile wait.
    gathering_until: float = float("-inf")
    waiting: set[Member] = field(default_factory=set)
    #: Fetches of waiting members, answered once they are attached.
    held_fetches: list[ConsumerFetch] = field(default_factory=list)
    #: While it gathers: the furthest progress known, to resume from again when the
    #: gathering ends. The root's log may still be arriving meanwhile (a handover comes
    #: in parts, newest first): a resume now would count what is not there yet as
    #: dropped by retention. Nothing is delivered, persisted or copied until then.
    resume_from: Progress | None = None

    def forget(self, member: Member) -> bool:
        """``member`` left while it may have waited: nothing of it is held any more.
        True when it was still waiting (the consumer never had it attached)."""
        waited = member in self.waiting
        self.waiting.discard(member)
        if self.held_fetches:
            self.held_fetches = [f for f in self.held_fetches
                                 if Member(f.member.addr, f.sub) != member]
        return waited

    def report(self, name: str) -> dict[str, Any]:
        """What ``status`` and ``consumers`` show of this consumer (named ``name``)."""
        config = self.consumer.config
        return {"durable": name, "filter": self.filter_text, "ack": config.ack,
                "ack_wait": config.ack_wait, "max_deliver": config.max_deliver,
                "dead_letter": config.dead_letter, "max_inflight": config.max_inflight,
                "pull": config.pull, **self.consumer.stats()}


__all__ = ["Hosted"]
