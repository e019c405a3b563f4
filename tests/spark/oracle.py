"""An independent plain-Python reading of a trace directory, for the end-to-end test.

It follows TRACES.md (and the readings documented in spark_analysis.delivery) with
dictionaries and sorted lists, sharing no code with the Spark job.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

DOUBLE = {"ts", "ms", "expiry"}
LONG = {"hops", "sub", "size", "seq", "hop", "version", "attempt", "attempts"}
BOOL = {"ok", "dup", "replay"}
TEXT = {"node", "ev", "run", "addr", "mode", "reason", "succ", "pred", "key", "topic",
        "filter", "parent", "role", "child", "op", "msg_id", "to", "from", "kind", "durable",
        "member"}
LIVE = 2**31 - 1


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _valid(line: str) -> dict[str, Any] | None:
    try:
        rec = json.loads(line, parse_constant=_reject_constant)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    for k in DOUBLE:
        v = rec.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            return None
    for k in LONG:
        v = rec.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            return None
    for k in BOOL:
        v = rec.get(k)
        if v is not None and not isinstance(v, bool):
            return None
    for k in TEXT:
        v = rec.get(k)
        if v is not None and not isinstance(v, str):
            return None
    if rec.get("ts") is None or not isinstance(rec.get("node"), str):
        return None
    if not isinstance(rec.get("ev"), str):
        return None
    attrs = rec.get("attrs")
    if rec["ev"] == "publish" and attrs is not None and not isinstance(attrs, dict):
        return None
    return rec


def read(path: Path, run: str | None) -> tuple[list[dict[str, Any]], int]:
    records, bad = [], 0
    for f in sorted(p for p in path.rglob("*") if p.is_file() and ".jsonl" in p.name):
        m = re.search(r"\.jsonl\.(\d+)", f.name)
        rank = int(m.group(1)) if m else LIVE
        lines = f.read_text(encoding="utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        for i, line in enumerate(lines):
            rec = _valid(line)
            if rec is None:
                bad += 1
                continue
            if run is not None and rec.get("run") != run:
                continue
            rec["_o"] = (float(rec["ts"]), rank, str(f), i)
            records.append(rec)
    return records, bad


def _rank(values: list[float], permille: int) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, (len(ordered) * permille + 999) // 1000) - 1]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _filter_ok(text: str | None) -> Any:
    """Parsed filter, True for the empty filter, None when unusable."""
    if text is None:
        return None
    if text == "":
        return True
    import matching

    try:
        return matching.parse(text)
    except matching.FilterSyntaxError:
        return None


def analyze(path: Path, run: str | None = None) -> dict[str, Any]:
    recs, bad = read(path, run)
    by_ev: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        by_ev[r["ev"]].append(r)

    # trees, as they were when each topic last carried an event
    last_event: dict[str, float] = {}
    for r in by_ev["publish"] + by_ev["deliver"]:
        if r.get("topic") is not None:
            last_event[r["topic"]] = max(last_event.get(r["topic"], r["ts"]), r["ts"])

    def in_use(r: dict[str, Any]) -> bool:
        return r.get("topic") is not None and r["ts"] <= last_event.get(r["topic"], r["ts"])

    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for r in by_ev["tree"]:
        if not in_use(r):
            continue
        k = (r["topic"], r["node"])
        if k not in latest or r["_o"] > latest[k]["_o"]:
            latest[k] = r
    left: dict[tuple[str, str], tuple[Any, ...]] = {}
    for r in by_ev["tree_leave"]:
        if not in_use(r):
            continue
        k = (r["topic"], r["node"])
        left[k] = max(left.get(k, r["_o"]), r["_o"])
    members = {k: r.get("parent") for k, r in latest.items() if k not in left or left[k] < r["_o"]}
    depth: dict[tuple[str, str], int | None] = {}
    for topic, node in members:
        d, cur, seen = 0, node, set()
        while True:
            parent = members.get((topic, cur), "missing")
            if parent is None:
                depth[(topic, node)] = d
                break
            if parent == "missing" or cur in seen:
                depth[(topic, node)] = None
                break
            seen.add(cur)
            cur, d = parent, d + 1
            if (topic, cur) not in members:
                depth[(topic, node)] = None
                break

    # publishes and subscriptions
    pubs: dict[str, dict[str, Any]] = {}
    for r in by_ev["publish"]:
        if r.get("msg_id") is None or r.get("topic") is None:
            continue
        if r["msg_id"] not in pubs or r["_o"] < pubs[r["msg_id"]]["_o"]:
            pubs[r["msg_id"]] = r
    unsubs: dict[tuple[str, int], list[tuple[Any, ...]]] = defaultdict(list)
    for r in by_ev["unsubscribe"]:
        if r.get("sub") is not None:
            unsubs[(r["node"], r["sub"])].append(r["_o"])
    subs = []
    bad_filters = 0
    for r in by_ev["subscribe"]:
        if r.get("sub") is None or r.get("topic") is None:
            continue
        ends = [o for o in unsubs[(r["node"], r["sub"])] if o > r["_o"]]
        flt = _filter_ok(r.get("filter"))
        bad_filters += flt is None
        subs.append((r, min(ends) if ends else None, flt))

    expected: dict[tuple[str, int, str], tuple[str, float]] = {}
    for mid, p in pubs.items():
        attrs = p.get("attrs") or {}
        for s, end, flt in subs:
            if flt is None or s["topic"] != p["topic"]:
                continue
            same = s["node"] == p["node"]
            st, pt = s["_o"][0], p["_o"][0]
            started = st < pt or (st == pt and (not same or s["_o"] < p["_o"]))
            ended = end is not None and (
                end[0] < pt or (end[0] == pt and (not same or end < p["_o"]))
            )
            if started and not ended and (flt is True or flt.matches(attrs)):
                expected[(s["node"], s["sub"], mid)] = (p["topic"], p["ts"])

    # deliveries
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
    for r in by_ev["deliver"]:
        # A durable subscription's deliveries are the consumer check's (TRACES.md).
        if r.get("sub") is not None and r.get("msg_id") is not None \
                and r.get("durable") is None:
            groups[(r["node"], r["sub"], r["msg_id"])].append(r)
    scopes = {p["topic"] for p in pubs.values()} | {
        r.get("topic") for r in recs if r.get("topic") is not None
    }
    per: dict[str | None, dict[str, Any]] = {
        t: {
            "expected": 0,
            "delivered": 0,
            "false": 0,
            "dups": 0,
            "lat": [],
            "hops": Counter(),
            "events": Counter(),
            "got": Counter(),
        }
        for t in [*scopes, None]
    }

    def add(topic: str | None, key: str, value: Any = 1) -> None:
        for scope in {topic, None}:
            if scope in per:
                per[scope][key] += value

    for key, (topic, _pub_ts) in expected.items():
        add(topic, "expected")
        for scope in {topic, None}:
            per[scope]["events"][key[2]] += 1
    for key, rs in groups.items():
        rs.sort(key=lambda r: r["_o"])
        first = rs[0]
        dups = len(rs) - 1 + (1 if first.get("dup") else 0)
        if key in expected:
            topic, pub_ts = expected[key]
            add(topic, "delivered")
            for scope in {topic, None}:
                per[scope]["lat"].append((first["ts"] - pub_ts) * 1000.0)
                per[scope]["got"][key[2]] += 1
                if first.get("hop") is not None:
                    per[scope]["hops"][first["hop"]] += 1
        else:
            topic = first.get("topic")
            add(topic, "false")
        add(topic, "dups", dups)

    forwards = Counter()
    for r in by_ev["forward"]:
        forwards[r.get("topic")] += 1
        forwards[None] += 1 if r.get("topic") is not None else 0
    nodes = {r["node"] for r in recs}
    touched: dict[str, set[str]] = defaultdict(set)
    for ev in ("recv", "deliver"):
        for r in by_ev[ev]:
            if r.get("msg_id") is not None:
                touched[r["msg_id"]].add(r["node"])
    recv = Counter()
    recv_dup = Counter()
    repairs: dict[str | None, Counter[str]] = defaultdict(Counter)
    for r in by_ev["recv"]:
        for scope in {r.get("topic"), None}:
            recv[scope] += 1
            recv_dup[scope] += bool(r.get("dup"))
    for r in by_ev["repair"]:
        for scope in {r.get("topic"), None}:
            repairs[scope][r.get("kind")] += 1

    def scope(t: str | None) -> dict[str, Any]:
        s = per[t]
        ds = [d for (topic, _), d in depth.items() if (t is None or topic == t)]
        known = [d for d in ds if d is not None]
        evs = [m for m, p in pubs.items() if t is None or p["topic"] == t]
        with_r = list(s["events"])
        over = sum(1 for m in with_r if s["got"][m] * 10 > s["events"][m] * 9)
        under = sum(1 for m in with_r if s["got"][m] * 10 < s["events"][m])
        return {
            "published": len(evs),
            "expected": s["expected"],
            "delivered": s["delivered"],
            "delivery_ratio": _ratio(s["delivered"], s["expected"]),
            "false_deliveries": s["false"],
            "duplicates": s["dups"],
            "latency_ms_p50": _rank(s["lat"], 500),
            "latency_ms_p90": _rank(s["lat"], 900),
            "latency_ms_p99": _rank(s["lat"], 990),
            "latency_ms_max": _rank(s["lat"], 1000),
            "tree_depth_mean": _ratio(sum(known), len(known)) if known else None,
            "tree_depth_max": max(known) if known else None,
            "tree_detached": len(ds) - len(known),
            "forwards_per_delivery": _ratio(forwards[t], s["delivered"]),
            "hops_histogram": {str(h): n for h, n in sorted(s["hops"].items())},
            "coverage_mean": _ratio(sum(len(touched[m]) for m in evs), len(evs) * len(nodes)),
            "redundancy": _ratio(recv_dup[t], recv[t]),
            "repairs": dict(sorted(repairs[t].items())),
            "bimodal": {
                "events_with_receivers": len(with_r),
                "share_over_90": _ratio(over, len(with_r)),
                "share_under_10": _ratio(under, len(with_r)),
            },
        }

    fwd_by_node = Counter(r["node"] for r in by_ev["forward"])
    last_op: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in by_ev["child"]:
        if r.get("topic") is None or r.get("child") is None:
            continue
        k = (r["node"], r["topic"], r["child"])
        if k not in last_op or r["_o"] > last_op[k]["_o"]:
            last_op[k] = r
    kids = Counter(node for (node, _, _), r in last_op.items() if r.get("op") == "add")
    stress = {
        "nodes": len(nodes),
        "forwards_mean": _ratio(sum(fwd_by_node.values()), len(nodes)),
        "forwards_max": max((fwd_by_node[n] for n in nodes), default=None),
        "children_mean": _ratio(sum(kids.values()), len(nodes)),
        "children_max": max((kids[n] for n in nodes), default=None),
    }

    looks = by_ev["lookup"]
    hops = [r["hops"] for r in looks if r.get("hops") is not None]
    oks = [r["ok"] for r in looks if r.get("ok") is not None]
    return {
        "records": len(recs),
        "bad_lines": bad,
        "nodes": len(nodes),
        "bad_filters": bad_filters,
        "node_stress": stress,
        "lookup": {
            "count": len(looks),
            "ok_rate": _ratio(sum(oks), len(oks)),
            "hops_mean": _ratio(sum(hops), len(hops)),
            "hops_p99": _rank(hops, 990),
        },
        "overall": scope(None),
        "topics": {t: scope(t) for t in sorted(x for x in scopes if x is not None)},
    }


def assert_summary_matches(actual: dict[str, Any], want: dict[str, Any], path: str = "") -> None:
    """Every key of ``want`` equals ``actual`` (floats to 1e-9 relative)."""
    for key, value in want.items():
        here = f"{path}.{key}" if path else key
        assert key in actual, f"{here} missing from summary"
        got = actual[key]
        if isinstance(value, dict):
            assert isinstance(got, dict), here
            assert_summary_matches(got, value, here)
        elif isinstance(value, float):
            assert got is not None and math.isclose(got, value, rel_tol=1e-9), (
                f"{here}: {got} != {value}"
            )
        else:
            assert got == value, f"{here}: {got!r} != {value!r}"
