"""What the real-process tests share: protocol timers short enough for tests to see
repair within seconds, and a cluster fixture factory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from deploy import cluster

#: Ring maintenance and tree heartbeats every 0.3 s; a parent silent for 1.2 s is gone.
FAST = """
[protocol]
stabilize_interval = 0.3
fix_fingers_interval = 0.3
check_predecessor_interval = 0.3
heartbeat_interval = 0.3
parent_timeout = 1.2
"""


def running_cluster(directory: Path, count: int, timeout: float) -> Iterator[cluster.Inventory]:
    """Daemons up for the test, torn down (gracefully, SIGKILL past the grace) after."""
    inventory = cluster.up(directory, count, extra_config=FAST, timeout=timeout)
    try:
        yield inventory
    finally:
        outcome = cluster.down(inventory, grace=15.0)
        assert set(outcome.values()) <= {"stopped", "not running"}, outcome
