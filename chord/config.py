"""Settings of a Chord node: ring size, table sizes, timer intervals and time-outs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from overlay.core.ids import DEFAULT_ID_BITS


@dataclass(frozen=True)
class ChordConfig:
    """Intervals and time-outs are seconds on the driver's clock."""

    #: Identifier bits m: the ring holds 2**m ids.
    bits: int = DEFAULT_ID_BITS
    #: Length r of the successor list (the ring survives r - 1 adjacent failures).
    successors: int = 8
    stabilize_interval: float = 1.0
    fix_fingers_interval: float = 1.0
    check_predecessor_interval: float = 1.0
    #: Each period is drawn uniformly from interval * [1 - jitter, 1 + jitter], so that
    #: nodes started together do not stabilize in lockstep.
    jitter: float = 0.5
    #: How long an RPC waits for its answer before it is sent again, and how many times
    #: it is sent before its peer counts as failed (a lost message is not a failure).
    rpc_timeout: float = 1.0
    rpc_attempts: int = 3
    #: Pause before a join that failed is tried again (through the next seed).
    join_retry: float = 2.0
    #: Failed join attempts (at least one through each seed) after which a node whose id
    #: is the lowest of its seeds' and its own creates the ring, when no seed answered as
    #: a member and one at least said it is in none (0: it never does). Nodes
    #: started together, each seeded with the others (a whole-overlay restart from one
    #: configuration), would otherwise wait for each other for ever: a node joins only
    #: through a member. The others then join it; merge probes zip any second ring in.
    bootstrap_rounds: int = 3
    #: Period of the probe that lets rings split by a partition find each other again:
    #: a lookup of our own successor started at a seed or a remembered former member.
    merge_interval: float = 10.0
    #: How long a node that failed stays a merge candidate, and how many are kept.
    remember_for: float = 600.0
    remember_max: int = 64
    #: Longest path a lookup or routed message may take before it is given up.
    max_hops: int = 48
    #: How long the origin of an acknowledged route waits for the owner's ack.
    route_timeout: float = 10.0
    #: Whether ``route`` asks the owner for an ack (and traces a ``lookup`` record)
    #: unless the call says otherwise; high-volume routed traffic turns it off.
    route_ack: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= DEFAULT_ID_BITS:
            raise ValueError(f"bits must be within 1..{DEFAULT_ID_BITS}, got {self.bits}")
        if self.successors < 1 or self.rpc_attempts < 1 or self.max_hops < 1:
            raise ValueError("successors, rpc_attempts and max_hops must be >= 1")
        if self.remember_max < 0:
            raise ValueError("remember_max must be >= 0")
        if self.bootstrap_rounds < 0:
            raise ValueError(f"bootstrap_rounds must be >= 0, got {self.bootstrap_rounds}")
        for name in ("stabilize_interval", "fix_fingers_interval", "check_predecessor_interval",
                     "rpc_timeout", "join_retry", "merge_interval", "route_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError(f"jitter must be within [0, 1), got {self.jitter}")
        if self.remember_for < 0:
            raise ValueError("remember_for must be >= 0")

    def with_maintenance_interval(self, interval: float) -> ChordConfig:
        """The same settings with stabilize, fix_fingers and check_predecessor every
        ``interval`` seconds on average (the paper's experiments use one period)."""
        return dataclasses.replace(self, stabilize_interval=interval,
                                   fix_fingers_interval=interval,
                                   check_predecessor_interval=interval)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ChordConfig:
        """Build from settings by name (a config file's ``[protocol]`` table); unknown
        names and values of the wrong type are a ``ValueError`` naming them."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        checked: dict[str, Any] = {}
        for name, value in values.items():
            if name not in fields:
                raise ValueError(f"unknown Chord setting {name!r} "
                                 f"(known: {', '.join(sorted(fields))})")
            kind = type(fields[name].default)
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if type(value) is not kind:
                raise ValueError(f"Chord setting {name!r} must be {kind.__name__}, "
                                 f"got {type(value).__name__}")
            checked[name] = value
        return cls(**checked)
