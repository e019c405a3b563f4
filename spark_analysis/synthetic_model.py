"""Synthetic traces, the model: the filters the generator uses (with its own predicates),
attribute values, malformed lines, the run's parameters and the trace writer."""

from __future__ import annotations

import heapq
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

Attrs = dict[str, Any]


def _num(a: Attrs, key: str) -> float | None:
    v = a.get(key)
    return v if isinstance(v, int | float) and not isinstance(v, bool) else None


def _price_over_50(a: Attrs) -> bool:
    p = _num(a, "price")
    return p is not None and p > 50


def _eu_mid_price(a: Attrs) -> bool:
    p, r = _num(a, "price"), a.get("region")
    return p is not None and 10 <= p <= 60.5 and isinstance(r, str) and r.startswith("eu-")


def _not_us(a: Attrs) -> bool:
    r = a.get("region")
    return isinstance(r, str) and not r.startswith("us-")


def _qty_or_urgent(a: Attrs) -> bool:
    q = _num(a, "qty")
    return (q is not None and q >= 3) or a.get("urgent") is True


# (filter text, whether an event with these attrs matches it). Missing attributes
# make a predicate UNKNOWN, which never matches (FILTERS.md three-valued logic).
FILTERS: list[tuple[str, Callable[[Attrs], bool]]] = [
    ("", lambda a: True),
    ("price > 50", _price_over_50),
    ("sym IN ('ACME', 'INIT')", lambda a: a.get("sym") in ("ACME", "INIT")),
    ("urgent = TRUE", lambda a: a.get("urgent") is True),
    ("price BETWEEN 10 AND 60.5 AND region LIKE 'eu-%'", _eu_mid_price),
    ("NOT (region LIKE 'us-%')", _not_us),
    ("qty >= 3 OR urgent = TRUE", _qty_or_urgent),
    ("sensor.kind IS NOT NULL", lambda a: a.get("sensor.kind") is not None),
]
BAD_FILTERS = ["price >", "sym IN ()"]
SYMBOLS = ["ACME", "INIT", "GLOBX", "UMBR", "WAYNE"]
REGIONS = ["eu-west", "eu-north", "us-east", "us-west", "ap-south"]

MALFORMED = [
    "this is not json",
    '{"ts": 1.0, "node": "00", "ev": "lookup"',  # truncated
    "[1, 2, 3]",
    "42",
    "",
    '{"node": "0a", "ev": "lookup", "hops": 3}',  # no ts
    '{"ts": "yesterday", "node": "0a", "ev": "lookup"}',
    '{"ts": 5.0, "node": 7, "ev": "lookup"}',
    '{"ts": 5.0, "node": "0a", "ev": "deliver", "topic": "t", "msg_id": "m", "sub": 1, '
    '"hop": "two", "dup": false}',
    '{"ts": 5.0, "node": "0a", "ev": "recv", "topic": "t", "msg_id": "m", "dup": 1}',
    '{"ts": 5.0, "node": "0a", "ev": "publish", "topic": "t", "msg_id": "m", "attrs": "x"}',
]


@dataclass
class Spec:
    """What to generate. ``records`` (a target line count) overrides ``events``."""

    seed: int = 1
    nodes: int = 48
    topics: int = 4
    gossip_topics: int = 1
    events: int = 300
    records: int | None = None
    run: str = "synthetic"
    id_bits: int = 128
    lookups_per_event: float = 0.5
    malformed: int = 12
    other_run_records: int = 5
    rotate_bytes: int | None = 60_000
    subdir_share: float = 0.2
    p_loss: float = 0.01
    p_miss: float = 0.01
    p_false: float = 0.005
    p_dup: float = 0.01
    start_ts: float = 1_700_000_000.0
    # False: every subscription uses the empty filter (for runs without a filter parser).
    filters: bool = True


@dataclass
class Info:
    """What was written."""

    out_dir: Path
    records: int = 0
    bad_lines: int = 0
    events: int = 0
    files: list[Path] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)


@dataclass
class Sub:
    node: int
    sid: int
    filt: int  # index into FILTERS, or -1 - index into BAD_FILTERS
    active: bool = True


@dataclass
class Tree:
    root: int
    parent: dict[int, int | None] = field(default_factory=dict)
    children: dict[int, list[int]] = field(default_factory=dict)


class TraceWriter:
    """Per-node files, records released in ts order, rotation like the daemon's tracer."""

    def __init__(self, spec: Spec, out: Path, ids: list[str], rng: random.Random) -> None:
        self.spec = spec
        self.ids = ids
        self.rng = rng
        self.paths: list[Path] = []
        for node in ids:
            sub = out / "host-b" if rng.random() < spec.subdir_share else out
            sub.mkdir(parents=True, exist_ok=True)
            self.paths.append(sub / f"{node}.jsonl")
        self.files: dict[int, TextIO] = {}
        self.sizes = [0] * len(ids)
        self.pending: list[tuple[float, int, int, str]] = []
        self.counter = 0
        self.written = 0
        self.bad = 0
        self.malformed_at: set[int] = set()

    def add(self, ts: float, node: int, line: str) -> None:
        self.counter += 1
        heapq.heappush(self.pending, (ts, self.counter, node, line))

    def release(self, before: float) -> None:
        """Write every pending record with ts < before (no later record can precede it)."""
        pending = self.pending
        while pending and pending[0][0] < before:
            _, _, node, line = heapq.heappop(pending)
            self._write(node, line)

    def _write(self, node: int, line: str) -> None:
        fh = self.files.get(node)
        if fh is None:
            fh = self.files[node] = open(self.paths[node], "a", encoding="utf-8")  # noqa: SIM115
        if self.written in self.malformed_at:
            bad = self.rng.choice(MALFORMED)
            fh.write(bad + "\n")
            self.bad += 1
            self.sizes[node] += len(bad) + 1
        fh.write(line + "\n")
        self.written += 1
        self.sizes[node] += len(line) + 1
        limit = self.spec.rotate_bytes
        if limit is not None and self.sizes[node] > limit:
            fh.close()
            del self.files[node]
            n = 1
            path = self.paths[node]
            while (rotated := path.with_name(f"{path.name}.{n}")).exists():
                n += 1
            os.replace(path, rotated)
            self.sizes[node] = 0

    def close(self) -> None:
        self.release(float("inf"))
        for fh in self.files.values():
            fh.close()
        self.files.clear()
