"""A lab of K "hosts" in network namespaces, one daemon per host (``overlay lab``).

``up`` makes the namespaces and the bridge (:mod:`deploy.netns`), sets the packet loss
(nftables), and starts one daemon in each host namespace, bound to the host's own
address on port 7400, with the transport's per-peer delay (``peer_delay_ms``: this
kernel has no netem). The first host seeds the others. ``lab.json`` in the lab
directory lists the hosts, their daemons (as ``cluster.json`` does) and the current
partition, so later commands find everything; ``down`` stops the daemons and removes
every namespace (their links and nftables rules go with them).

The API sockets are files in the lab directory: reachable from the root namespace
(a path names a Unix socket, whatever the network namespace), so ``overlay sub ...
--api DIR/h3/api.sock`` works from the shell that ran ``up``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deploy import cluster
from deploy.cluster import ClusterError, NodeEntry
from deploy.netns import LabHost, NetnsTopology, lab_support, netns_exec

INVENTORY = "lab.json"
#: Every host has an address of its own: the daemons all listen on the same port.
PORT = 7400


@dataclass
class LabInventory:
    directory: str
    name: str
    mode: str
    loss: float
    delay_ms: float
    hosts: list[LabHost]
    #: The daemons, by host index (shorter than ``hosts`` while ``up`` runs).
    nodes: list[NodeEntry] = field(default_factory=list)
    #: The two groups of host indices cut off from each other, if any.
    partition: list[list[int]] | None = None

    @property
    def topology(self) -> NetnsTopology:
        return NetnsTopology(self.name)

    def as_cluster(self) -> cluster.Inventory:
        """The daemons as a local cluster's inventory (for status and down)."""
        return cluster.Inventory(self.directory, self.mode, self.nodes)

    def save(self) -> None:
        cluster.save_json(Path(self.directory) / INVENTORY, asdict(self))

    @staticmethod
    def load(directory: Path) -> LabInventory:
        path = directory / INVENTORY
        try:
            data = json.loads(path.read_text())
            return LabInventory(
                data["directory"], data["name"], data["mode"], data["loss"], data["delay_ms"],
                [LabHost(**host) for host in data["hosts"]],
                [NodeEntry(**node) for node in data["nodes"]], data.get("partition"))
        except FileNotFoundError:
            raise ClusterError(f"no lab in {directory} (no {INVENTORY})") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ClusterError(f"{path} is not a lab inventory: {exc}") from None


def up(directory: Path, hosts: int, loss: float = 0.0, delay_ms: float = 0.0,
       name: str = "olab", mode: str = "structured", extra_config: str = "",
       timeout: float = 120.0, progress: Callable[[str], None] | None = None) -> LabInventory:
    """Make the lab and start its daemons, and wait until they have joined (in structured
    mode: until they form one ring); on any failure, remove what was made."""
    if hosts < 1 or hosts > 250:
        raise ClusterError("a lab has 1 to 250 hosts")
    if not 0 <= delay_ms <= 60_000:
        raise ClusterError("delay must be within 0..60000 ms")
    reason = lab_support()
    if reason is not None:
        raise ClusterError(f"no lab here: {reason}")
    directory = directory.resolve()
    if (directory / INVENTORY).exists():
        existing = LabInventory.load(directory)
        if any(cluster.pid_alive(n.pid) for n in existing.nodes) \
                or existing.topology.existing_namespaces():
            raise ClusterError(f"a lab is already running in {directory}; "
                               f"run 'overlay lab down --dir {directory}' first")
    directory.mkdir(parents=True, exist_ok=True)
    topology = NetnsTopology(name)
    lab = LabInventory(str(directory), name, mode, loss, delay_ms, topology.create(hosts))
    try:
        lab.save()
        topology.set_loss(lab.hosts, loss)
        settings: dict[str, str | float] = {"peer_delay_ms": delay_ms} if delay_ms else {}
        seeds: list[str] = []
        for host in lab.hosts:
            lab.nodes.append(cluster.start_daemon(
                f"h{host.index}", directory, seeds, mode, extra_config,
                bind=f"{host.address}:{PORT}", prefix=netns_exec(host.netns),
                settings=settings))
            seeds = seeds or [lab.nodes[0].address]
            lab.save()
            if progress:
                progress(f"started {len(lab.nodes)}/{hosts} daemons")
        if mode == "structured":  # every successor pointer right: one ring
            cluster.wait_until(lambda: ring_problem(lab) is None, timeout,
                               "the daemons to form one ring", interval=0.2)
        else:
            cluster.wait_until(lambda: cluster.all_ready(lab.as_cluster()), timeout,
                               "every daemon to join", interval=0.2)
    except BaseException:
        down(lab, grace=2.0)
        raise
    return lab


def parse_group(text: str, lab: LabInventory) -> list[int]:
    """Host indices written ``0,1,2``."""
    try:
        indices = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ClusterError(f"{text!r}: a group is host indices like 0,1,2") from None
    for index in indices:
        if not 0 <= index < len(lab.hosts):
            raise ClusterError(f"no host {index} (hosts are 0..{len(lab.hosts) - 1})")
    if not indices:
        raise ClusterError("a group needs at least one host")
    return sorted(set(indices))


def partition(lab: LabInventory, group_a: list[int], group_b: list[int]) -> None:
    """Cut ``group_a`` off from ``group_b`` (both ways), replacing any earlier cut."""
    if set(group_a) & set(group_b):
        raise ClusterError(f"hosts {sorted(set(group_a) & set(group_b))} are in both groups")
    lab.topology.partition([lab.hosts[i] for i in group_a], [lab.hosts[i] for i in group_b])
    lab.partition = [group_a, group_b]
    lab.save()


def heal(lab: LabInventory) -> None:
    lab.topology.heal(lab.hosts)
    lab.partition = None
    lab.save()


def statuses(lab: LabInventory) -> list[dict[str, Any] | None]:
    """Each daemon's API status (None for one that is not running or not answering)."""
    return [cluster.node_status(node) if cluster.pid_alive(node.pid) else None
            for node in lab.nodes]


def ring_problem(lab: LabInventory, answers: list[dict[str, Any] | None] | None = None
                 ) -> str | None:
    """None when every daemon's successor is the next one on the ring of all of them,
    else what is wrong (a daemon down, or whose successor is not the one it should be)."""
    answers = statuses(lab) if answers is None else answers
    if len(answers) != len(lab.hosts):
        return f"{len(answers)} of {len(lab.hosts)} daemons started"
    return cluster.ring_problem(lab.nodes, answers)


def down(lab: LabInventory, grace: float = 15.0) -> dict[str, str]:
    """Stop every daemon (SIGTERM, SIGKILL after ``grace``), then remove the namespaces,
    the bridge, the links and the nftables rules (all of them live in the namespaces)."""
    outcome = cluster.down(lab.as_cluster(), grace)
    for netns in lab.topology.destroy():
        outcome[netns] = "removed"
    lab.partition = None
    if (Path(lab.directory) / INVENTORY).exists():
        lab.save()
    return outcome
