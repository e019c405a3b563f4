"""Trace writer: structlog renders TRACES.md records as JSON lines into per-node files.

Each node writes ``<trace_dir>/<node-hex-id>.jsonl``. When the current file passes
``max_bytes`` it is closed and renamed to the next free ``.jsonl.N`` (N = 1, 2, ...),
so rotation never renames older files again and nothing is deleted (readers take every
``*.jsonl*`` file; records carry their own ``ts``). Lines are buffered and written in
batches; ``flush()`` (periodically, and on shutdown) puts them on disk. The file is
opened only while writing, so a simulation with thousands of nodes holds no file
descriptors between flushes.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

import structlog

DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_BUFFER_BYTES = 32 << 10
TRACE_VERSION = 1


class RotatingJsonlFile:
    """Takes rendered lines, buffers, appends and rotates by size (its methods are those
    of a structlog 'logger')."""

    def __init__(
        self,
        path: Path,
        max_bytes: int = DEFAULT_MAX_BYTES,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.buffer_bytes = buffer_bytes
        self._pending: list[str] = []
        self._pending_bytes = 0
        self._size = path.stat().st_size if path.exists() else 0
        self.closed = False

    def msg(self, message: str) -> None:
        if self.closed:
            raise ValueError(f"trace file {self.path} is closed")
        line = message + "\n"
        self._pending.append(line)
        self._pending_bytes += len(line)
        if self._pending_bytes >= self.buffer_bytes:
            self.flush()

    # structlog calls the method named after the log level; all of them append a record.
    info = debug = warning = error = msg

    def flush(self) -> None:
        if not self._pending:
            return
        data = "".join(self._pending).encode()
        self._pending.clear()
        self._pending_bytes = 0
        if self._size and self._size + len(data) > self.max_bytes:
            self._rotate()
        with open(self.path, "ab") as fh:
            fh.write(data)
        self._size += len(data)

    def close(self) -> None:
        if not self.closed:
            self.flush()
            self.closed = True

    def _rotate(self) -> None:
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
    return value


_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_json_default, allow_nan=False)
#: The C encoder behind ``_ENCODER.encode``, made once instead of on every call (what
#: ``json.dumps`` does); same output. None where the C accelerator is missing.
_C_ENCODE: Callable[[Any, int], Any] | None = None if c_make_encoder is None else c_make_encoder(
    None, _json_default, encode_basestring_ascii, None, ":", ",", False, False, False)


def _encode(record: dict[str, Any]) -> str:
    if _C_ENCODE is not None:
        return "".join(_C_ENCODE(record, 0))
    return _ENCODER.encode(record)


def render(record: dict[str, Any]) -> str:
    """One JSON line, no spaces, ASCII, in the record's own key order; NaN and infinite
    top-level numbers become null (a nested one is refused: ValueError)."""
    try:
        return _encode(record)
    except ValueError:  # a NaN or an infinity: rare, so checked only when it happens
        return _encode({key: _finite(value) for key, value in record.items()})


#: A bound-logger class whose methods render without level checks or lookups.
_LOGGER_CLASS = structlog.make_filtering_bound_logger(logging.NOTSET)


def _render(_logger: Any, _method: str, event_dict: dict[str, Any]) -> str:
    """structlog's one processor: the record (built in :meth:`NodeTracer.write`, in its
    fixed field order) as one JSON line."""
    return render(event_dict["record"])


class NodeTracer:
    """Writes one node's trace records through structlog.

    Field order is fixed (ts, node, ev, run, then the record's own fields in the order
    the core gave them) so that equal runs give byte-identical files. A daemon writes
    several records per event, so the pipeline is kept to one processor that renders
    the record built here with a JSON encoder made once.
    """

    def __init__(
        self,
        trace_dir: Path | str,
        node_hex: str,
        run: str | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    ) -> None:
        directory = Path(trace_dir)
        directory.mkdir(parents=True, exist_ok=True)
        self.node = node_hex
        self.run = run
        self.file = RotatingJsonlFile(directory / f"{node_hex}.jsonl", max_bytes, buffer_bytes)
        # Bound at once (no lazy proxy) with structlog's generated fast logger class.
        self._log = structlog.wrap_logger(
            self.file, processors=[_render], context_class=dict, wrapper_class=_LOGGER_CLASS,
        ).bind()

    def write(self, ts: float, ev: str, fields: dict[str, Any]) -> None:
        if self.run is None:
            record = {"ts": ts, "node": self.node, "ev": ev}
        else:
            record = {"ts": ts, "node": self.node, "ev": ev, "run": self.run}
        record.update(fields)
        self._log.info(ev, record=record)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()
