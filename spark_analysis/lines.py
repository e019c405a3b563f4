"""One trace line -> a typed record or the reason it is malformed (the reference rules).

Blocks Arrow rejects are read with this, so it decides every bad line; good lines get
the same values here as from Arrow (tests/spark/test_load.py compares the two).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from spark_analysis.schema import FIELDS, NORMALIZED_SCHEMA, REQUIRED, Ev

# Spark's own conversion of the contract's types, so Arrow and Spark agree on them.
FIELD_SCHEMA: pa.Schema = to_arrow_schema(T.StructType([T.StructField(n, t) for n, t in FIELDS]))
# The records as written to Parquet (ev is the partition, so a file has all but it).
ARROW_SCHEMA: pa.Schema = to_arrow_schema(NORMALIZED_SCHEMA)

BLANK = b" \t\r\n"
_LONG_NUMBER = re.compile(rb"\d{19}")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_KIND = {name: type(t) for name, t in FIELDS}
# node and ev must be text (a reason of their own), attrs an object on a publish record.
_CHECKED_LATER = ("node", "ev", "attrs")


def _strict_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def load_json(line: bytes) -> Any:
    """The line's JSON value; raises ValueError when it is not JSON.

    orjson, except where it would differ from the text: it reads an integer beyond 64
    bits as a float (a filter tells 1 from 1.0), and refuses a number beyond the double
    range or a lone surrogate escape, which are still JSON. Those lines are read by the
    standard library, without its NaN and Infinity extensions.
    """
    if not _LONG_NUMBER.search(line):
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(line.decode("utf-8"), parse_constant=_strict_constant)
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(str(exc)) from exc


def json_text(value: Any) -> str:
    """Compact JSON text of a parsed value (attrs): key order and number kinds kept."""
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):  # integers beyond 64 bits
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _typed(name: str, value: Any) -> tuple[bool, Any]:
    """(ok, value as stored) for a non-null field other than node, ev and attrs."""
    kind = _KIND[name]
    if kind is T.DoubleType:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False, None
        try:
            return True, float(value)
        except OverflowError:  # an integer too large for a double reads as infinite
            return True, math.copysign(math.inf, value)
    if kind is T.LongType:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return (True, value) if ok and _LONG_MIN <= value <= _LONG_MAX else (False, None)
    if kind is T.BooleanType:
        return (True, value) if isinstance(value, bool) else (False, None)
    # A number, boolean, object or array for a text field breaks the contract as a
    # string for a number does (Spark used to keep its JSON text).
    return (True, value) if isinstance(value, str) else (False, None)


def parse_line(line: bytes) -> tuple[str | None, dict[str, Any] | None]:
    """(None, record) for a good line, else (reason, None); reasons as load.BAD_REASONS.

    The order of the tests is the order of the reasons: a line with several faults
    gets the first.
    """
    if not line.strip(BLANK):
        return "empty line", None
    try:
        obj = load_json(line)
    except ValueError:
        return "not a JSON object", None
    if not isinstance(obj, dict):
        return "not a JSON object", None
    record: dict[str, Any] = {}
    wrong = False
    for name, value in obj.items():
        if value is None or name not in _KIND:
            continue
        if name in _CHECKED_LATER:
            record[name] = value
        else:
            ok, stored = _typed(name, value)
            wrong = wrong or not ok
            if ok:
                record[name] = stored
    if wrong:
        # As Spark's permissive parse: a line where none of ts, node and ev survived
        # is not taken for a record at all.
        if all(record.get(name) is None for name in REQUIRED):
            return "not a JSON object", None
        return "field of the wrong type", None
    if any(record.get(name) is None for name in REQUIRED):
        return "missing ts, node or ev", None
    if not math.isfinite(record["ts"]):
        return "ts not finite", None
    if not (isinstance(record["node"], str) and isinstance(record["ev"], str)):
        return "node or ev not text", None
    attrs = record.get("attrs")
    if attrs is not None:
        if record["ev"] == Ev.PUBLISH and not isinstance(attrs, dict):
            return "attrs not an object", None
        # Other records may carry any JSON value there (a string as itself).
        record["attrs"] = attrs if isinstance(attrs, str) else json_text(attrs)
    return None, record
