"""Trace lines -> typed Arrow columns, bad lines counted by reason (runs in a task).

Arrow's C++ JSON reader parses a whole block of lines against the explicit schema,
without a Python object per value; it is strict where the contract is (a number for a
string, a float for an integer, a number for a boolean, a repeated key: all errors).
Where it is more lenient than the contract or cannot express it, the block is checked
first with whole-buffer byte counts, and any block Arrow or a check rejects is halved
until the bad line is in a small block, which goes line by line (:mod:`lines`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from spark_analysis import lines as per_line

ARROW_SCHEMA = per_line.ARROW_SCHEMA
# Parsed by Arrow: everything but attrs, whose JSON text must be kept as written
# (true, 1 and 1.0 differ for the filters), which Arrow cannot give back.
_FAST_SCHEMA = pa.schema([f for f in per_line.FIELD_SCHEMA if f.name != "attrs"])
_PARSE_OPTIONS = pj.ParseOptions(
    explicit_schema=_FAST_SCHEMA, unexpected_field_behavior="ignore", newlines_in_values=False
)
# Lines of the record types that are nearly every line of a trace (an event's hops)
# are parsed by type, each against the few fields its type carries: Arrow's cost per
# line grows with the schema's width, and these are a quarter of it. A hop line with
# any other field fails its parse (unexpected field), and its block is parsed whole.
_HOP_COMMON = ("ts", "node", "ev", "run", "topic", "msg_id")
HOP_FIELDS = {  # TRACES.md; ``replay`` on deliver is beyond it
    "forward": (*_HOP_COMMON, "to", "hop"),
    "recv": (*_HOP_COMMON, "from", "hop", "dup"),
    "deliver": (*_HOP_COMMON, "sub", "hop", "seq", "dup", "replay"),
}
HOP_EV = '"ev":"(?P<ev>' + "|".join(HOP_FIELDS) + ')"'
_HOP_PARSE_OPTIONS = {
    ev: pj.ParseOptions(
        explicit_schema=pa.schema([f for f in _FAST_SCHEMA if f.name in fields]),
        unexpected_field_behavior="error",
        newlines_in_values=False,
    )
    for ev, fields in HOP_FIELDS.items()
}
# One thread: Spark runs a task per core already. Blocks of a few MiB parse as fast as
# one block of the whole file, in less memory (a longer line fails, and is read alone).
_READ_OPTIONS = pj.ReadOptions(use_threads=False, block_size=4 << 20)
# Below this many bytes a rejected block is read line by line instead of halved again.
LINE_BY_LINE_BYTES = 16 << 10
SAMPLE_CHARS = 300
_ATTRS_KEY = b'"attrs"'
_NEWLINE, _OPEN_BRACE = ord("\n"), ord("{")
# NaN, Inf or Infinity where a value starts (maybe inside a text, which only costs time)
_CONSTANT_VALUE = re.compile(rb"[:\[,]\s*-?(?:NaN|Inf)")


@dataclass
class Tally:
    """Line counts of what a task parsed, and the first bad line of each reason."""

    lines: int = 0
    bad: dict[str, int] = field(default_factory=dict)
    # reason -> (file, row, first characters of the line): the first in the files'
    # order, so that the sample does not depend on how the work was split
    samples: dict[str, tuple[str, int, str]] = field(default_factory=dict)

    def add_bad(self, reason: str, file: str, row: int, line: bytes) -> None:
        self.bad[reason] = self.bad.get(reason, 0) + 1
        self._sample(reason, (file, row, line.decode("utf-8", "replace")[:SAMPLE_CHARS]))

    def _sample(self, reason: str, sample: tuple[str, int, str]) -> None:
        old = self.samples.get(reason)
        if old is None or sample[:2] < old[:2]:
            self.samples[reason] = sample

    def merge(self, other: Tally) -> None:
        self.lines += other.lines
        for reason, n in other.bad.items():
            self.bad[reason] = self.bad.get(reason, 0) + n
        for reason, sample in other.samples.items():
            self._sample(reason, sample)


def line_count(data: bytes) -> int:
    """Lines as a line reader counts them: a last line without a line break counts."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _valid_utf8(data: bytes) -> bool:
    if data.isascii():  # nearly always, and much cheaper than decoding
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _line_breaks(data: bytes) -> np.ndarray:
    """Positions of the block's line breaks."""
    return np.flatnonzero(np.frombuffer(data, np.uint8) == _NEWLINE)


def _plain_objects(data: bytes, breaks: np.ndarray) -> bool:
    """Every line starts with ``{`` and the block is valid UTF-8.

    Arrow skips blank lines (they must be counted), reads two objects on one line as
    two rows, crashes on a block that starts with a bare ``null`` and keeps invalid
    UTF-8 in its strings: such blocks go line by line. With every line starting with
    "{", none is blank and each gives Arrow a row at least, so the row count (checked
    after the parse) finds two objects on one line.
    """
    starts = breaks + 1
    starts = starts[starts < len(data)]
    view = np.frombuffer(data, np.uint8)
    return (
        data.startswith(b"{")
        and bool((view[starts] == _OPEN_BRACE).all())
        and _valid_utf8(data)
    )


def _no_constants(data: bytes) -> bool:
    """No NaN, Inf or Infinity as a value, which Arrow reads as numbers (JSON has no
    such values). Needed only where a double other than ``ts`` may be: ``ts`` is
    checked to be finite after the parse, and Arrow refuses them for the other types.
    A text that merely holds the letters is searched again for them as a value.
    """
    if b"NaN" not in data and b"Inf" not in data:
        return True
    return _CONSTANT_VALUE.search(data) is None


def _attrs(data: bytes, ev: pa.Array) -> pa.Array | None:
    """attrs as JSON text, or None when a line with attrs has to be read line by line.

    Only publish records carry attrs (about 1% of lines): each line that mentions
    ``"attrs"`` is found by a search, numbered by counting the line breaks before it,
    and parsed again, by the line-by-line reference. A publish line without it keeps a
    null attrs, as that reference would.
    """
    pos = data.find(_ATTRS_KEY)
    if pos < 0:
        return nulls(len(ev), pa.string())
    texts: list[str | None] = [None] * len(ev)
    row, counted = 0, 0
    while pos >= 0:
        start = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        row += data.count(b"\n", counted, start)
        counted = start
        reason, record = per_line.parse_line(data[start:end])
        if reason is not None or record is None or record["ev"] != ev[row].as_py():
            return None
        texts[row] = record.get("attrs")
        pos = data.find(_ATTRS_KEY, end)
    return pa.array(texts, pa.string())


def _read(data: bytes | pa.Buffer, n: int, options: pj.ParseOptions) -> pa.Table | None:
    """``n`` lines parsed by Arrow, or None when Arrow rejects them or finds a bad one."""
    try:
        table = pj.read_json(
            pa.BufferReader(data), read_options=_READ_OPTIONS, parse_options=options
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != n:
        return None
    required = [table.column(name) for name in ("ts", "node", "ev")]
    if any(col.null_count for col in required) or not pc.all(pc.is_finite(required[0])).as_py():
        return None
    return table


def _whole(data: bytes | pa.Buffer, n: int) -> pa.Table | None:
    """All fields of ``n`` lines, attrs as their JSON text; None if any line is bad."""
    raw = bytes(data)
    if not _no_constants(raw):
        return None
    table = _read(data, n, _PARSE_OPTIONS)
    if table is None:
        return None
    attrs = _attrs(raw, table.column("ev").combine_chunks())
    if attrs is None:
        return None
    return table.append_column(per_line.FIELD_SCHEMA.field("attrs"), attrs).select(
        per_line.FIELD_SCHEMA.names
    )


# Most of a record's columns are null (a hop line fills 8 of about 40), and the tables
# sent to Spark are alive together until written, so every pa.nulls column was fresh
# memory to fault in and zero: widening a 34,085-line block's forward records took
# 21.8 ms, against 0.28 ms with slices of one shared all-null array per type. A slice
# shares the zeros; Arrow's IPC writer sends it as any other column of nulls.
SHARED_NULL_ROWS = 1 << 16
_SHARED_NULLS: dict[pa.DataType, pa.Array] = {}


def nulls(n: int, kind: pa.DataType) -> pa.Array:
    """``n`` nulls of type ``kind``: a slice of a shared all-null array of that type."""
    shared = _SHARED_NULLS.get(kind)
    if shared is None or len(shared) < n:
        shared = _SHARED_NULLS[kind] = pa.nulls(max(n, SHARED_NULL_ROWS), kind)
    return shared.slice(0, n)


def _widened(table: pa.Table) -> pa.Table:
    """A table of some of the fields with the others added as nulls, in schema order."""
    n = table.num_rows
    return pa.table(
        [
            table.column(f.name) if f.name in table.column_names else nulls(n, f.type)
            for f in per_line.FIELD_SCHEMA
        ],
        schema=per_line.FIELD_SCHEMA,
    )


def _lines_of(data: bytes, n: int, breaks: np.ndarray) -> pa.LargeBinaryArray:
    """The block's lines (line breaks included) as an array over the same bytes."""
    offsets = np.zeros(n + 1, np.int64)
    offsets[1 : len(breaks) + 1] = breaks + 1
    offsets[n] = len(data)  # the last line may lack its line break
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, buffers)


def _joined(lines: pa.LargeBinaryArray) -> pa.Buffer:
    """The bytes of ``lines`` one after another (they keep their line breaks)."""
    offsets = np.frombuffer(lines.buffers()[1], np.int64, len(lines) + 1, lines.offset)
    return lines.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def _by_type(
    data: bytes, n: int, breaks: np.ndarray | None = None
) -> list[tuple[pa.Table, np.ndarray]] | None:
    """The hop lines parsed by record type on their narrow schemas, the others on the
    full one, each part with the numbers of its lines.

    ``[]`` when the other lines hold a bad one (the block as a whole would fail too),
    None when some hop lines fail their narrow parse (the block may still be good).
    """
    lines = _lines_of(data, n, _line_breaks(data) if breaks is None else breaks)
    hop_ev = pc.struct_field(pc.extract_regex(lines, HOP_EV), "ev")
    masks = [(ev, pc.fill_null(pc.equal(hop_ev, ev), False)) for ev in HOP_FIELDS]
    masks.append((None, pc.is_null(hop_ev)))
    parts = []
    for ev, mask in masks:
        rows = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        if len(rows) == 0:
            continue
        picked = _joined(lines.filter(mask))
        if ev is None:
            table = _whole(picked, len(rows))
            if table is None:
                return []
            parts.append((table, rows))
        else:
            table = _read(picked, len(rows), _HOP_PARSE_OPTIONS[ev])
            if table is None:
                return None
            parts.append((_widened(table), rows))
    return parts


def _fast(
    data: bytes, n: int, breaks: np.ndarray
) -> list[tuple[pa.Table, np.ndarray | None]] | None:
    """The block of ``n`` lines (``breaks``: its line breaks) parsed by Arrow as tables
    with their line numbers (None: all lines in order), or None when it holds anything
    but good records."""
    if not _plain_objects(data, breaks):
        return None
    parts = _by_type(data, n, breaks)
    if parts is not None:
        return parts or None  # [] : a bad line among the others
    table = _whole(data, n)
    return None if table is None else [(table, None)]


def _with_source(table: pa.Table, rank: int | None, rows: pa.Array) -> pa.Table:
    n = table.num_rows
    return table.append_column(
        ARROW_SCHEMA.field("src_rank"), pa.array([rank] * n, pa.int32())
    ).append_column(ARROW_SCHEMA.field("src_row"), rows)


def _halves(data: bytes) -> tuple[bytes, bytes] | None:
    middle = data.find(b"\n", len(data) // 2)
    if middle < 0 or middle + 1 >= len(data):
        middle = data.rfind(b"\n", 0, len(data) // 2)
    if middle < 0:
        return None
    return data[: middle + 1], data[middle + 1 :]


def parse_block(
    data: bytes,
    rank: int | None,
    file: str,
    tally: Tally,
    first_row: int = 0,
) -> list[pa.Table]:
    """Good records of the whole lines ``data`` (``src_row`` counted from ``first_row``).

    Adds every line to ``tally`` and every bad one to its reason.
    """
    breaks = _line_breaks(data)  # found once: the count, the checks and the lines
    n = len(breaks) + (1 if data and not data.endswith(b"\n") else 0)
    if n == 0:
        return []
    parts = _fast(data, n, breaks)
    if parts is not None:
        tally.lines += n
        return [
            _with_source(
                table,
                rank,
                pa.arange(first_row, first_row + n) if rows is None else pa.array(rows + first_row),
            )
            for table, rows in parts
        ]
    halves = _halves(data) if len(data) > LINE_BY_LINE_BYTES else None
    if halves is None:
        table, rows = _line_by_line(data, file, tally, first_row)
        return [_with_source(table, rank, pa.array(rows, pa.int64()))]
    head, tail = halves
    out = parse_block(head, rank, file, tally, first_row)
    return out + parse_block(tail, rank, file, tally, first_row + line_count(head))


def _line_by_line(
    data: bytes, file: str, tally: Tally, first_row: int
) -> tuple[pa.Table, list[int]]:
    """Good records of a small block parsed one line at a time, and their line numbers."""
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    columns: dict[str, list[object]] = {name: [] for name in per_line.FIELD_SCHEMA.names}
    rows: list[int] = []
    for i, line in enumerate(lines, first_row):
        tally.lines += 1
        reason, record = per_line.parse_line(line)
        if reason is not None or record is None:
            tally.add_bad(reason or "not a JSON object", file, i, line)
            continue
        rows.append(i)
        for name, values in columns.items():
            values.append(record.get(name))
    return pa.table(columns, schema=per_line.FIELD_SCHEMA), rows


def parse_text(data: str, rank: int | None = 0) -> tuple[pa.Table, Tally]:
    """One file's text parsed as a task parses it, records in line order: for tests and
    tools."""
    tally = Tally()
    tables = parse_block(data.encode(), rank, "test", tally)
    if not tables:
        return ARROW_SCHEMA.empty_table(), tally
    table = pa.concat_tables(tables)
    return table.take(pc.sort_indices(table.column("src_row"))), tally
