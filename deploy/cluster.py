"""Local clusters: N daemons on loopback, free ports, one inventory file.

``up`` starts the first daemon alone (it creates the ring), then the others with it as
seed. Each daemon binds port 0 and writes ``<state_dir>/daemon.json`` with the address
it got, so no port is ever guessed or fixed. ``cluster.json`` in the cluster directory
lists every node (name, id, address, API socket, pid, trace dir, log).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from overlay.client import BlockingClient, ClientError

INVENTORY = "cluster.json"


class ClusterError(Exception):
    """A cluster operation failed (a daemon did not start, no inventory, ...)."""


def save_json(path: Path, data: Any) -> None:
    """Write ``data`` to ``path`` whole or not at all (a reader never sees half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


@dataclass
class NodeEntry:
    name: str
    node: str
    address: str
    api: str
    pid: int
    state_dir: str
    trace_dir: str
    log: str


@dataclass
class Inventory:
    directory: str
    mode: str
    nodes: list[NodeEntry]

    def save(self) -> None:
        save_json(Path(self.directory) / INVENTORY, asdict(self))

    @staticmethod
    def load(directory: Path) -> Inventory:
        path = directory / INVENTORY
        try:
            data = json.loads(path.read_text())
            return Inventory(data["directory"], data["mode"],
                             [NodeEntry(**node) for node in data["nodes"]])
        except FileNotFoundError:
            raise ClusterError(f"no cluster in {directory} (no {INVENTORY})") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ClusterError(f"{path} is not a cluster inventory: {exc}") from None

    def find(self, name: str) -> NodeEntry:
        for node in self.nodes:
            if name in (node.name, node.node, node.address):
                return node
        raise ClusterError(f"no node {name!r} in the cluster")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0): look at its state.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def wait_until(condition: Callable[[], bool], timeout: float, what: str,
               interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _node_config(state_dir: Path, seeds: list[str], mode: str, extra: str, bind: str,
                 settings: dict[str, str | float]) -> str:
    lines = [
        f"bind = {json.dumps(bind)}",
        f"state_dir = {json.dumps(str(state_dir))}",
        f"trace_dir = {json.dumps(str(state_dir / 'traces'))}",
        f"mode = {json.dumps(mode)}",
        f"seeds = {json.dumps(seeds)}",
        # Top-level settings before ``extra``, which may open tables ([protocol]).
        *(f"{key} = {json.dumps(value)}" for key, value in settings.items()),
    ]
    return "\n".join(lines) + "\n" + extra


def start_daemon(name: str, directory: Path, seeds: list[str], mode: str, extra_config: str,
                 timeout: float = 30.0, *, bind: str = "127.0.0.1:0",
                 prefix: Sequence[str] = (),
                 settings: dict[str, str | float] | None = None) -> NodeEntry:
    """Start one daemon process and wait until it reports its address.

    ``prefix`` runs it through another program that execs it (``ip netns exec NS``),
    so the pid is still the daemon's; ``settings`` are more top-level config keys."""
    state_dir = directory / name
    state_dir.mkdir(parents=True, exist_ok=True)
    info_path = state_dir / "daemon.json"
    info_path.unlink(missing_ok=True)
    config_path = state_dir / "overlay.toml"
    config_path.write_text(_node_config(state_dir, seeds, mode, extra_config, bind,
                                        settings or {}))
    log_path = state_dir / "daemon.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "overlay.cli", "daemon", "--config",
             str(config_path)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal is for us, not the daemons
        )

    def reported() -> bool:
        if proc.poll() is not None:
            raise ClusterError(f"daemon {name} exited with {proc.returncode}; see {log_path}")
        return info_path.exists()

    wait_until(reported, timeout, f"daemon {name} to start")
    info = json.loads(info_path.read_text())
    return NodeEntry(name=name, node=info["node"], address=info["address"], api=info["api"],
                     pid=proc.pid, state_dir=str(state_dir), trace_dir=info["trace_dir"],
                     log=str(log_path))


def node_status(node: NodeEntry, timeout: float = 5.0) -> dict[str, Any] | None:
    """The daemon's API status, or None when it does not answer."""
    try:
        with BlockingClient.connect(node.api, timeout=timeout, client_name="overlay-cluster") as c:
            return c.status()
    except (ClientError, OSError):
        return None


def up(directory: Path, nodes: int, mode: str = "structured", extra_config: str = "",
       timeout: float = 60.0, progress: Callable[[str], None] | None = None) -> Inventory:
    if nodes < 1:
        raise ClusterError("a cluster needs at least one node")
    directory = directory.resolve()
    if (directory / INVENTORY).exists():
        existing = Inventory.load(directory)
        if any(pid_alive(n.pid) for n in existing.nodes):
            raise ClusterError(f"a cluster is already running in {directory}")
    directory.mkdir(parents=True, exist_ok=True)
    inventory = Inventory(str(directory), mode, [])
    try:
        first = start_daemon("n00", directory, [], mode, extra_config)
        inventory.nodes.append(first)
        inventory.save()
        for i in range(1, nodes):
            inventory.nodes.append(start_daemon(f"n{i:02d}", directory, [first.address], mode,
                                                extra_config))
            inventory.save()
            if progress:
                progress(f"started {i + 1}/{nodes} daemons")
        wait_until(lambda: all_ready(inventory), timeout, "every daemon to join", interval=0.2)
    except BaseException:
        down(inventory, grace=2.0)
        raise
    return inventory


def all_ready(inventory: Inventory) -> bool:
    for node in inventory.nodes:
        status = node_status(node)
        if status is None or not status.get("ready"):
            return False
    return True


def ring_problem(nodes: list[NodeEntry], answers: list[dict[str, Any] | None]) -> str | None:
    """None when every node's successor (in ``answers``, their API statuses in the same
    order) is the next one on the ring of all of them, else what is wrong."""
    order = sorted(nodes, key=lambda node: int(node.node, 16))
    expected = {node.node: order[(i + 1) % len(order)].node for i, node in enumerate(order)}
    for node, status in zip(nodes, answers, strict=True):
        if status is None or not status.get("ready"):
            return f"{node.name} is not ready"
        successor = (status.get("successor") or {}).get("node")
        if successor != expected[node.node]:
            return f"{node.name}'s successor is {successor}, not {expected[node.node]}"
    return None


def down(inventory: Inventory, grace: float = 10.0) -> dict[str, str]:
    """SIGTERM every daemon, then SIGKILL whatever is still running after ``grace``."""
    outcome: dict[str, str] = {}
    for node in inventory.nodes:
        if pid_alive(node.pid):
            os.kill(node.pid, signal.SIGTERM)
            outcome[node.name] = "stopped"
        else:
            outcome[node.name] = "not running"
    deadline = time.monotonic() + grace
    for node in inventory.nodes:
        while pid_alive(node.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(node.pid):
            os.kill(node.pid, signal.SIGKILL)
            outcome[node.name] = "killed"
        _reap(node.pid)
    return outcome


def kill(inventory: Inventory, names: list[str] | None = None, random_count: int = 0,
         rng: random.Random | None = None) -> list[NodeEntry]:
    """SIGKILL the named nodes, or ``random_count`` random live ones (fault tests)."""
    if names:
        victims = [inventory.find(name) for name in names]
    else:
        alive = [n for n in inventory.nodes if pid_alive(n.pid)]
        if random_count > len(alive):
            raise ClusterError(f"only {len(alive)} nodes are alive")
        victims = (rng or random.Random()).sample(alive, random_count)
    for node in victims:
        if pid_alive(node.pid):
            os.kill(node.pid, signal.SIGKILL)
    # SIGKILL is delivered asynchronously: return only once every victim is gone.
    wait_until(lambda: not any(pid_alive(v.pid) for v in victims), 10.0, "killed daemons to exit")
    for node in victims:
        _reap(node.pid)
    return victims


def restart(inventory: Inventory, names: list[str], extra_config: str = "",
            timeout: float = 30.0) -> list[NodeEntry]:
    """Start the named (stopped or killed) nodes again, each with its state directory
    and its address (so its id, and its topic logs, are its own again), seeded with the
    addresses of the nodes running; the inventory is updated with their new pids.

    With no node running (a whole-overlay restart) each is seeded with all the others, as
    one static configuration would have them: no node is a member to join through, and
    after a few failed attempts the lowest id of each seed set creates the ring and the
    others join it (Chord's ``bootstrap_rounds``)."""
    directory = Path(inventory.directory)
    restarted = []
    running = [n.address for n in inventory.nodes if pid_alive(n.pid)]
    for name in names:
        old = inventory.find(name)
        if pid_alive(old.pid):
            raise ClusterError(f"{name} is still running")
        seeds = [a for a in running if a != old.address] or \
            [n.address for n in inventory.nodes if n.name != name]
        entry = start_daemon(name, directory, seeds, inventory.mode, extra_config, timeout,
                             bind=old.address)
        inventory.nodes[inventory.nodes.index(old)] = entry
        restarted.append(entry)
    inventory.save()
    return restarted


def _reap(pid: int) -> None:
    # Daemons started by this process are its children: collect their exit status.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
