"""Remote hosts over SSH: ``overlay deploy --inventory hosts.toml up|status|down``.

``up`` builds a wheel of this project once, then on every host: copies it, creates a
venv, installs the daemon (its run-time requirements from the package index, then the
wheel: Spark and the analysis' libraries stay on the machine that analyzes), writes the
node's config, and starts it under systemd when the host runs systemd, else under a
small supervisor script in the background that starts the daemon again if it dies.
``down`` stops it either way (SIGTERM: a graceful leave; SIGKILL after a grace period)
and leaves nothing running.

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

The first host is the seed of the others. ``deps_site`` (a site-packages directory on
the host whose packages the venv may use instead of installing the requirements from
the index) is a shortcut for tests on hosts without network, not for production.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.cluster import ClusterError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
UNIT_TEMPLATE = Path(__file__).resolve().parent / "systemd" / "overlay@.service"
#: What the daemon needs at run time: the project's dependencies but for the analysis'
#: (pyspark, pyarrow, pandas, numpy, matplotlib), which a peer host does not need.
DAEMON_REQUIREMENTS = ["trio>=0.25", "cbor2>=5.6", "mmh3>=4.1", "structlog>=24.1", "orjson>=3.9",
                       "cryptography>=42"]

_HOST_KEYS = {"name", "host", "user", "ssh_port", "identity", "base_dir", "python", "bind",
              "advertise", "mode", "systemd", "ssh_options", "deps_site"}

#: Runs the daemon in the node's directory, again after it died, until ``stop`` exists.
SUPERVISOR = """#!/bin/sh
# Written by `overlay deploy up`; `overlay deploy down` creates ./stop and stops the daemon.
cd "$(dirname "$0")" || exit 1
echo $$ > supervisor.pid
while [ ! -f stop ]; do
    {overlay} daemon --config overlay.toml >> daemon.log 2>&1 &
    echo $! > daemon.pid
    wait $!
    [ -f stop ] || sleep 1
done
rm -f supervisor.pid daemon.pid
"""

#: Shell function: is the process whose pid is in file $1 running (a zombie is not)?
_ALIVE = ('alive() { [ -f "$1" ] || return 1; p=$(cat "$1"); '
          '[ -r "/proc/$p/stat" ] || return 1; '
          '[ "$(sed "s/.*) //" "/proc/$p/stat" | cut -c1)" != Z ]; }; ')


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
    #: Test-only shortcut: use this site-packages for the requirements (no index).
    deps_site: str | None = None
    known_hosts: str = field(default="", compare=False)

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}"

    @property
    def node_dir(self) -> str:
        return f"{self.base_dir}/{self.name}"

    @property
    def venv(self) -> str:
        return f"{self.base_dir}/venv"

    def ssh_base(self) -> list[str]:
        opts = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                "-o", "StrictHostKeyChecking=accept-new", "-o", "LogLevel=ERROR"]
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
    known_hosts = str(path.resolve().parent / ".overlay_known_hosts")
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
        if merged.get("systemd", "auto") not in ("auto", "yes", "no"):
            raise ClusterError(f"{path}: hosts[{i}]: systemd is \"auto\", \"yes\" or \"no\"")
        merged["ssh_options"] = tuple(merged.get("ssh_options", ()))
        try:
            result.append(RemoteHost(**merged, known_hosts=known_hosts))
        except TypeError as exc:
            raise ClusterError(f"{path}: hosts[{i}]: {exc}") from None
    names = [h.name for h in result]
    if len(set(names)) != len(names):
        raise ClusterError(f"{path}: host names must be unique")
    return result


def ssh(host: RemoteHost, command: str, check: bool = True, timeout: float = 600) -> str:
    cmd = ["ssh", *host.ssh_base(), "-p", str(host.ssh_port), host.target, command]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"{host.name}: `{command}` took more than {timeout:g} s") from None
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
    """A wheel of the project as it is in the working tree (tracked and new files, not
    what git ignores): built from a copy, so that no stale build/ leaks into it."""
    source = out_dir / "src"
    listed = subprocess.run(["git", "-C", str(PROJECT_ROOT), "ls-files", "-z", "--cached",
                             "--others", "--exclude-standard"], capture_output=True,
                            check=False)
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.decode().split("\0")):
            origin = PROJECT_ROOT / name
            if origin.is_file():
                (source / name).parent.mkdir(parents=True, exist_ok=True)
                (source / name).write_bytes(origin.read_bytes())
    else:
        source = PROJECT_ROOT  # not a git checkout: build the tree as it is
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                           str(out_dir), str(source)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise ClusterError(f"building the wheel failed: {proc.stderr.strip()[-2000:]}")
    wheels = sorted(out_dir.glob("overlay-*.whl"))
    if not wheels:
        raise ClusterError("building the wheel produced no overlay-*.whl")
    return wheels[-1]


def node_config(host: RemoteHost, seeds: list[str], key_name: str | None) -> str:
    lines = [f"bind = {json.dumps(host.bind)}", f"advertise = {json.dumps(host.advertise)}",
             f"seeds = {json.dumps(seeds)}", f"state_dir = {json.dumps(host.node_dir)}",
             f"mode = {json.dumps(host.mode)}"]
    if key_name:
        lines.append(f"cluster_key_file = {json.dumps(f'{host.base_dir}/{key_name}')}")
    return "\n".join(lines) + "\n"


def uses_systemd(host: RemoteHost) -> bool:
    if host.systemd in ("yes", "no"):
        return host.systemd == "yes"
    probe = ssh(host, "test -d /run/systemd/system && command -v systemctl >/dev/null && "
                "echo systemd", check=False)
    return "systemd" in probe.split()


def install(host: RemoteHost, wheel: str) -> None:
    """A venv at ``base_dir/venv`` with the daemon's requirements and the wheel."""
    venv, q = host.venv, shlex.quote
    if host.deps_site is None:
        requirements = " ".join(q(r) for r in DAEMON_REQUIREMENTS)
        ssh(host, f"test -x {q(venv)}/bin/pip || {host.python} -m venv {q(venv)}")
        ssh(host, f"{q(venv)}/bin/pip install -q {requirements} && "
                  f"{q(venv)}/bin/pip install -q --no-deps --force-reinstall {q(wheel)}")
        return
    # The shortcut: a venv that also sees deps_site (a path line in a .pth file).
    ssh(host, f"test -x {q(venv)}/bin/python || {host.python} -m venv --without-pip {q(venv)}"
              f" && {q(venv)}/bin/python -c 'import site, sys; "
              f"open(site.getsitepackages()[0] + \"/overlay-deps.pth\", \"w\")"
              f".write(sys.argv[1] + \"\\n\")' {q(host.deps_site)}"
              f" && {q(venv)}/bin/python -m pip install -q --no-index --no-deps "
              f"--force-reinstall {q(wheel)}")


def running(host: RemoteHost) -> bool:
    """Whether the supervisor or the daemon of ``host`` runs (supervised hosts)."""
    out = ssh(host, f"cd {shlex.quote(host.node_dir)} 2>/dev/null || exit 0; {_ALIVE}"
                    "if alive supervisor.pid || alive daemon.pid; then echo running; fi")
    return out.strip() == "running"


def up_host(host: RemoteHost, systemd: bool, wheel: Path, seeds: list[str],
            key_file: Path | None, work: Path) -> str:
    base, node_dir, q = host.base_dir, host.node_dir, shlex.quote
    ssh(host, f"mkdir -p {q(node_dir)}")
    scp(host, wheel, f"{base}/{wheel.name}")
    key_name = None
    if key_file is not None:
        key_name = "cluster.key"
        scp(host, key_file, f"{base}/{key_name}")
        ssh(host, f"chmod 600 {q(f'{base}/{key_name}')}")
    config = work / f"{host.name}.toml"
    config.write_text(node_config(host, seeds, key_name))
    scp(host, config, f"{node_dir}/overlay.toml")
    install(host, f"{base}/{wheel.name}")
    if systemd:
        unit = work / "overlay@.service"
        unit.write_text(UNIT_TEMPLATE.read_text().replace("{base}", base))
        scp(host, unit, "/etc/systemd/system/overlay@.service")
        ssh(host, f"systemctl daemon-reload && systemctl enable --now overlay@{host.name}")
        return "started (systemd)"
    script = work / f"{host.name}-supervise.sh"
    script.write_text(SUPERVISOR.replace("{overlay}", q(f"{host.venv}/bin/overlay")))
    scp(host, script, f"{node_dir}/supervise.sh")
    # Only the supervisor goes to the background, with no tie to this SSH session.
    ssh(host, f"cd {q(node_dir)} && rm -f stop && chmod +x supervise.sh && "
              "{ setsid nohup ./supervise.sh > /dev/null 2>&1 < /dev/null & }")
    return "started (supervised)"


def up(hosts: list[RemoteHost], key_file: Path | None = None,
       progress: Callable[[str], None] | None = None) -> dict[str, str]:
    """Install and start every host's daemon, the first host first (the seed)."""
    outcome: dict[str, str] = {}
    todo: list[tuple[RemoteHost, bool]] = []
    for host in hosts:
        systemd = uses_systemd(host)
        if not systemd and running(host):
            outcome[host.name] = "already running"
        else:
            todo.append((host, systemd))
    if todo:
        with tempfile.TemporaryDirectory() as tmp:
            wheel = build_wheel(Path(tmp))
            if progress:
                progress(f"built {wheel.name}")
            for host, systemd in todo:
                seeds = [] if host is hosts[0] else [hosts[0].advertise]
                outcome[host.name] = up_host(host, systemd, wheel, seeds, key_file, Path(tmp))
                if progress:
                    progress(f"{host.name}: {outcome[host.name]}")
    return {host.name: outcome[host.name] for host in hosts}


def status(host: RemoteHost) -> dict[str, Any] | None:
    """The daemon's API status, asked on the host; None when it does not answer."""
    api = f"{host.node_dir}/api.sock"
    out = ssh(host, f"{shlex.quote(host.venv)}/bin/overlay status --json "
                    f"--api {shlex.quote(api)}", check=False, timeout=60)
    try:
        answer = json.loads(out)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def down(host: RemoteHost, grace: float = 15.0) -> str:
    """Stop the daemon (a graceful leave), SIGKILL it after ``grace`` seconds."""
    if uses_systemd(host):
        ssh(host, f"systemctl disable --now overlay@{host.name}", check=False)
        return "stopped (systemd)"
    # Tell the loop to stop, SIGTERM the daemon, wait; then SIGKILL what is left.
    tenths = max(1, round(grace * 10))
    out = ssh(host, f"cd {shlex.quote(host.node_dir)} 2>/dev/null || exit 0; {_ALIVE}"
                    "alive supervisor.pid || alive daemon.pid || { echo not running; exit 0; }; "
                    "touch stop; alive daemon.pid && kill -TERM $(cat daemon.pid); i=0; "
                    "while { alive supervisor.pid || alive daemon.pid; } && "
                    f"[ $i -lt {tenths} ]; do sleep 0.1; i=$((i + 1)); done; "
                    "if alive supervisor.pid || alive daemon.pid; then "
                    "for f in daemon.pid supervisor.pid; do "
                    "alive $f && kill -KILL $(cat $f); done; echo killed; "
                    "else echo stopped; fi; rm -f supervisor.pid daemon.pid",
              timeout=grace + 60)
    return out.strip().splitlines()[-1] if out.strip() else "stopped"
