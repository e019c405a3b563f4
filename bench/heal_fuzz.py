"""Delivery across a healed partition, with and without a crash, over many seeds.

Each seed builds the namespace lab's shape in the simulator (``lab_shape`` in
tests/scribe/test_partition_sim.py: a few nodes, 5% loss, subscriptions, a first event,
a split into halves, six reliable events on each side, the heal) and, by mode:

- ``heal``: nothing more (tests/scribe/test_partition_sim.py's lab-like seeds);
- ``window``: at the first moment after the heal when two nodes number the topic and one
  holds the other's copies, the other crashes for good (seeds where that moment never
  comes are counted apart);
- ``restart``: a node drawn from the seed crashes between 2 s before and 8 s after the
  heal and starts again from its disk 2 to 10 s later;
- ``restarts``: no partition; one to three nodes crash while two publishers stream
  reliable events and start again from their disks (tests/scribe/test_restarts_sim.py).

Then every acknowledged event must have reached every live subscription once, in seq
order (the first event, published before the subscriptions may be in effect, aside).
Printed: each seed that broke that, with what each subscriber lacks, and the counts.
The seeded cases in tests/scribe/test_crash_after_heal_sim.py and test_restarts_sim.py
came from this.

Run: .venv/bin/python bench/heal_fuzz.py restart [--seeds 0-299]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.scribe.test_crash_after_heal_sim import (
    crash_after_heal,
    delivery_problems,
    restart_around_heal,
)
from tests.scribe.test_partition_sim import lab_like
from tests.scribe.test_restarts_sim import delivery_problems as restarts_problems
from tests.scribe.test_restarts_sim import restarts_under_load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["heal", "window", "restart", "restarts"])
    parser.add_argument("--seeds", default="0-99", help="a range, as 0-99")
    args = parser.parse_args()
    first, _, last = args.seeds.partition("-")
    seeds = range(int(first), int(last or first) + 1)
    started = time.process_time()
    bad = skipped = 0
    for seed in seeds:
        crashed: str | None = None
        if args.mode == "restarts":
            problems = restarts_problems(restarts_under_load(seed))
            if problems:
                bad += 1
                print(f"seed {seed}: {'; '.join(problems)}", flush=True)
            continue
        if args.mode == "heal":
            world, subscribers = lab_like(seed)
        elif args.mode == "window":
            try:
                world, subscribers, crashed = crash_after_heal(seed)
            except AssertionError:  # the window never came: nothing was crashed
                skipped += 1
                continue
        else:
            world, subscribers, crashed = restart_around_heal(seed)
        problems = delivery_problems(world, subscribers, crashed)
        if problems:
            bad += 1
            print(f"seed {seed}: {'; '.join(problems)}", flush=True)
    window = f" ({skipped} more without the window)" if args.mode == "window" else ""
    print(f"{args.mode}: {len(seeds) - skipped} seeds run{window}, {bad} broke delivery; "
          f"{time.process_time() - started:.0f} CPU s")


if __name__ == "__main__":
    main()
