"""``overlay deploy`` over real SSH: three OpenSSH servers on free loopback ports, each
with its own base directory, stand for three hosts (a temporary host key, a temporary
client key authorized for the current user). ``up`` installs and starts a daemon on
each and they form one ring; ``status`` reports them; ``down`` leaves nothing running.

Test-only shortcut: the hosts' venvs use this project's installed dependencies
(``deps_site``) instead of installing them from the package index, so the test needs
no network; the wheel itself is built and installed as in production.

Skipped, with the reason, where sshd or the ssh client is missing."""

from __future__ import annotations

import getpass
import os
import shutil
import site
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy import cluster, remote
from overlay.client import BlockingClient, ClientError

pytestmark = pytest.mark.integration

SSHD = "/usr/sbin/sshd"
HOSTS = ("a", "b", "c")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True)


def start_sshd(directory: Path, authorized: Path) -> tuple[subprocess.Popen[bytes], int]:
    """One sshd on a free loopback port, in the foreground (a child of the test)."""
    directory.mkdir()
    keygen(directory / "host_key")
    port = free_port()
    config = directory / "sshd_config"
    config.write_text(f"""ListenAddress 127.0.0.1
HostKey {directory / "host_key"}
AuthorizedKeysFile {authorized}
PidFile {directory / "sshd.pid"}
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
""")
    log = open(directory / "sshd.log", "wb")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config), "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"sshd exited: {(directory / 'sshd.log').read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError("sshd did not listen within 15 s") from None
            time.sleep(0.05)


@pytest.fixture
def inventory(tmp_path: Path) -> Iterator[Path]:
    if not os.access(SSHD, os.X_OK) or shutil.which("ssh") is None:
        pytest.skip(f"no OpenSSH server ({SSHD}) or client here: Debian packages "
                    "openssh-server and openssh-client (scripts/setup.sh installs them)")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation
    keygen(tmp_path / "client_key")
    authorized = tmp_path / "authorized_keys"
    authorized.write_text((tmp_path / "client_key.pub").read_text())
    servers: list[subprocess.Popen[bytes]] = []
    lines = ["[defaults]", f'user = "{getpass.getuser()}"',
             f'identity = "{tmp_path / "client_key"}"', f'python = "{sys.executable}"',
             f'deps_site = "{site.getsitepackages()[0]}"', 'systemd = "no"']
    try:
        for name in HOSTS:
            proc, ssh_port = start_sshd(tmp_path / f"sshd-{name}", authorized)
            servers.append(proc)
            address = f"127.0.0.1:{free_port()}"
            lines += ["[[hosts]]", f'name = "{name}"', 'host = "127.0.0.1"',
                      f"ssh_port = {ssh_port}", f'bind = "{address}"',
                      f'advertise = "{address}"', f'base_dir = "{tmp_path / f"host-{name}"}"']
        path = tmp_path / "hosts.toml"
        path.write_text("\n".join(lines) + "\n")
        try:
            yield path
        finally:
            overlay_deploy(path, "down", "--grace", "5")
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(timeout=10)


def overlay_deploy(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "overlay.cli", "deploy", "--inventory",
                           str(path), *args], capture_output=True, text=True, timeout=600,
                          check=False)


def api_status(api: Path) -> dict[str, object] | None:
    try:
        with BlockingClient.connect(str(api), timeout=5) as client:
            return client.status()
    except (ClientError, OSError):
        return None


def processes_under(directory: Path) -> list[str]:
    """Command lines of the running processes that name ``directory``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if str(directory) in cmdline and cluster.pid_alive(int(proc.name)):
                found.append(cmdline)
        except (OSError, ValueError):
            continue
    return found


def test_up_status_down_over_ssh(inventory: Path) -> None:
    hosts = remote.load_inventory(inventory)
    started = overlay_deploy(inventory, "up", "--timeout", "120")
    assert started.returncode == 0, started.stderr
    assert started.stdout.split() == [w for h in HOSTS for w in (h, "started", "(supervised)")]
    # The installed daemon is the wheel's, not this checkout.
    where = remote.ssh(hosts[0], f"{hosts[0].venv}/bin/python -c "
                       "'import overlay; print(overlay.__file__)'")
    assert where.startswith(f"{hosts[0].venv}/lib/"), where
    apis = [Path(h.node_dir) / "api.sock" for h in hosts]
    # One ring: every daemon's successor is the next one in id order.
    deadline = time.monotonic() + 60
    while True:
        answers = [api_status(api) for api in apis]
        ids = sorted(str(a["node"]) for a in answers if a)
        wanted = {ids[i]: ids[(i + 1) % len(ids)] for i in range(len(ids))}
        successors = {str(a["node"]): (a.get("successor") or {}).get("node")  # type: ignore[union-attr]  # a live node always has a successor entry (dict)
                      for a in answers if a}
        if len(ids) == len(hosts) and successors == wanted:
            break
        assert time.monotonic() < deadline, f"no single ring: {answers}"
        time.sleep(0.2)
    status = overlay_deploy(inventory, "status")
    assert status.returncode == 0, status.stderr
    assert [line.split()[0] for line in status.stdout.splitlines()] == list(HOSTS)
    assert status.stdout.count("ready=True") == len(HOSTS)
    again = overlay_deploy(inventory, "up", "--timeout", "0")
    assert again.stdout.split().count("already") == len(HOSTS), again.stdout
    stopped = overlay_deploy(inventory, "down")
    assert stopped.returncode == 0, stopped.stderr
    assert sorted(stopped.stdout.split()) == sorted([*HOSTS, *["stopped"] * len(HOSTS)])
    for host in hosts:
        assert not processes_under(Path(host.base_dir)), f"{host.name} still runs something"
        assert not Path(host.node_dir, "api.sock").exists()
    after = overlay_deploy(inventory, "status")
    assert after.returncode == 1 and after.stdout.count("DOWN") == len(HOSTS)


def test_the_daemon_requirements_are_the_projects_own_but_the_analysis() -> None:
    import tomllib

    project = tomllib.loads((remote.PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    analysis = {"pyspark", "pyarrow", "pandas", "numpy", "matplotlib"}
    wanted = {d.split()[0] for d in project["dependencies"] if d.split(">")[0] not in analysis}
    assert set(remote.DAEMON_REQUIREMENTS) == wanted


def test_inventory_mistakes_are_named(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    base = '[[hosts]]\nname = "a"\nhost = "h"\nbind = "0.0.0.0:7400"\nadvertise = "h:7400"\n'
    for text, message in ((base + 'colour = "red"\n', "unknown keys"),
                          (base + 'systemd = "maybe"\n', "systemd is"),
                          (base.replace('"a"', '"a-b"'), "identifier")):
        path.write_text(text)
        with pytest.raises(cluster.ClusterError, match=message):
            remote.load_inventory(path)
    with pytest.raises(cluster.ClusterError, match="does not exist"):
        remote.load_inventory(tmp_path / "nothing.toml")
    path.write_text(base + base)
    with pytest.raises(cluster.ClusterError, match="unique"):
        remote.load_inventory(path)
