"""Recovery time of a large topic log: one daemon, a log of ``--gib`` GiB of events, killed
with SIGKILL and started again with its state directory and address. Prints the time
from the restart to the daemon's ``ready`` (its API answering), the ``recover`` trace
record's load time (reading and checking every row), the log file's size and the
restarted daemon's resident memory (the log is held in memory once loaded).

    .venv/bin/python bench/durable_recovery.py [--gib 1] [--payload 65536]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from pathlib import Path

import trio

from deploy import cluster
from overlay.client import connect

EXTRA = """
[storage]
sync = "interval:1000"
[protocol]
retain_count = 100000000
retain_bytes = 17179869184
retain_seconds = 100000000.0
"""


async def fill(api: str, events: int, payload: int) -> float:
    """Publish ``events`` reliable events of ``payload`` bytes; seconds taken."""
    body = os.urandom(payload)
    started = time.perf_counter()
    async with connect(api) as client:
        window = trio.Semaphore(64)  # publishes in flight

        async def one(i: int) -> None:
            try:
                await client.publish("big", body, attrs={"i": i})
            finally:
                window.release()

        async with trio.open_nursery() as nursery:
            for i in range(events):
                await window.acquire()
                nursery.start_soon(one, i)
    return time.perf_counter() - started


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--payload", type=int, default=65536)
    args = parser.parse_args()
    events = int(args.gib * (1 << 30)) // args.payload
    with tempfile.TemporaryDirectory(prefix="overlay-recovery-") as work:
        directory = Path(work)
        node = cluster.start_daemon("n00", directory, [], "structured", EXTRA)
        inventory = cluster.Inventory(str(directory), "structured", [node])
        try:
            seconds = trio.run(fill, node.api, events, args.payload)
            print(f"filled: {events} events x {args.payload} B in {seconds:.1f} s "
                  f"({events * args.payload / seconds / 1e6:.0f} MB/s)")
            cluster.kill(inventory, ["n00"])
            log_file = directory / "n00" / "topics.sqlite3"
            size = sum(p.stat().st_size for p in log_file.parent.glob("topics.sqlite3*"))
            print(f"log on disk: {size / (1 << 30):.2f} GiB")
            started = time.perf_counter()
            (restarted,) = cluster.restart(inventory, ["n00"], EXTRA, timeout=600.0)
            cluster.wait_until(lambda: cluster.all_ready(inventory), 600.0, "ready")
            ready = time.perf_counter() - started
            def recover_records() -> list[dict[str, object]]:
                records = []
                for path in Path(restarted.trace_dir).glob("*.jsonl*"):
                    records += [json.loads(line) for line in path.read_text().splitlines()
                                if '"recover"' in line]
                return [r for r in records if r.get("ev") == "recover"]

            # Trace records reach their file once a second.
            cluster.wait_until(lambda: bool(recover_records()), 10.0, "the recover record")
            recover = recover_records()[-1:]
            print(f"restart to ready: {ready:.1f} s; recover record: "
                  f"{recover[0] if recover else 'none'}")
            print(f"resident memory after recovery: {rss_mib(restarted.pid):.0f} MiB")
        finally:
            for entry in inventory.nodes:
                if cluster.pid_alive(entry.pid):
                    os.kill(entry.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
