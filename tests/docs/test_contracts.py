"""docs/ is the source of truth: its tables of ops, fields, error codes and trace records
are read here and checked against what the code does, both ways (a field or code
documented but not implemented fails, and so does the reverse)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from overlay.runtime.api.requests import ERROR_CODES, OPS, parse_request
from tests.api.test_api_server import raw, served  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def table(doc: str, heading: str) -> list[list[str]]:
    """The body rows of the first table after ``heading`` in ``docs/<doc>``."""
    text = (DOCS / doc).read_text()
    rows: list[list[str]] = []
    for line in text[text.index(heading):].splitlines()[1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[2:]


def names(cell: str) -> set[str]:
    """Field names in a cell: the backticked identifiers outside parentheses (inside
    them stand types, values and remarks)."""
    outside = re.sub(r"\([^()]*\)", "", cell)
    return set(re.findall(r"`([a-z_][a-z0-9_]*)`", outside))


def code_of(cell: str) -> str:
    match = re.fullmatch(r"`([a-z_]+)`", cell)
    assert match, f"not a backticked name: {cell!r}"
    return match.group(1)


# -- API.md -----------------------------------------------------------------------------------

REQUESTS = {code_of(row[0]): row for row in table("API.md", "## Requests")}


def test_the_documented_ops_are_the_implemented_ones() -> None:
    assert set(REQUESTS) == set(OPS)


class Recording(Mapping[str, Any]):
    """A request map that notes every key the parser looks at."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.looked: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.looked.add(key)
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        self.looked.add(key)
        return self.data.get(key, default)

    def __contains__(self, key: object) -> bool:
        self.looked.add(str(key))
        return key in self.data

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


#: A value of the right kind for every request field the docs name.
FULL = {"version": 1, "client": "c", "topic": "t", "filter": "a > 1", "expiry": 5.0,
        "replay": {"last": 3}, "group": "g", "sub": 7, "attrs": {"a": 1}, "payload": b"p",
        "reliable": False, "msg_id": "ab", "batch_notify": True, "events": [{"topic": "t"}],
        "durable": "d", "ack": True, "ack_wait": 2.0, "max_deliver": 3, "dead_letter": "dl",
        "max_inflight": 10, "pull": True, "msg_ids": ["ab", "cd"], "delay": 1.5, "max": 5,
        "wait": 0.5, "ttl": 60.0}
#: Fields a request reads but may not carry together with all the others: a durable
#: subscribe takes no expiry, replay or group; an acknowledgement names its events by
#: ``msg_id`` or by ``msg_ids``.
EXCLUSIVE = {"subscribe": {"expiry", "replay", "group"}, "ack": {"msg_ids"}, "nak": {"msg_ids"},
             "term": {"msg_ids"}}


@pytest.mark.parametrize("op", sorted(OPS))
def test_each_op_reads_exactly_its_documented_fields(op: str) -> None:
    documented = names(REQUESTS[op][1])
    assert documented <= FULL.keys(), f"add a value for {documented - FULL.keys()}"
    request = Recording({"op": op, **{k: v for k, v in FULL.items()
                                      if k in documented and k not in EXCLUSIVE.get(op, ())}})
    parse_request(request)
    assert request.looked - {"op"} == documented


@pytest.mark.parametrize("op", sorted(OPS))
def test_each_documented_field_is_checked(op: str) -> None:
    """A documented field of the wrong kind is refused, naming the field."""
    for name in names(REQUESTS[op][1]):
        request = {"op": op, **{k: FULL[k] for k in names(REQUESTS[op][1])
                                if k not in EXCLUSIVE.get(op, ()) or k == name}}
        if name in EXCLUSIVE.get(op, ()) and op != "subscribe":
            del request["msg_id"]  # msg_ids checked alone
        request[name] = object()  # no CBOR value decodes to this: wrong for every field
        with pytest.raises(Exception, match=name.replace("_", ".")):
            parse_request(request)


def test_the_documented_error_codes_are_the_implemented_ones() -> None:
    documented = {code_of(row[0]) for row in table("API.md", "## Errors")}
    assert documented == ERROR_CODES


def test_clients_know_every_error_code() -> None:
    from overlay.client_common import _ERRORS

    assert set(_ERRORS) <= ERROR_CODES
    # Every code a client can meet without a bug or a broken frame has its own class.
    assert ERROR_CODES - set(_ERRORS) <= {"bad_frame", "bad_request", "internal"}


async def test_replies_carry_exactly_the_documented_fields(
        served: Any) -> None:  # noqa: F811
    _, _, path = served
    conn = await raw(path, greet=False)
    replies = {
        "hello": await conn.call(op="hello", version=1, rid=1),
        "subscribe": await conn.call(op="subscribe", topic="t", rid=2),
        "publish": await conn.call(op="publish", topic="elsewhere", rid=3),
    }
    replies["renew"] = await conn.call(op="renew", sub=replies["subscribe"]["sub"],
                                       expiry=5, rid=4)
    replies["unsubscribe"] = await conn.call(op="unsubscribe", sub=replies["subscribe"]["sub"],
                                             rid=5)
    for op, reply in replies.items():
        assert reply["ok"], reply
        assert set(reply) - {"rid", "ok"} == names(REQUESTS[op][2]), op


# -- TRACES.md --------------------------------------------------------------------------------

TRACED = ("chord", "scribe", "overlay/gossip", "overlay/runtime", "overlay/sim")
COMMON = {"ts", "node", "ev", "run"}


def _module_dicts(tree: ast.Module) -> dict[str, set[str]]:
    """Module-level ``NAME = {"key": ...}`` (field sets spread into trace calls)."""
    found: dict[str, set[str]] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):
            found[target.id] = {k.value for k in node.value.keys
                                if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return found


def _spread_keys(value: ast.expr, dicts: dict[str, set[str]]) -> set[str]:
    if isinstance(value, ast.Dict):
        return {k.value for k in value.keys if isinstance(k, ast.Constant)}
    if isinstance(value, ast.Name):
        return dicts.get(value.id, set())
    if isinstance(value, ast.IfExp):
        return _spread_keys(value.body, dicts) | _spread_keys(value.orelse, dicts)
    return set()


def emitted_records() -> dict[str, set[str]]:
    """Per record type, the fields some ``trace(ev, ...)`` or ``Trace(ev, {...})`` call
    in the cores and the runtime writes."""
    records: dict[str, set[str]] = {}
    for folder in TRACED:
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            dicts = _module_dicts(tree)
            for call in ast.walk(tree):
                if not isinstance(call, ast.Call) or not call.args:
                    continue
                func = call.func
                name = func.attr if isinstance(func, ast.Attribute) else (
                    func.id if isinstance(func, ast.Name) else "")
                first = call.args[0]
                if name not in ("trace", "Trace") or not (
                        isinstance(first, ast.Constant) and isinstance(first.value, str)):
                    continue
                fields = records.setdefault(first.value, set())
                for kw in call.keywords:
                    fields |= {kw.arg} if kw.arg else _spread_keys(kw.value, dicts)
                for arg in call.args[1:]:
                    fields |= _spread_keys(arg, dicts)
    return records


def test_the_documented_trace_records_are_the_emitted_ones() -> None:
    documented = {code_of(row[0]): names(row[1]) for row in table("TRACES.md",
                                                                   "## Record types")}
    emitted = emitted_records()
    assert set(documented) == set(emitted)
    for ev, fields in emitted.items():
        assert fields - COMMON == documented[ev], ev
    common = {code_of(row[0]) for row in table("TRACES.md", "## Fields in every record")}
    assert common == COMMON
