"""Trace writer: structlog renders TRACES.md records as JSON lines into per-node files.

Each node writes ``<trace_dir>/<node-hex-id>.jsonl``. When the current file passes
``max_bytes`` it is closed and renamed to the next free ``.jsonl.N`` (N = 1, 2, ...),
so rotation never renames older files again and nothing is deleted (readers take every
``*.jsonl*`` file; records carry their own ``ts``). Lines are buffered and written in
batches; ``flush()`` (periodically, and on shutdown) puts them on disk. By default the
file is opened only while writing, so a simulation with thousands of nodes holds no
file descriptors between flushes; a daemon keeps its one file open (``keep_open``):
opening and closing it cost 40 of a 32 KiB flush's 50 us.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import structlog

DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_BUFFER_BYTES = 32 << 10


class RotatingJsonlFile:
    """Takes rendered lines (UTF-8 bytes, without the newline), buffers, appends and
    rotates by size (its methods are those of a structlog 'logger')."""

    def __init__(
        self,
        path: Path,
        max_bytes: int = DEFAULT_MAX_BYTES,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        keep_open: bool = False,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.buffer_bytes = buffer_bytes
        self.keep_open = keep_open
        #: With ``keep_open``: the file, from the first flush until rotation or close.
        self._open: BinaryIO | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._size = path.stat().st_size if path.exists() else 0
        self.closed = False

    def msg(self, message: bytes) -> None:
        if self.closed:
            raise ValueError(f"trace file {self.path} is closed")
        self._pending.append(message)
        self._pending.append(b"\n")
        self._pending_bytes += len(message) + 1
        if self._pending_bytes >= self.buffer_bytes:
            self.flush()

    # structlog calls the method named after the log level; all of them append a record.
    info = debug = warning = error = msg

    def flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        if self._size and self._size + len(data) > self.max_bytes:
            self._rotate()
        if self.keep_open:
            if self._open is None:
                self._open = open(self.path, "ab")  # noqa: SIM115  # held across flushes
            self._open.write(data)
            self._open.flush()
        else:
            with open(self.path, "ab") as fh:
                fh.write(data)
        self._size += len(data)

    def close(self) -> None:
        if not self.closed:
            self.flush()
            self._close_file()
            self.closed = True

    def _close_file(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None

    def _rotate(self) -> None:
        self._close_file()
        n = 1
        while (rotated := self.path.with_name(f"{self.path.name}.{n}")).exists():
            n += 1
        os.replace(self.path, rotated)
        self._size = 0


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, set | frozenset | tuple):
        return sorted(value) if isinstance(value, set | frozenset) else list(value)
    raise TypeError(f"cannot put {type(value).__name__} in a trace record")


def _finite(value: Any) -> Any:
    # JSON has no NaN/Infinity; a trace must stay readable by every JSON parser.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_json_default, allow_nan=False)


def render(record: dict[str, Any]) -> bytes:
    """One JSON line (UTF-8, no spaces, the record's own key order); NaN and infinite
    numbers become null, bytes hex text, sets sorted lists, tuples lists.

    orjson does it in a fraction of a microsecond (a daemon writes several records per
    event); what it refuses (an int beyond 64 bits, a key that is not text) goes
    through the json module, with the same meaning.
    """
    try:
        return orjson.dumps(record, default=_json_default)
    except orjson.JSONEncodeError:
        pass
    try:
        return _ENCODER.encode(record).encode()
    except ValueError:  # a NaN or an infinity
        return _ENCODER.encode(_finite(record)).encode()


#: One record as a driver hands it over: time stamp, ``ev``, the record's own fields.
TraceItem = tuple[float, str, dict[str, Any]]

#: A bound-logger class whose methods render without level checks or lookups.
_LOGGER_CLASS = structlog.make_filtering_bound_logger(logging.NOTSET)


def render_lines(node: str, run: str | None, items: list[TraceItem]) -> bytes:
    """The records (ts, ev, fields) of one node as JSON lines, joined by newlines.

    A record's line is its head (``ts``, ``node``, ``ev``, ``run``), rendered once per
    distinct (ts, ev) of the call (a driver stamps one core step's records with one
    time), followed by its own fields rendered alone. Building each record's merged
    dict and rendering the head's keys again took half of a record's cost (6.7k
    against 3.6k instructions, measured). The bytes are those of :func:`render` of the
    merged record, which is the path taken when orjson refuses a record's fields. The
    fields must not reuse the head's names.
    """
    heads = _Heads(node, run)
    dumps = orjson.dumps
    try:
        return b"\n".join([
            heads[ts, ev] + dumps(fields, default=_json_default)[1:] if fields
            else heads[ts, ev][:-1] + b"}" for ts, ev, fields in items])
    except orjson.JSONEncodeError:
        tagged = {} if run is None else {"run": run}
        return b"\n".join([render({"ts": ts, "node": node, "ev": ev, **tagged, **fields})
                            for ts, ev, fields in items])


class _Heads(dict[tuple[float, str], bytes]):
    """(ts, ev) -> the line's start up to its own fields: ``{"ts":..,"node":..,"ev":..,``
    (and ``"run":..,``), rendered when first asked for."""

    def __init__(self, node: str, run: str | None) -> None:
        super().__init__()
        self.node = node
        self.tagged = {} if run is None else {"run": run}

    def __missing__(self, key: tuple[float, str]) -> bytes:
        ts, ev = key
        record = {"ts": ts, "node": self.node, "ev": ev, **self.tagged}
        head = self[key] = render(record)[:-1] + b","
        return head


def _render(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> bytes:
    """structlog's one processor: the records given to :class:`NodeTracer` (with its
    node and run, in the fixed field order) as JSON lines."""
    return render_lines(event_dict["node"], event_dict["run"], event_dict["items"])


class NodeTracer:
    """Writes one node's trace records through structlog.

    Field order is fixed (ts, node, ev, run, then the record's own fields in the order
    the core gave them) so that equal runs give byte-identical files. A daemon writes
    several records per event, so the pipeline is one processor (:func:`render_lines`),
    called once for all the records a driver hands over together.
    """

    def __init__(
        self,
        trace_dir: Path | str,
        node_hex: str,
        run: str | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        keep_open: bool = False,
    ) -> None:
        """``keep_open``: hold the file open between flushes (:class:`RotatingJsonlFile`)."""
        directory = Path(trace_dir)
        directory.mkdir(parents=True, exist_ok=True)
        self.node = node_hex
        self.run = run
        self.file = RotatingJsonlFile(directory / f"{node_hex}.jsonl", max_bytes, buffer_bytes,
                                      keep_open)
        # Bound at once (no lazy proxy) with structlog's generated fast logger class.
        self._log = structlog.wrap_logger(
            self.file, processors=[_render], context_class=dict, wrapper_class=_LOGGER_CLASS,
        ).bind()

    def write(self, ts: float, ev: str, fields: dict[str, Any]) -> None:
        self.write_all([(ts, ev, fields)])

    def write_all(self, items: list[TraceItem]) -> None:
        """Records (ts, ev, fields) in one pass through structlog: a daemon writes a
        burst's records together, and the pipeline's fixed cost per call is then paid
        once for all of them rather than per record."""
        if items:
            self._log.info("records", node=self.node, run=self.run, items=items)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()
