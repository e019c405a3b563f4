"""``overlay cluster``: a local cluster of daemons on loopback (``deploy.cluster``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  overlay cluster up --nodes 8                       8 daemons under ./cluster
  overlay cluster up --dir /tmp/c --nodes 16 --protocol-file fast.toml
  overlay cluster status --dir /tmp/c                each node: ready, successor, topics
  overlay pub prices -a price=5 hi --api /tmp/c/n03/api.sock
  overlay cluster kill --dir /tmp/c n02 n05          SIGKILL (fault tests)
  overlay cluster kill --dir /tmp/c --random 2
  overlay cluster down --dir /tmp/c                  SIGTERM: graceful leave, exit 0
Traces: <dir>/<name>/traces/<node>.jsonl; analyse them with
  overlay analyze --traces /tmp/c --out /tmp/c-analysis
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cluster", help="start, inspect, fault and stop a local cluster of daemons",
        description="Run N overlay daemons on this host (loopback, ports chosen by the "
        "kernel). The inventory is <dir>/cluster.json.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="start the daemons and wait until all have joined")
    up.add_argument("--nodes", type=int, default=8, help="daemons to start (default 8)")
    up.add_argument("--mode", choices=("structured", "unstructured"), default="structured")
    up.add_argument("--protocol-file", type=Path, metavar="TOML",
                    help="TOML appended to every daemon's config (e.g. a [protocol] table)")
    up.add_argument("--timeout", type=float, default=120.0,
                    help="seconds to wait for every daemon to join (default 120)")
    status = actions.add_parser("status", help="each node's API status")
    status.add_argument("--json", action="store_true", help="one JSON object per node")
    down = actions.add_parser("down", help="SIGTERM every daemon (SIGKILL after --grace)")
    down.add_argument("--grace", type=float, default=15.0)
    kill = actions.add_parser("kill", help="SIGKILL nodes by name, id or address")
    kill.add_argument("names", nargs="*")
    kill.add_argument("--random", type=int, default=0, metavar="K",
                      help="SIGKILL K random live nodes instead")
    for action in (up, status, down, kill):
        action.add_argument("--dir", type=Path, default=Path("cluster"),
                            help="cluster directory (default ./cluster)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from deploy import cluster

    try:
        if args.action == "up":
            extra = args.protocol_file.read_text() if args.protocol_file else ""
            inventory = cluster.up(args.dir, args.nodes, args.mode, extra, args.timeout,
                                   progress=lambda text: print(text, file=sys.stderr))
            for node in inventory.nodes:
                print(f"{node.name}  {node.node}  {node.address}  api {node.api}")
            return 0
        inventory = cluster.Inventory.load(args.dir)
        if args.action == "status":
            return _status(cluster, inventory, args.json)
        if args.action == "down":
            for name, outcome in cluster.down(inventory, args.grace).items():
                print(f"{name}  {outcome}")
            return 0
        if not args.names and not args.random:
            print("overlay cluster kill: name nodes or give --random K", file=sys.stderr)
            return 2
        for node in cluster.kill(inventory, args.names, args.random):
            print(f"killed {node.name}  {node.node}  pid {node.pid}")
        return 0
    except (cluster.ClusterError, OSError) as exc:
        print(f"overlay cluster {args.action}: {exc}", file=sys.stderr)
        return 1


def _status(cluster: Any, inventory: Any, as_json: bool) -> int:
    down = 0
    for node in inventory.nodes:
        status = cluster.node_status(node) if cluster.pid_alive(node.pid) else None
        down += status is None
        print_status({"name": node.name, "pid": node.pid}, f"{node.name}  {node.node}",
                     status, as_json, successor="node")
    return 1 if down else 0


def print_status(facts: dict[str, Any], label: str, status: dict[str, Any] | None,
                 as_json: bool, successor: str = "address") -> None:
    """One daemon's line of a status listing (``overlay cluster|lab|deploy status``):
    ``facts`` and its API status as one JSON object, or ``label`` then DOWN, or whether
    it is ready, its successor (node id or address) and how many topics it is in."""
    if as_json:
        print(json.dumps({**facts, "status": status}))
    elif status is None:
        print(f"{label}  DOWN")
    else:
        succ = (status.get("successor") or {}).get(successor)
        print(f"{label}  ready={status.get('ready')}  succ={succ}  "
              f"topics={len(status.get('topics') or {})}")
