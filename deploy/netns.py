"""Hosts in network namespaces: a lab of K "hosts" on one bridge, with loss and partitions.

Topology: namespace ``<lab>-br`` holds bridge ``br0``; each host ``<lab>-h<i>`` has a
veth whose peer is enslaved to the bridge, and an address in ``198.18.<n>.0/24`` (the
range RFC 2544 sets aside for benchmarking: used only inside these namespaces).
Packet loss and partitions are nftables rules in each host's output path (this kernel
has no netem); latency is injected by our own transport (``peer_delay_ms``).

Needs root and ``ip``/``nft``; :func:`lab_support` says why not where they are missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass

from deploy.cluster import ClusterError

TABLE = "overlay_lab"


@dataclass(frozen=True)
class LabHost:
    index: int
    netns: str
    address: str


def lab_support() -> str | None:
    """None when labs can run here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"the {tool!r} command is missing (Debian packages iproute2, nftables)"
    probe = "overlay-probe"
    try:
        _run(["ip", "netns", "add", probe])
    except ClusterError as exc:
        return f"cannot create network namespaces: {exc}"
    _run(["ip", "netns", "del", probe], check=False)
    return None


def _run(cmd: list[str], check: bool = True, stdin: str | None = None) -> str:
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(cmd)} failed: {proc.stderr.strip() or proc.stdout}")
    return proc.stdout


def netns_exec(netns: str) -> list[str]:
    """Command prefix that runs a program inside ``netns``."""
    return ["ip", "netns", "exec", netns]


class NetnsTopology:
    """Creates and removes the namespaces, bridge, links and nftables rules of one lab."""

    def __init__(self, name: str, subnet_index: int = 77) -> None:
        if not name.isidentifier() or len(name) > 8:
            raise ClusterError("a lab name is a short identifier (at most 8 characters)")
        self.name = name
        self.subnet = f"198.18.{subnet_index}"
        self.bridge_ns = f"{name}-br"

    def host(self, index: int) -> LabHost:
        return LabHost(index, f"{self.name}-h{index}", f"{self.subnet}.{index + 1}")

    def existing_namespaces(self) -> list[str]:
        names = [line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines() if line]
        return [n for n in names if n == self.bridge_ns or n.startswith(f"{self.name}-h")]

    def create(self, count: int) -> list[LabHost]:
        if self.existing_namespaces():
            raise ClusterError(f"lab {self.name} already exists; run 'overlay lab down' first")
        try:
            _run(["ip", "netns", "add", self.bridge_ns])
            br = ["ip", "-n", self.bridge_ns]
            _run([*br, "link", "add", "br0", "type", "bridge"])
            _run([*br, "link", "set", "br0", "up"])
            hosts = [self.host(i) for i in range(count)]
            for host in hosts:
                self._add_host(host)
            return hosts
        except BaseException:
            self.destroy()
            raise

    def _add_host(self, host: LabHost) -> None:
        inner, outer = f"eth{host.index}", f"vb{host.index}"
        _run(["ip", "netns", "add", host.netns])
        _run(["ip", "link", "add", inner, "netns", host.netns, "type", "veth",
              "peer", "name", outer, "netns", self.bridge_ns])
        _run(["ip", "-n", self.bridge_ns, "link", "set", outer, "master", "br0", "up"])
        ns = ["ip", "-n", host.netns]
        _run([*ns, "addr", "add", f"{host.address}/24", "dev", inner])
        _run([*ns, "link", "set", inner, "up"])
        _run([*ns, "link", "set", "lo", "up"])
        _run([*netns_exec(host.netns), "nft", "-f", "-"], stdin=(
            f"table inet {TABLE} {{\n"
            "  chain loss { }\n"
            "  chain partition { }\n"
            "  chain out {\n"
            "    type filter hook output priority 0; policy accept;\n"
            "    jump partition\n"
            "    jump loss\n"
            "  }\n"
            "}\n"))

    def set_loss(self, hosts: list[LabHost], loss: float) -> None:
        """Drop a share ``loss`` of the packets each host sends to the lab subnet."""
        if not 0 <= loss < 1:
            raise ClusterError("loss must be within [0, 1)")
        per_mille = round(loss * 1000)
        for host in hosts:
            rules = f"flush chain inet {TABLE} loss\n"
            if per_mille:
                # Not what a host sends itself (over lo): only what crosses a link.
                rules += (f"add rule inet {TABLE} loss oifname != \"lo\" "
                          f"ip daddr {self.subnet}.0/24 numgen random mod 1000 < {per_mille} "
                          "drop\n")
            _run([*netns_exec(host.netns), "nft", "-f", "-"], stdin=rules)

    def partition(self, group_a: list[LabHost], group_b: list[LabHost]) -> None:
        """Hosts of one group can no longer reach hosts of the other (both ways)."""
        for mine, theirs in ((group_a, group_b), (group_b, group_a)):
            addresses = ", ".join(h.address for h in theirs)
            for host in mine:
                _run([*netns_exec(host.netns), "nft", "-f", "-"], stdin=(
                    f"flush chain inet {TABLE} partition\n"
                    f"add rule inet {TABLE} partition ip daddr {{ {addresses} }} drop\n"))

    def heal(self, hosts: list[LabHost]) -> None:
        for host in hosts:
            _run([*netns_exec(host.netns), "nft", "flush", "chain", "inet", TABLE, "partition"])

    def destroy(self) -> list[str]:
        """Remove every namespace of this lab (their links and rules go with them)."""
        removed = []
        for netns in self.existing_namespaces():
            # A namespace lives on while a process is in it: nothing may be left there.
            for pid in _run(["ip", "netns", "pids", netns], check=False).split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            _run(["ip", "netns", "del", netns])
            removed.append(netns)
        return removed
