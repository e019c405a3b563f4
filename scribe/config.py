"""Configuration of a Scribe node."""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from overlay.core.limits import SizeLimits

#: Topics whose retention :meth:`ScribeConfig.retention_of` remembers; past it the memory
#: starts over (a node sees few topics at once; this bounds a churn of names).
RETENTION_CACHE = 65_536


@dataclass(frozen=True, slots=True)
class TopicRetention:
    """How much of one topic's events a node keeps: its root and replicas, and every tree
    node's log (:meth:`ScribeConfig.retention_of` says which for a topic)."""

    count: int
    bytes: int
    seconds: float
    #: Events younger than this are kept beyond ``count`` and ``bytes`` (one value for
    #: every topic: ``retain_min_age``).
    min_age: float
    #: ``ScribeConfig.clock_offset``: an event's ``ttl`` ends on the wall clock (not a
    #: bound: two retentions with the same bounds are equal).
    clock_offset: float = field(default=0.0, compare=False)

    def limits(self) -> dict[str, int | float]:
        """The three bounds as ``status.logs`` shows them."""
        return {"count": self.count, "bytes": self.bytes, "seconds": self.seconds}


@dataclass(frozen=True, slots=True)
class RetentionRule:
    """Bounds for the topics whose name matches ``topics``, a glob matched with
    :func:`fnmatch.fnmatchcase` (case-sensitive; ``*`` any characters, dots included,
    ``?`` one, ``[...]`` a set). A bound left None is the default's (``retain_*``)."""

    topics: str
    count: int | None = None
    bytes: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.topics, str) or not self.topics:
            raise ValueError(f"topics must be a non-empty pattern, got {self.topics!r}")
        for name in ("count", "bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        seconds = self.seconds
        if seconds is not None and (not isinstance(seconds, int | float)
                                    or isinstance(seconds, bool) or not seconds > 0):
            raise ValueError(f"seconds must be a number > 0, got {seconds!r}")


@dataclass(frozen=True)
class ScribeConfig:
    """Tunables of the topic trees (seconds for times).

    ``heartbeat_interval`` paces the maintenance tick: parents send a heartbeat to each
    child they sent nothing else to during the last interval, and children answer it.
    A child that hears nothing from its parent for ``parent_timeout`` re-joins through
    the DHT; a parent drops a child after ``missed_heartbeats`` unanswered heartbeats.
    """

    #: Forward events only down edges whose summary may match (False: every edge).
    summaries: bool = True
    #: Filters a summary keeps exactly before it is coarsened (matching.Summary).
    summary_max_filters: int = 64
    #: Children a node adopts before it pushes new ones down to a child (None: no bound).
    max_children: int | None = None
    #: Times one JOIN may be pushed down by full nodes before one adopts it regardless.
    max_redirects: int = 8
    heartbeat_interval: float = 1.0
    parent_timeout: float = 3.5
    missed_heartbeats: int = 3
    #: A JOIN that got no acknowledgement in this time is sent again.
    join_timeout: float = 3.0
    #: How long a node remembers an event: duplicate suppression and anycast search state.
    event_memory: float = 60.0
    #: ... and at most this many events (about 1 KB each with their bodies): under a high
    #: sustained rate the oldest are forgotten sooner, so memory stays bounded.
    event_memory_events: int = 50_000
    #: Topics whose root address a publisher keeps.
    root_cache_size: int = 4096
    #: Successors that hold a copy of the root's counter and retained events before a
    #: reliable publish is acknowledged (fewer when the ring is smaller).
    replicas: int = 2
    #: Events the root and its replicas retain per topic, at most, and for how long.
    retain_count: int = 1024
    retain_seconds: float = 300.0
    #: ... and at most this many payload bytes: with durable logs, what bounds a topic's
    #: share of the disk (and of memory, where retained events are held too).
    retain_bytes: int = 256 << 20
    #: Events younger than this are kept beyond ``retain_count``: a burst numbered or
    #: handled in one step (the publishes a root held through a recovery) stays whole
    #: while the pulls sent before it are answered; trimmed at once, its head would be
    #: declared gone to members whose copies of it were still on their way.
    retain_min_age: float = 3.0
    #: Per-topic bounds (``[[retention]]`` in the daemon's file): the first rule whose
    #: pattern matches a topic gives its bounds, the ``retain_*`` above the rest.
    retention: tuple[RetentionRule, ...] = ()
    #: Retained events go to the node's store too (``Persist`` effects), and a reliable
    #: publish is acknowledged only once the root and its replicas have synced it
    #: (scribe.durability). False: retention lives in memory only.
    durable: bool = False
    #: A reliable publish without an acknowledgement in this time is sent again, same
    #: msg_id (the root numbers it once).
    publish_retry: float = 2.0
    #: ... and given up on (a ``drop`` trace) once unacknowledged this long.
    publish_give_up: float = 60.0
    #: A replica that has not confirmed a copy in this time is given up on for that event.
    replica_timeout: float = 1.0
    #: A node that became responsible for a topic's key shortly before (its predecessor
    #: changed) and knows nothing of the topic (no counter, no copies) waits this long
    #: before numbering: members re-joining in that time tell it how far the lost root
    #: had numbered. None: parent_timeout + join_timeout + 3 heartbeat intervals.
    takeover_wait: float | None = None
    #: A restarted node that owns keys it did not own before (their owners are not back
    #: yet) numbers none of their topics for this long after it is back in the ring,
    #: unless the owner returns first (scribe.standin). 0: it numbers them at once.
    standin_wait: float = 30.0
    #: The size model of the overlay's ``max_frame`` (set by the daemon from
    #: ``[limits]``, not a protocol setting): bounds the messages that carry events.
    sizes: SizeLimits = field(default_factory=SizeLimits)
    #: Wall-clock seconds (the clock of events' ``ts``) minus the core's ``now`` at the
    #: same instant: set by the daemon as it starts its node (its ``now`` is trio's
    #: clock); 0 in the simulator, where both are simulated time. An event's ``ttl``
    #: counts on the wall clock (``ScribeState.wall``).
    clock_offset: float = 0.0
    #: Topic -> its retention, once looked up (the hot path trims at every event).
    _retention_of: dict[str, TopicRetention] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def retention_of(self, topic: str) -> TopicRetention:
        """The retention of ``topic``: the first matching rule's bounds over the
        defaults (the one definition the root, the replicas and tree nodes use)."""
        known = self._retention_of.get(topic)
        if known is not None:
            return known
        if len(self._retention_of) >= RETENTION_CACHE:
            self._retention_of.clear()
        found = self._retention_of[topic] = self._match(topic)
        return found

    def _match(self, topic: str) -> TopicRetention:
        rule = next((r for r in self.retention if fnmatchcase(topic, r.topics)), None)
        count, size, seconds = self.retain_count, self.retain_bytes, self.retain_seconds
        if rule is not None:
            count = count if rule.count is None else rule.count
            size = size if rule.bytes is None else rule.bytes
            seconds = seconds if rule.seconds is None else float(rule.seconds)
        return TopicRetention(count, size, seconds, self.retain_min_age, self.clock_offset)

    def takeover_window(self) -> float:
        if self.takeover_wait is not None:
            return self.takeover_wait
        return self.parent_timeout + self.join_timeout + 3 * self.heartbeat_interval

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "parent_timeout", "join_timeout", "event_memory",
                     "retain_seconds", "publish_retry", "replica_timeout",
                     "publish_give_up"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.parent_timeout <= self.heartbeat_interval:
            raise ValueError("parent_timeout must exceed heartbeat_interval")
        if self.max_children is not None and self.max_children < 1:
            raise ValueError(f"max_children must be >= 1 or None, got {self.max_children}")
        for name in ("summary_max_filters", "missed_heartbeats", "root_cache_size",
                     "retain_count", "retain_bytes", "event_memory_events"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.standin_wait < 0:
            raise ValueError(f"standin_wait must be >= 0, got {self.standin_wait}")
        if self.retain_min_age < 0:
            raise ValueError(f"retain_min_age must be >= 0, got {self.retain_min_age}")
        if self.replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {self.replicas}")
        object.__setattr__(self, "retention", tuple(self.retention))
        for rule in self.retention:
            if not isinstance(rule, RetentionRule):
                raise ValueError(f"retention must hold RetentionRule values, got {rule!r}")
        if self.max_redirects < 0:
            raise ValueError(f"max_redirects must be >= 0, got {self.max_redirects}")
