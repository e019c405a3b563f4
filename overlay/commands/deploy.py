"""``overlay deploy``: daemons on remote hosts over SSH (``deploy.remote``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  overlay deploy --inventory hosts.toml up                  install and start every host
  overlay deploy --inventory hosts.toml up --key cluster.key    encrypted peer links
  overlay deploy --inventory hosts.toml status              each host's daemon, over SSH
  overlay deploy --inventory hosts.toml down                SIGTERM (graceful leave), then KILL
hosts.toml:
  [defaults]
  user = "root"
  identity = "~/.ssh/id_ed25519"
  base_dir = "/opt/overlay"          # venv, wheel, and one directory per node
  [[hosts]]
  name = "a"
  host = "203.0.113.5"
  bind = "0.0.0.0:7400"
  advertise = "203.0.113.5:7400"     # the first host is the others' seed
Each host needs sshd and Python 3.11+ (with venv); the daemon runs under systemd where
the host runs it (unit deploy/systemd/overlay@.service), else under a supervisor script.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "deploy", help="install, start, inspect and stop daemons on hosts over SSH",
        description="Copy a wheel of this project to every host of an inventory, install "
        "it in a venv, write the node's config and start the daemon; or ask the daemons "
        "for their status; or stop them.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inventory", type=Path, required=True, metavar="TOML",
                        help="the hosts (see below)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="install and start every host's daemon, wait for them")
    up.add_argument("--key", type=Path, help="cluster key file to copy to every host")
    up.add_argument("--timeout", type=float, default=120.0,
                    help="seconds to wait for every daemon to be ready (default 120; "
                    "0: do not wait)")
    status = actions.add_parser("status", help="each host's daemon status (API, over SSH)")
    status.add_argument("--json", action="store_true", help="one JSON object per host")
    down = actions.add_parser("down", help="stop every host's daemon")
    down.add_argument("--grace", type=float, default=15.0,
                      help="seconds between SIGTERM and SIGKILL (default 15)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from deploy import remote
    from deploy.cluster import ClusterError

    try:
        hosts = remote.load_inventory(args.inventory)
        if args.action == "up":
            for name, outcome in remote.up(
                    hosts, args.key, progress=lambda text: print(text, file=sys.stderr)).items():
                print(f"{name}  {outcome}")
            if args.timeout > 0:
                _wait_ready(remote, hosts, args.timeout)
            return 0
        if args.action == "status":
            return _status(remote, hosts, args.json)
        for host in reversed(hosts):  # the seed last
            print(f"{host.name}  {remote.down(host, args.grace)}")
        return 0
    except (ClusterError, OSError) as exc:
        print(f"overlay deploy {args.action}: {exc}", file=sys.stderr)
        return 1


def _wait_ready(remote: Any, hosts: list[Any], timeout: float) -> None:
    from deploy.cluster import ClusterError

    deadline = time.monotonic() + timeout
    waiting = list(hosts)
    while waiting:
        waiting = [h for h in waiting if not (remote.status(h) or {}).get("ready")]
        if waiting and time.monotonic() > deadline:
            names = ", ".join(h.name for h in waiting)
            raise ClusterError(f"not ready after {timeout:g} s: {names} (see daemon.log in "
                               "each node's directory)")
        if waiting:
            time.sleep(0.5)
    print(f"all {len(hosts)} daemons ready", file=sys.stderr)


def _status(remote: Any, hosts: list[Any], as_json: bool) -> int:
    from overlay.commands.cluster import print_status

    down = 0
    for host in hosts:
        status = remote.status(host)
        down += status is None
        print_status({"name": host.name, "host": host.host}, f"{host.name}  {host.advertise}",
                     status, as_json)
    return 1 if down else 0
