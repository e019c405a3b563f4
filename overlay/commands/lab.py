"""``overlay lab``: hosts in network namespaces, one daemon each (``deploy.lab``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EXAMPLES = """examples (as root; needs ip and nft):
  overlay lab up --hosts 6 --loss 0.05 --delay 20     6 hosts, 5% loss, 20 ms per link
  overlay lab status                                  each host's daemon, one ring or not
  overlay sub prices --api lab/h4/api.sock &          API sockets are files in the lab dir
  overlay pub prices -a price=5 hi --api lab/h0/api.sock
  overlay lab partition 0,1,2,3 4,5                   hosts 0-3 and 4-5 cannot reach each other
  overlay lab heal                                    and now they can again
  overlay lab down                                    stop the daemons, remove every namespace
  ip netns exec olab-h2 overlay ring --api lab/h2/api.sock   walk the ring from inside host 2
Hosts are namespaces <name>-h<i> with addresses 198.18.77.<i+1> on a bridge in namespace
<name>-br; loss and partitions are nftables rules in each host, delay is the daemons' own
peer_delay_ms. The inventory is <dir>/lab.json; traces are <dir>/h<i>/traces/.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "lab", help="a multi-host lab in network namespaces (loss, delay, partitions)",
        description="Run one overlay daemon in each of K network namespaces standing for "
        "hosts, with packet loss, per-link delay and partitions between groups of hosts.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="make the hosts, start a daemon on each, wait for the ring")
    up.add_argument("--hosts", type=int, default=4, help="hosts to make (default 4)")
    up.add_argument("--loss", type=float, default=0.0, metavar="P",
                    help="share of packets every host drops on its way out (0..1, default 0)")
    up.add_argument("--delay", type=float, default=0.0, metavar="MS",
                    help="one-way delay every daemon adds to what it sends a peer (default 0)")
    up.add_argument("--name", default="olab",
                    help="namespace prefix, a short identifier (default olab)")
    up.add_argument("--mode", choices=("structured", "unstructured"), default="structured")
    up.add_argument("--protocol-file", type=Path, metavar="TOML",
                    help="TOML appended to every daemon's config (e.g. a [protocol] table)")
    up.add_argument("--timeout", type=float, default=120.0,
                    help="seconds to wait for every daemon to join (default 120)")
    part = actions.add_parser("partition", help="cut two groups of hosts off from each other")
    part.add_argument("group_a", metavar="GROUP_A", help="host indices, e.g. 0,1,2,3")
    part.add_argument("group_b", metavar="GROUP_B", help="host indices, e.g. 4,5")
    actions.add_parser("heal", help="remove the partition")
    status = actions.add_parser("status", help="each host's daemon and whether they form one ring")
    status.add_argument("--json", action="store_true", help="one JSON object per host")
    down = actions.add_parser("down", help="stop the daemons and remove everything the lab made")
    down.add_argument("--grace", type=float, default=15.0,
                      help="seconds between SIGTERM and SIGKILL (default 15)")
    down.add_argument("--name", help="with no inventory in --dir: remove the namespaces "
                      "of the lab with this name")
    for action in actions.choices.values():
        action.add_argument("--dir", type=Path, default=Path("lab"),
                            help="lab directory (default ./lab)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from deploy import lab
    from deploy.cluster import ClusterError

    try:
        if args.action == "up":
            extra = args.protocol_file.read_text() if args.protocol_file else ""
            inventory = lab.up(args.dir, args.hosts, args.loss, args.delay, args.name,
                               args.mode, extra, args.timeout,
                               progress=lambda text: print(text, file=sys.stderr))
            for host, node in zip(inventory.hosts, inventory.nodes, strict=True):
                print(f"{node.name}  {host.netns}  {node.address}  {node.node}  api {node.api}")
            return 0
        if args.action == "down" and args.name and not (args.dir / lab.INVENTORY).exists():
            from deploy.netns import NetnsTopology

            for netns in NetnsTopology(args.name).destroy():
                print(f"{netns}  removed")
            return 0
        inventory = lab.LabInventory.load(args.dir)
        if args.action == "partition":
            lab.partition(inventory, lab.parse_group(args.group_a, inventory),
                          lab.parse_group(args.group_b, inventory))
            print(f"partitioned: {args.group_a} | {args.group_b}")
            return 0
        if args.action == "heal":
            lab.heal(inventory)
            print("healed")
            return 0
        if args.action == "status":
            return _status(lab, inventory, args.json)
        for name, outcome in lab.down(inventory, args.grace).items():
            print(f"{name}  {outcome}")
        return 0
    except (ClusterError, OSError) as exc:
        print(f"overlay lab {args.action}: {exc}", file=sys.stderr)
        return 1


def _status(lab: Any, inventory: Any, as_json: bool) -> int:
    from overlay.commands.cluster import print_status

    answers = lab.statuses(inventory)
    problem = lab.ring_problem(inventory, answers)
    cut = inventory.partition
    if not as_json:
        print(f"lab {inventory.name}: {len(inventory.hosts)} hosts, loss {inventory.loss:g}, "
              f"delay {inventory.delay_ms:g} ms, partition "
              + (" | ".join(",".join(map(str, g)) for g in cut) if cut else "none"))
    for host, node, status in zip(inventory.hosts, inventory.nodes, answers, strict=False):
        print_status({"host": host.index, "netns": host.netns, "name": node.name,
                      "pid": node.pid}, f"{node.name}  {host.netns}  {node.address}", status,
                     as_json)
    if not as_json:
        print("ring: one ring of every host" if problem is None else f"ring: {problem}")
    return 1 if any(status is None for status in answers) else 0
