"""Which bytes of which trace files each loading task reads.

The driver lists the trace files and cuts them into pieces the way Spark's own file
sources do (large files split at ``MAX_SPLIT_BYTES``, small ones packed together, each
file costing ``OPEN_COST`` extra so that a task of many tiny files is not too large),
so loading is as parallel as ``spark.read.text`` was. A piece owns every line that
starts inside its byte range; a task reads a little past its end to finish the last.
"""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from spark_analysis.schema import LIVE_RANK

TRACE_GLOB = "*.jsonl*"
MAX_SPLIT_BYTES = 128 << 20  # spark.sql.files.maxPartitionBytes
OPEN_COST = 4 << 20  # spark.sql.files.openCostInBytes
READ_AHEAD = 64 << 10  # how much is read at a time to finish a piece's last line
_ROTATED = re.compile(r"\.jsonl\.(\d+)")
_INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Piece:
    """Lines of one file that start in ``[start, end)``; ``file`` is the sample's name."""

    path: str
    start: int
    end: int
    rank: int | None
    compressed: bool = False

    @property
    def file(self) -> str:
        return Path(self.path).as_uri().replace("file:///", "file:/", 1)


def rank_of(name: str) -> int | None:
    """Rotation rank: ``x.jsonl.3`` -> 3, the live ``x.jsonl`` -> LIVE_RANK (newest)."""
    m = _ROTATED.search(name)
    if m is None:
        return LIVE_RANK
    n = int(m.group(1))
    return n if n <= _INT_MAX else None  # as Spark's cast of an overflowing number


def _hidden(name: str) -> bool:
    # Spark's file listing skips these (editor and writer temporaries, _SUCCESS, ...).
    return (name.startswith("_") and "=" not in name) or name.startswith(".")


def list_trace_files(path: str) -> list[tuple[str, int]]:
    """Every ``*.jsonl*`` file under ``path`` (or ``path`` itself), with its size.

    Tasks open the files by name, so they must be on a file system every worker sees
    under the same path (local, or mounted like NFS), as the output directory must.
    """
    root = path.removeprefix("file://").removeprefix("file:")
    if "://" in root:
        raise ValueError(f"trace path {path!r}: only local or mounted file systems are read")
    if os.path.isfile(root):
        return [(os.path.abspath(root), os.path.getsize(root))]
    found: list[tuple[str, int]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not _hidden(d))
        for name in sorted(filenames):
            if not _hidden(name) and fnmatchcase(name, TRACE_GLOB):
                full = os.path.abspath(os.path.join(dirpath, name))
                found.append((full, os.path.getsize(full)))
    return found


def split_bytes(files: list[tuple[str, int]], parallelism: int) -> int:
    """Spark's FilePartition.maxSplitBytes: enough pieces to keep every core busy."""
    total = sum(size + OPEN_COST for _, size in files)
    return min(MAX_SPLIT_BYTES, max(OPEN_COST, total // max(1, parallelism)))


def plan_tasks(files: list[tuple[str, int]], parallelism: int) -> list[list[Piece]]:
    """Pieces grouped into tasks: biggest first, each task filled up to the split size."""
    limit = split_bytes(files, parallelism)
    pieces: list[Piece] = []
    for path, size in files:
        rank = rank_of(Path(path).name)
        if path.endswith(".gz"):  # not splittable, as for Spark
            pieces.append(Piece(path, 0, size, rank, compressed=True))
            continue
        for start in range(0, size, limit):
            pieces.append(Piece(path, start, min(size, start + limit), rank))
    pieces.sort(key=lambda p: (p.start - p.end, p.path, p.start))
    tasks: list[list[Piece]] = []
    current: list[Piece] = []
    current_bytes = 0
    for piece in pieces:
        length = piece.end - piece.start
        if current and current_bytes + length > limit:
            tasks.append(current)
            current, current_bytes = [], 0
        current.append(piece)
        current_bytes += length + OPEN_COST
    if current:
        tasks.append(current)
    return tasks


def read_piece(piece: Piece) -> bytes:
    """The whole lines that start in the piece (the last one read to its end)."""
    if piece.compressed:
        with gzip.open(piece.path, "rb") as fh:
            return fh.read()
    with open(piece.path, "rb") as fh:
        if piece.start == 0:
            data = fh.read(piece.end)
        else:
            # From the byte before the start: the line in progress there belongs to the
            # previous piece, the first line break ends it.
            fh.seek(piece.start - 1)
            data = fh.read(piece.end - piece.start + 1)
            cut = data.find(b"\n")
            if cut < 0:
                return b""  # one line runs through the whole piece: not ours
            data = data[cut + 1 :]
        if data and not data.endswith(b"\n"):
            tail = [data]
            while chunk := fh.read(READ_AHEAD):
                cut = chunk.find(b"\n")
                if cut >= 0:
                    tail.append(chunk[: cut + 1])
                    break
                tail.append(chunk)
            data = b"".join(tail)
    return data
