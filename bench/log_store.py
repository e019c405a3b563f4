"""CPU per event of the topic-log store's writes and load (overlay.runtime.logstore), on
the thread that does them, for the shapes a daemon gives it: appends of one event or of
a publish batch's 64, grouped into transactions of 64 or 640 events (group commit
gathers what arrives during the previous commit). Each shape runs ``--repeat`` times
on a fresh file; the median and the minimum are printed. ``sync = always`` adds an
fsync per transaction, which is the disk's time, not CPU: the runs use ``never``.

    .venv/bin/python bench/log_store.py [--events 30000] [--payload 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# This file's folder must not hide packages (bench/scribe.py, bench/matching.py); the
# repository it is in comes first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from overlay.core.storage import StorageOp, SyncPolicy  # noqa: E402
from overlay.runtime.logstore import LogStore  # noqa: E402
from scribe.durability import AppendEvents  # noqa: E402
from scribe.wire_records import EventBody  # noqa: E402

TOPIC = "bench"
NODE = "ab" * 16

#: (events per append, events per transaction)
SHAPES = [(64, 640), (1, 64), (1, 640)]


def transactions(events: int, payload: int, per_append: int, per_transaction: int,
                 ) -> list[list[StorageOp]]:
    bodies = [EventBody(TOPIC, f"{i:032x}", i, {"n": i}, b"x" * payload, "cd" * 16,
                        1700000000.0 + i, None, f"{i - 1:032x}" if i > 1 else None)
              for i in range(1, events + 1)]
    appends: list[StorageOp] = [AppendEvents(TOPIC, tuple(bodies[k:k + per_append]))
                                for k in range(0, events, per_append)]
    step = max(1, per_transaction // per_append)
    return [appends[k:k + step] for k in range(0, len(appends), step)]


def one_run(batches: list[list[StorageOp]], events: int) -> tuple[float, float]:
    """(write, load) thread CPU microseconds per event, on a fresh file."""
    with tempfile.TemporaryDirectory() as folder:
        store = LogStore(Path(folder) / "topics.sqlite3", NODE, SyncPolicy("never"))
        started = time.thread_time()
        for ops in batches:
            store.apply(ops)
        written = time.thread_time()
        loaded = store.load()
        done = time.thread_time()
        store.close()
    assert len(loaded.logs[0].events) == events
    return (written - started) / events * 1e6, (done - written) / events * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=30000)
    p.add_argument("--payload", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    print(f"{args.events} events of {args.payload} B per run, {args.repeat} runs per shape")
    print(f"{'events per append':>17s} {'per transaction':>15s} "
          f"{'write us/event median':>21s} {'min':>6s} {'load us/event median':>20s}")
    for per_append, per_transaction in SHAPES:
        batches = transactions(args.events, args.payload, per_append, per_transaction)
        runs = [one_run(batches, args.events) for _ in range(args.repeat)]
        writes = [w for w, _ in runs]
        print(f"{per_append:17d} {per_transaction:15d} {statistics.median(writes):21.2f} "
              f"{min(writes):6.2f} {statistics.median(load for _, load in runs):20.2f}")


if __name__ == "__main__":
    main()
