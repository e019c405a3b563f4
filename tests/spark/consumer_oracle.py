"""A plain-Python reading of durable consumers' records (TRACES.md, "Durable consumers"
under "Definitions the analysis uses"), for checking the Spark job's ``consumers``
section. It shares no code with spark_analysis: dictionaries and sorted lists over
the lines :func:`tests.spark.oracle.read` accepts.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from tests.spark.oracle import _rank, read

KINDS = ("consumer", "ack", "term", "redeliver", "dead_letter")
COUNTS = ("expected", "handled", "acknowledged", "acks", "acked_more_than_once", "terminated",
          "redelivered", "redeliveries", "dead_lettered", "excluded", "pending_at_delete",
          "lost")


def bin_width(span: float) -> float:
    """The narrowest of 1, 2, 5 x 10^k seconds that covers ``span`` in 50 bins."""
    if span <= 0:
        return 1.0
    for k in range(-9, 12):
        for step in (1, 2, 5):
            if step * 10.0**k * 50 >= span:
                return step * 10.0**k
    raise AssertionError(span)


def analyze(path: Path, run: str | None = None) -> dict[str, Any] | None:
    """The ``consumers`` section the trace directory should give (None: no consumer)."""
    recs, _ = read(path, run)
    pubs: dict[str, dict[str, Any]] = {}
    acked_publish: dict[tuple[str, str], float] = {}
    dropped: set[str] = set()
    mine: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(recs, key=lambda r: r["_o"]):
        ev, topic, msg_id = r["ev"], r.get("topic"), r.get("msg_id")
        if ev == "publish" and topic is not None and msg_id is not None:
            pubs.setdefault(msg_id, r)  # records in order: the first one stays
        elif ev == "publish_ack" and topic is not None and msg_id is not None:
            acked_publish.setdefault((topic, msg_id), r["ts"])
        elif ev == "drop" and r.get("reason") in ("too_old", "ttl", "expired") and msg_id:
            dropped.add(msg_id)
        elif ev in KINDS and topic is not None and r.get("durable") is not None:
            mine[(topic, r["durable"])].append(r)
    if not mine:
        return None

    def published_at(topic: str, msg_id: str) -> float:
        p = pubs.get(msg_id)
        return p["ts"] if p is not None else acked_publish[(topic, msg_id)]

    per: dict[str, dict[str, Any]] = {}
    first_acks: dict[tuple[str, str], dict[str, float]] = {}
    all_latencies: list[float] = []
    for (topic, name), rs in sorted(mine.items()):
        first_ts = min(r["ts"] for r in rs)
        attaches = [r for r in rs if r["ev"] == "consumer" and r.get("op") == "attach"]
        deletes = [r["ts"] for r in rs if r["ev"] == "consumer" and r.get("op") == "delete"]
        # Deleted: a delete with no attach after the last one.
        deleted = max(deletes) if deletes and not any(
            r["ts"] > max(deletes) for r in attaches) else None
        # msg_id -> record type -> the ts of each record of it
        by_event: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in rs:
            if r["ev"] != "consumer" and r.get("msg_id") is not None:
                by_event[r["msg_id"]][r["ev"]].append(r["ts"])
        expected = set(by_event) | {
            m for (t, m) in acked_publish if t == topic and published_at(t, m) >= first_ts
            and (deleted is None or published_at(t, m) < deleted)
        }
        kinds = {m: by_event.get(m, {}) for m in expected}
        acks = {m: sorted(k.get("ack", [])) for m, k in kinds.items()}
        handled = {m for m, k in kinds.items() if k.get("ack") or k.get("term")
                   or k.get("dead_letter")}
        excluded = {m for m in expected - handled if m in dropped}
        left_at_delete = expected - handled - excluded if deleted is not None else set()
        first_acks[(topic, name)] = {m: ts[0] for m, ts in acks.items() if ts}
        latencies = [(ts[0] - pubs[m]["ts"]) * 1000.0 for m, ts in acks.items()
                     if ts and m in pubs]
        all_latencies += latencies
        having = Counter(ev for k in kinds.values() for ev in k)  # events with such records

        counts = {
            "expected": len(expected),
            "handled": len(handled),
            "acknowledged": sum(1 for ts in acks.values() if ts),
            "acks": sum(len(ts) for ts in acks.values()),
            "acked_more_than_once": sum(1 for ts in acks.values() if len(ts) > 1),
            "terminated": having["term"],
            "redelivered": having["redeliver"],
            "redeliveries": sum(len(k.get("redeliver", [])) for k in kinds.values()),
            "dead_lettered": having["dead_letter"],
            "excluded": len(excluded),
            "pending_at_delete": len(left_at_delete),
            "lost": len(expected - handled - excluded - left_at_delete),
        }
        per.setdefault(topic, {})[name] = {
            "first_ts": first_ts,
            "deleted_ts": deleted,
            "attaches": len(attaches),
            "detaches": sum(1 for r in rs if r["ev"] == "consumer" and r.get("op") == "detach"),
            "members": len({(r.get("member"), r.get("sub")) for r in attaches}),
            **counts,
            "ack_latency_ms_p50": _rank(latencies, 500),
            "ack_latency_ms_p99": _rank(latencies, 990),
            "none_lost": counts["lost"] == 0,
        }

    # Lag: bins over the consumers' records and the publishes on their topics.
    topics = {t for t, _ in mine}
    times = [r["ts"] for rs in mine.values() for r in rs]
    times += [p["ts"] for p in pubs.values() if p["topic"] in topics]
    width = bin_width(max(times) - min(times))
    first = math.floor(min(times) / width)
    bins = math.floor(max(times) / width) - first + 1
    ends = [(b + first + 1) * width for b in range(bins)]

    def cumulative(times: list[float]) -> list[int]:
        per_bin = [0] * bins
        for ts in times:
            per_bin[math.floor(ts / width) - first] += 1
        return [sum(per_bin[: b + 1]) for b in range(bins)]

    for (topic, name), acked in first_acks.items():
        published = cumulative([p["ts"] for p in pubs.values() if p["topic"] == topic])
        done = cumulative(list(acked.values()))
        per[topic][name]["lag"] = {
            "ts": ends, "published": published, "acknowledged": done,
            "lag": [p - a for p, a in zip(published, done, strict=True)],
        }
    each = [c for by_name in per.values() for c in by_name.values()]
    overall: dict[str, Any] = {k: sum(c[k] for c in each) for k in ("members", *COUNTS)}
    overall |= {
        "ack_latency_ms_p50": _rank(all_latencies, 500),
        "ack_latency_ms_p99": _rank(all_latencies, 990),
        "none_lost": overall["lost"] == 0,
        "lag": {"ts": ends} | {
            k: [sum(c["lag"][k][b] for c in each) for b in range(bins)]
            for k in ("published", "acknowledged", "lag")
        },
    }
    return {"consumers": len(each), "lag_bin_seconds": width, "overall": overall,
            "per_consumer": per}
