"""Configuration of a gossip node: peer sampling, one dissemination strategy, selective routing.

A :class:`GossipConfig` holds one strategy configuration (:class:`FloodConfig`,
:class:`RandomWalkConfig`, :class:`RumorConfig`, :class:`BlindCounterConfig`,
:class:`AntiEntropyConfig` or :class:`PbcastConfig`); its type selects the strategy.
Every check runs when the configuration is built, so a bad one never reaches a node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from overlay.core.errors import LocalProtocolError
from overlay.core.limits import SizeLimits
from overlay.gossip.messages import MAX_NAMED, MAX_RADIUS

#: Names of the strategies, as ``overlay sim --strategy`` spells them.
STRATEGY_NAMES = ("flood", "random-walk", "rumor", "blind-counter", "anti-entropy", "pbcast")
ViewKind = Literal["hyparview", "full"]
AntiEntropyMode = Literal["push", "pull", "push-pull"]


class GossipConfigError(LocalProtocolError, ValueError):
    """A gossip configuration value is out of range or inconsistent."""


def _at_least(owner: object, name: str, minimum: int) -> None:
    value = getattr(owner, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise GossipConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _positive(owner: object, name: str) -> None:
    value = getattr(owner, name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise GossipConfigError(f"{name} must be a number > 0, got {value!r}")


@dataclass(frozen=True)
class FloodConfig:
    """Flooding: every node forwards a new event to all its neighbours but the sender,
    while the event has made fewer than ``ttl`` transmissions."""

    ttl: int = 8

    name = "flood"

    def __post_init__(self) -> None:
        _at_least(self, "ttl", 1)


@dataclass(frozen=True)
class RandomWalkConfig:
    """Random walk: the publisher starts ``walkers`` walkers; each moves to one random
    neighbour per step (not back to where it came from when there is another choice)
    until it has made ``ttl`` steps, whether or not the node had the event already."""

    walkers: int = 4
    ttl: int = 32

    name = "random-walk"

    def __post_init__(self) -> None:
        _at_least(self, "walkers", 1)
        _at_least(self, "ttl", 1)


@dataclass(frozen=True)
class RumorConfig:
    """Push rumor mongering with feedback (Demers et al. 1987).

    A node holding a hot rumor pushes it, every round, to ``fanout`` random peers; a peer
    that knew it already says so (feedback). After such an unnecessary contact the
    sender loses interest with probability ``p_stop`` (feedback + coin), or after
    ``counter`` of them (feedback + counter). Exactly one of the two is set.
    ``reset_counter``: count only consecutive unnecessary contacts (a useful one starts
    the count again), as Demers et al.'s simulations did.
    """

    fanout: int = 1
    p_stop: float | None = 0.5
    counter: int | None = None
    reset_counter: bool = False

    name = "rumor"

    def __post_init__(self) -> None:
        _at_least(self, "fanout", 1)
        if (self.p_stop is None) == (self.counter is None):
            raise GossipConfigError("set exactly one of p_stop (coin) and counter")
        if self.p_stop is not None and not 0.0 < self.p_stop <= 1.0:
            raise GossipConfigError(f"p_stop must be within (0, 1], got {self.p_stop!r}")
        if self.counter is not None:
            _at_least(self, "counter", 1)


@dataclass(frozen=True)
class BlindCounterConfig:
    """Blind counter rumor mongering (Portman and Seneviratne 2002): on each of its first
    ``forward_limit`` (F) receptions of an event a node sends it to ``fanout`` (B) random
    neighbours it does not know to have it (those it got it from or sent it to)."""

    fanout: int = 2
    forward_limit: int = 2

    name = "blind-counter"

    def __post_init__(self) -> None:
        _at_least(self, "fanout", 1)
        _at_least(self, "forward_limit", 1)


@dataclass(frozen=True)
class AntiEntropyConfig:
    """Anti-entropy: every round a node sends a digest of the events it holds to
    ``fanout`` random peers; ``push`` sends the peer what it lacks, ``pull`` fetches
    what the node lacks, ``push-pull`` does both. Events spread only this way."""

    mode: AntiEntropyMode = "push-pull"
    fanout: int = 1

    name = "anti-entropy"

    def __post_init__(self) -> None:
        if self.mode not in ("push", "pull", "push-pull"):
            raise GossipConfigError(f"mode must be push, pull or push-pull, got {self.mode!r}")
        _at_least(self, "fanout", 1)


@dataclass(frozen=True)
class PbcastConfig:
    """Bimodal multicast (Birman et al. 1999).

    First phase, unreliable: the publisher sends the event to ``fanout`` random
    neighbours (None: all of them) and every node does the same on its first copy while
    the event has made fewer than ``ttl`` transmissions. Second phase, repair: every round
    a node sends a digest of what it holds to ``digest_fanout`` random peers, which ask
    for what they lack and get it retransmitted.
    """

    fanout: int | None = 3
    ttl: int = 8
    digest_fanout: int = 1

    name = "pbcast"

    def __post_init__(self) -> None:
        if self.fanout is not None:
            _at_least(self, "fanout", 1)
        _at_least(self, "ttl", 1)
        _at_least(self, "digest_fanout", 1)


StrategyConfig = (FloodConfig | RandomWalkConfig | RumorConfig | BlindCounterConfig
                  | AntiEntropyConfig | PbcastConfig)


@dataclass(frozen=True)
class HyParViewConfig:
    """The bounded peer sampling view (Leitão, Pereira and Rodrigues 2007).

    A small symmetric *active* view (the neighbours events travel to) and a larger
    *passive* view of backups, continuously shuffled by random walks. Joins spread by
    random walks of ``active_walk`` steps (``passive_walk``: the step at which a walk also
    leaves the newcomer in a passive view); a shuffle carries ``shuffle_active`` active and
    ``shuffle_passive`` passive entries along a walk of ``shuffle_walk`` steps.
    """

    active_size: int = 5
    passive_size: int = 30
    active_walk: int = 6
    passive_walk: int = 3
    shuffle_active: int = 3
    shuffle_passive: int = 4
    shuffle_walk: int = 3
    #: A neighbour request without an answer after this many seconds counts as refused.
    request_timeout: float = 2.0

    def __post_init__(self) -> None:
        _at_least(self, "active_size", 1)
        _at_least(self, "passive_size", 1)
        _at_least(self, "active_walk", 1)
        _at_least(self, "passive_walk", 0)
        _at_least(self, "shuffle_active", 0)
        _at_least(self, "shuffle_passive", 0)
        _at_least(self, "shuffle_walk", 1)
        _positive(self, "request_timeout")
        if self.passive_walk > self.active_walk:
            raise GossipConfigError("passive_walk must not exceed active_walk")


@dataclass(frozen=True)
class SelectiveConfig:
    """Selective routing (:mod:`~overlay.gossip.selective`): every node advertises to each
    neighbour the subscriber nodes within ``radius`` hops through it (the nearest
    ``max_named`` by name, with the hops to them, the rest as anonymous per-hop
    summaries), and events go only toward those that may match. Needs a bounded
    (``hyparview``) view. A ``radius`` at least the hop limit (``ttl``) of flooding or
    pbcast lets every node route within the whole reach of an event; with a smaller one
    an event still has hops to go beyond what adverts tell goes everywhere, as without
    selective routing."""

    radius: int = 8
    #: Subscriber nodes per topic an advert names (with the hops to each); further ones
    #: are merged into per-hop summaries.
    max_named: int = 64
    #: Neighbours an event goes to toward each named subscriber, among those with the
    #: fewest hops to it (more: redundant paths, for loss and churn).
    paths: int = 1
    #: Filters a summary keeps exactly before it is coarsened (``matching.Summary``).
    max_filters: int = 64
    #: Changes are gathered for this long before adverts go out (one batch per cascade).
    advert_delay: float = 0.05
    #: Every advert is sent again this often, changed or not (a lost one is made up for).
    refresh_interval: float = 30.0

    def __post_init__(self) -> None:
        _at_least(self, "radius", 1)
        if self.radius > MAX_RADIUS:
            raise GossipConfigError(f"radius must be at most {MAX_RADIUS}, got {self.radius}")
        _at_least(self, "max_named", 0)
        if self.max_named > MAX_NAMED:
            raise GossipConfigError(f"max_named must be at most {MAX_NAMED}, "
                                    f"got {self.max_named}")
        _at_least(self, "paths", 1)
        _at_least(self, "max_filters", 1)
        _positive(self, "advert_delay")
        _positive(self, "refresh_interval")


@dataclass(frozen=True)
class GossipConfig:
    """Everything a :class:`~overlay.gossip.node.GossipNode` is tuned by (seconds for times)."""

    strategy: StrategyConfig = field(default_factory=FloodConfig)
    #: ``hyparview``: bounded view kept by the protocol; ``full``: every node knows every
    #: other (experiments that assume uniform choice among all nodes).
    view: ViewKind = "hyparview"
    hyparview: HyParViewConfig = field(default_factory=HyParViewConfig)
    selective: SelectiveConfig | None = None
    #: Period of the node's round: shuffles, heartbeats, rumor pushes, digests.
    round_interval: float = 1.0
    #: Start rounds at multiples of ``round_interval`` (every node in step, as synchronous
    #: models assume) instead of at a random phase.
    aligned_rounds: bool = False
    #: How long a node remembers an event (duplicate suppression) after its first copy.
    memory: float = 120.0
    #: Events first seen within this many seconds are listed in digests and can be repaired.
    digest_window: float = 30.0
    #: Most events one digest lists, and one answer retransmits (newest first).
    max_digest: int = 512
    #: Most events a node holds at once; the oldest are forgotten first past it.
    max_events: int = 65536
    #: The size model of the overlay's ``max_frame`` (set by the daemon from
    #: ``[limits]``, not a protocol setting): bounds the messages that carry events.
    sizes: SizeLimits = field(default_factory=SizeLimits)

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, StrategyConfig):
            raise GossipConfigError(f"unknown strategy configuration {self.strategy!r}")
        if self.view not in ("hyparview", "full"):
            raise GossipConfigError(f"view must be hyparview or full, got {self.view!r}")
        if self.selective is not None and self.view != "hyparview":
            raise GossipConfigError("selective routing needs the bounded hyparview view")
        for name in ("round_interval", "memory", "digest_window"):
            _positive(self, name)
        if self.digest_window > self.memory / 2:
            # A node must remember an event well past the time others may still offer it
            # in digests, or a late repair would deliver it twice.
            raise GossipConfigError("digest_window must be at most half of memory")
        _at_least(self, "max_digest", 1)
        _at_least(self, "max_events", 1)


_STRATEGY_CLASSES: dict[str, type] = {
    c.name: c for c in (FloodConfig, RandomWalkConfig, RumorConfig, BlindCounterConfig,
                        AntiEntropyConfig, PbcastConfig)}


def config_from_settings(settings: Mapping[str, Any]) -> GossipConfig:
    """A :class:`GossipConfig` from flat settings by name (a daemon's ``[protocol]``
    table): ``strategy`` (a name of :data:`STRATEGY_NAMES`) and that strategy's own
    settings (``fanout``, ``ttl``, ``p_stop``, ...); ``view``, ``round_interval``,
    ``memory`` and the other fields of GossipConfig; HyParView's (``active_size``, ...);
    ``selective = true`` with SelectiveConfig's (``radius``, ...). A name nothing takes
    is an error naming it."""
    rest = dict(settings)
    name = rest.pop("strategy", "flood")
    if name not in _STRATEGY_CLASSES:
        raise GossipConfigError(f"strategy must be one of {', '.join(STRATEGY_NAMES)}, "
                                f"got {name!r}")
    selective = rest.pop("selective", False)
    if not isinstance(selective, bool):
        raise GossipConfigError(f"selective must be true or false, got {selective!r}")

    def take(cls: type) -> dict[str, Any]:
        names = {f.name for f in fields(cls)} - {"strategy", "hyparview", "selective", "sizes"}
        return {k: rest.pop(k) for k in list(rest) if k in names}

    try:
        strategy = _STRATEGY_CLASSES[name](**take(_STRATEGY_CLASSES[name]))
        hyparview = HyParViewConfig(**take(HyParViewConfig))
        selective_config = SelectiveConfig(**take(SelectiveConfig)) if selective else None
        top = take(GossipConfig)
        if rest:
            raise GossipConfigError(f"unknown gossip setting(s) {', '.join(sorted(rest))} "
                                    f"for strategy {name}")
        return GossipConfig(strategy=strategy, hyparview=hyparview,
                            selective=selective_config, **top)
    except TypeError as exc:
        raise GossipConfigError(str(exc)) from None
