"""Remote hosts over SSH: ``overlay deploy --inventory hosts.toml up|status|down``.

``up`` builds a wheel of this project once, then on every host: copies it, creates a
venv, installs the daemon (its runtime requirements only: Spark stays on the machine
that analyzes), writes the node's config, and starts it under systemd when the host
runs systemd, else under a small supervisor shell loop in the background that restarts
the daemon if it dies. ``down`` stops it either way and leaves nothing running.

Inventory (TOML)::

    [defaults]
    user = "root"
    identity = "~/.ssh/id_ed25519"
    base_dir = "/opt/overlay"
    python = "python3"
    mode = "structured"

    [[hosts]]
    name = "a"
    host = "203.0.113.5"
    ssh_port = 22
    bind = "0.0.0.0:7400"
    advertise = "203.0.113.5:7400"

The first host is the seed of the others.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.cluster import ClusterError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
UNIT_TEMPLATE = Path(__file__).resolve().parent / "systemd" / "overlay@.service"
#: What the daemon needs at run time (the analysis' Spark, pandas, plots stay home).
DAEMON_REQUIREMENTS = ["trio>=0.25", "cbor2>=5.6", "mmh3>=4.1", "structlog>=24.1",
                       "cryptography>=42"]

_HOST_KEYS = {"name", "host", "user", "ssh_port", "identity", "base_dir", "python", "bind",
              "advertise", "mode", "systemd", "ssh_options"}


@dataclass(frozen=True)
class RemoteHost:
    name: str
    host: str
    bind: str
    advertise: str
    user: str = "root"
    ssh_port: int = 22
    identity: str | None = None
    base_dir: str = "/opt/overlay"
    python: str = "python3"
    mode: str = "structured"
    #: "auto" (use systemd when the host runs it), "yes" or "no".
    systemd: str = "auto"
    ssh_options: tuple[str, ...] = ()
    known_hosts: str = field(default="", compare=False)

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}"

    def ssh_base(self) -> list[str]:
        opts = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                "-o", "StrictHostKeyChecking=accept-new"]
        if self.known_hosts:
            opts += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        if self.identity:
            opts += ["-i", str(Path(self.identity).expanduser()), "-o", "IdentitiesOnly=yes"]
        for option in self.ssh_options:
            opts += ["-o", option]
        return opts


def load_inventory(path: Path) -> list[RemoteHost]:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(f"inventory {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ClusterError(f"inventory {path} is not valid TOML: {exc}") from None
    defaults = data.get("defaults", {})
    hosts = data.get("hosts")
    if not isinstance(defaults, dict) or not isinstance(hosts, list) or not hosts:
        raise ClusterError(f"{path}: needs [[hosts]] entries (and optionally [defaults])")
    known_hosts = str(path.parent / ".overlay_known_hosts")
    result = []
    for i, entry in enumerate(hosts):
        if not isinstance(entry, dict):
            raise ClusterError(f"{path}: hosts[{i}] is not a table")
        merged = {**defaults, **entry}
        unknown = set(merged) - _HOST_KEYS
        if unknown:
            raise ClusterError(f"{path}: hosts[{i}]: unknown keys {sorted(unknown)}")
        for key in ("name", "host", "bind", "advertise"):
            if not isinstance(merged.get(key), str) or not merged[key]:
                raise ClusterError(f"{path}: hosts[{i}] needs text {key!r}")
        if not str(merged["name"]).isidentifier():
            raise ClusterError(f"{path}: hosts[{i}]: name must be an identifier")
        merged["ssh_options"] = tuple(merged.get("ssh_options", ()))
        try:
            result.append(RemoteHost(**merged, known_hosts=known_hosts))
        except TypeError as exc:
            raise ClusterError(f"{path}: hosts[{i}]: {exc}") from None
    names = [h.name for h in result]
    if len(set(names)) != len(names):
        raise ClusterError(f"{path}: host names must be unique")
    return result


def ssh(host: RemoteHost, command: str, check: bool = True, timeout: float = 300) -> str:
    cmd = ["ssh", *host.ssh_base(), "-p", str(host.ssh_port), host.target, command]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise ClusterError(f"{host.name}: `{command}` failed ({proc.returncode}): "
                           f"{proc.stderr.strip()[-2000:]}")
    return proc.stdout


def scp(host: RemoteHost, local: Path, remote: str) -> None:
    cmd = ["scp", "-q", *host.ssh_base(), "-P", str(host.ssh_port), str(local),
           f"{host.target}:{remote}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise ClusterError(f"{host.name}: copying {local.name} failed: {proc.stderr.strip()}")


def build_wheel(out_dir: Path) -> Path:
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                           str(out_dir), str(PROJECT_ROOT)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise ClusterError(f"building the wheel failed: {proc.stderr.strip()[-2000:]}")
    wheels = sorted(out_dir.glob("overlay-*.whl"))
    if not wheels:
        raise ClusterError("building the wheel produced no overlay-*.whl")
    return wheels[-1]


def node_config(host: RemoteHost, seeds: list[str], key_name: str | None) -> str:
    node_dir = f"{host.base_dir}/{host.name}"
    lines = [f"bind = {json.dumps(host.bind)}", f"advertise = {json.dumps(host.advertise)}",
             f"seeds = {json.dumps(seeds)}", f"state_dir = {json.dumps(node_dir)}",
             f"mode = {json.dumps(host.mode)}"]
    if key_name:
        lines.append(f"cluster_key_file = {json.dumps(f'{host.base_dir}/{key_name}')}")
    return "\n".join(lines) + "\n"


def _uses_systemd(host: RemoteHost) -> bool:
    if host.systemd in ("yes", "no"):
        return host.systemd == "yes"
    probe = ssh(host, "test -d /run/systemd/system && command -v systemctl && echo systemd",
                check=False)
    return "systemd" in probe.split()


def _supervisor(host: RemoteHost) -> str:
    """A shell loop that restarts the daemon until asked to stop."""
    node_dir = f"{host.base_dir}/{host.name}"
    daemon = f"{host.base_dir}/venv/bin/overlay daemon --config {node_dir}/overlay.toml"
    return (f"cd {shlex.quote(node_dir)} && rm -f stop && "
            f"nohup setsid sh -c 'echo $$ > supervisor.pid; "
            f"while [ ! -f stop ]; do {daemon} >> daemon.log 2>&1; "
            f"[ -f stop ] || sleep 1; done' > /dev/null 2>&1 < /dev/null &")


def up(hosts: list[RemoteHost], key_file: Path | None = None) -> dict[str, str]:
    outcome = {}
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_wheel(Path(tmp))
        seeds = [hosts[0].advertise]
        for index, host in enumerate(hosts):
            base, node_dir = host.base_dir, f"{host.base_dir}/{host.name}"
            ssh(host, f"mkdir -p {shlex.quote(node_dir)}")
            scp(host, wheel, f"{base}/{wheel.name}")
            key_name = None
            if key_file is not None:
                key_name = "cluster.key"
                scp(host, key_file, f"{base}/{key_name}")
                ssh(host, f"chmod 600 {shlex.quote(f'{base}/{key_name}')}")
            config = Path(tmp) / f"{host.name}.toml"
            config.write_text(node_config(host, [] if index == 0 else seeds, key_name))
            scp(host, config, f"{node_dir}/overlay.toml")
            venv = f"{base}/venv"
            requirements = " ".join(shlex.quote(r) for r in DAEMON_REQUIREMENTS)
            ssh(host, f"test -x {venv}/bin/python || {host.python} -m venv {venv}")
            ssh(host, f"{venv}/bin/pip install -q {requirements} && "
                      f"{venv}/bin/pip install -q --no-deps --force-reinstall {base}/{wheel.name}")
            if _uses_systemd(host):
                unit = UNIT_TEMPLATE.read_text().replace("{base}", base)
                unit_file = Path(tmp) / "overlay@.service"
                unit_file.write_text(unit)
                scp(host, unit_file, "/etc/systemd/system/overlay@.service")
                ssh(host, f"systemctl daemon-reload && systemctl enable --now overlay@{host.name}")
                outcome[host.name] = "started (systemd)"
            else:
                ssh(host, _supervisor(host))
                outcome[host.name] = "started (supervised)"
    return outcome


def status(host: RemoteHost) -> dict[str, Any] | None:
    node_dir = f"{host.base_dir}/{host.name}"
    out = ssh(host, f"{host.base_dir}/venv/bin/overlay status --json --api {node_dir}/api.sock",
              check=False)
    try:
        return json.loads(out)
    except ValueError:
        return None


def down(host: RemoteHost) -> str:
    node_dir = shlex.quote(f"{host.base_dir}/{host.name}")
    if _uses_systemd(host):
        ssh(host, f"systemctl disable --now overlay@{host.name}", check=False)
        return "stopped (systemd)"
    # Tell the loop to stop, then SIGTERM the daemon (a graceful leave) and the loop.
    ssh(host, f"cd {node_dir} && touch stop && "
              f"(test -f daemon.json && kill -TERM $(sed -n 's/.*\"pid\": *\\([0-9]*\\).*/\\1/p' "
              f"daemon.json) 2>/dev/null; "
              f"for i in $(seq 100); do test -f supervisor.pid && "
              f"kill -0 $(cat supervisor.pid) 2>/dev/null || break; sleep 0.1; done; "
              f"test -f supervisor.pid && kill -9 $(cat supervisor.pid) 2>/dev/null; true)",
        check=False)
    return "stopped (supervised)"
