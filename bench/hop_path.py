"""Cost of one event at one tree node below the root: decoding, handling, encoding.

``bench/peer_path.py`` runs real nodes, whose periodic work (ticks, stabilize, trace
flushes) grows with the run's wall time: under callgrind its counts moved by half for
the same code on a busy machine. This runs one Scribe node (node 101, subscribed to the
topic with an empty filter, child of node 200: the test helpers' ``member``) with no
clock and no transport: runs of 64 copies come as wire maps (as the transport decodes
them: ``decode_message``), the node handles them (``on_direct``), and every message it
sends is encoded (``encode_message``). Trace records are made but not written. The
count per event does not move with the machine's load.

Roles: ``leaf`` (no children), ``fwd1`` and ``fwd2`` (one or two children below, which
get each run passed on as runs).

Run: .venv/bin/python bench/hop_path.py [--role fwd1] [--runs 200]
Instructions per event (as in ``daemon_path.py``, the measured phase only):

    valgrind --tool=callgrind --callgrind-out-file=/tmp/hop.out .venv/bin/python \\
        bench/hop_path.py --role fwd1 --runs 40 --callgrind-phase
    grep summary: /tmp/hop.out.1    # divide by the events printed
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# This file's folder must not hide packages (bench/scribe.py, bench/matching.py); the
# repository it is in comes first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from overlay.commands.daemon import tune_gc  # noqa: E402
from overlay.core.messages import decode_message, encode_message  # noqa: E402
from scribe.messages import Events  # noqa: E402
from scribe.wire_records import EventBody  # noqa: E402
from tests.scribe.helpers import MID, TOPIC, join, ref  # noqa: E402
from tests.scribe.test_ordering import member  # noqa: E402

RUN = 64
PAYLOAD = bytes(100)
CHILDREN = {"leaf": (), "fwd1": (50,), "fwd2": (50, 60)}


def runs_from_parent(count: int, after: int) -> list[dict[str, Any]]:
    """``count`` runs of RUN chained copies from node 200, seq ``after`` + 1 on, as wire
    maps (made before the clock starts)."""
    wires = []
    for r in range(count):
        first = after + r * RUN
        bodies = tuple(EventBody(TOPIC, format(first + i + 1, "032x"), first + i + 1, {},
                                 PAYLOAD, "ab" * 16, 1.5) for i in range(RUN))
        wires.append(encode_message(Events(TOPIC, bodies, 2, ref(200), first)))
    return wires


def callgrind(command: str, *args: str) -> None:
    subprocess.run(["callgrind_control", f"-{command}", *args, str(os.getpid())],
                   stdout=subprocess.DEVNULL, check=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", choices=sorted(CHILDREN), default="fwd1")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--callgrind-phase", action="store_true",
                   help="under callgrind: count the measured phase only (module docs)")
    args = p.parse_args(argv)
    app, host = member(through=3)
    for child in CHILDREN[args.role]:
        app.forward(0.5, MID, join(child, ""), ref(200))
    host.clear()
    wires = runs_from_parent(args.runs, after=3)
    tune_gc()
    if args.callgrind_phase:
        callgrind("z")
    now, delivered, cpu = 1.0, 0, time.process_time()
    for wire in wires:
        app.on_direct(now, "n200", decode_message(wire))
        for _, msg in host.sent:
            encode_message(msg)
        delivered += len(host.delivered)
        host.sent.clear()
        host.traces.clear()
        host.delivered.clear()
        now += 0.001
    cpu = time.process_time() - cpu
    if args.callgrind_phase:
        callgrind("d", "measured")
    events = args.runs * RUN
    if delivered != events:
        raise SystemExit(f"delivered {delivered} of {events} events: the setup is wrong")
    print(f"{args.role}: {events} events, CPU {cpu / events * 1e6:.1f} us/event")
    return 0


if __name__ == "__main__":
    sys.exit(main())
