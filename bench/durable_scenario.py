"""Issue 26's simulator scenario across seeds: what a staggered whole-overlay restart
does to delivery (tests/scribe/test_durable_scenario.py builds the run).

300 nodes, 10 topics, 1,000 reliable publishes; the root and both replicas of three
topics crash losing unsynced writes and restart; then every node crashes and rejoins
one by one (every 50 ms); applications re-subscribe with ``replay since_seq`` after
their node restarts. For each seed: acknowledged events, subscriber-events lost (an
acknowledged event an application never got), and repeats (an event an application got
again: a stale owner's numbering merged at the holders' return would move events to
new numbers; stand-ins, scribe.standin, keep that from happening). Each run is
deterministic for its seed within one process (string hashing
differs between processes: set PYTHONHASHSEED to repeat a figure exactly).

Run: .venv/bin/python bench/durable_scenario.py [--seeds 1-8] [--sync always|never]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from overlay.core.storage import SyncPolicy
from tests.scribe.test_durable_scenario import lost, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-8", help="a range, as 1-8")
    parser.add_argument("--sync", default="always")
    args = parser.parse_args()
    first, _, last = args.seeds.partition("-")
    policy = SyncPolicy.parse(args.sync)
    print(f"{'seed':>4} {'acked':>6} {'lost':>5} {'repeats':>8} {'cpu s':>6}")
    for seed in range(int(first), int(last or first) + 1):
        started = time.process_time()
        world = run(seed, policy)
        repeats = sum(n - 1 for s in world.subscribers for n in s.received.values() if n > 1)
        print(f"{seed:>4} {len(world.acked):>6} {sum(lost(world).values()):>5} "
              f"{repeats:>8} {time.process_time() - started:>6.1f}", flush=True)


if __name__ == "__main__":
    main()
