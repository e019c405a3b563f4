"""``overlay ring`` and ``overlay tree``: what the overlay looks like from the local node."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

RING_EXAMPLES = """examples:
  overlay ring                               walk the ring from the local daemon
  overlay ring --api /tmp/c/n03/api.sock --json
  overlay ring --key cluster.key             when peer links are encrypted
Exit 1 when the walk does not come back to the start (a node silent or a broken ring).
"""

TREE_EXAMPLES = """examples:
  overlay tree prices                        the topic's tree, indented from the root
  overlay tree prices --dot | dot -Tpng > prices.png
  overlay tree prices --json
Roles: root, forwarder (relays only), member (has local subscriptions; "subs" counts them).
"""


def register(subparsers: Any) -> None:
    ring = subparsers.add_parser(
        "ring", help="walk the Chord ring: ids and addresses in ring order",
        description="Ask the local daemon for its address, then each node for its "
        "successor (peer protocol), around the ring.",
        epilog=RING_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ring.add_argument("--json", action="store_true", help="one JSON object per node")
    tree = subparsers.add_parser(
        "tree", help="a topic's Scribe tree: root, parents, children, depth",
        description="Walk the ring, ask every node for its place in TOPIC's tree, and "
        "print the tree from its root.",
        epilog=TREE_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    tree.add_argument("topic")
    shape = tree.add_mutually_exclusive_group()
    shape.add_argument("--dot", action="store_true", help="Graphviz digraph")
    shape.add_argument("--json", action="store_true", help="one JSON object per tree node")
    for parser in (ring, tree):
        parser.add_argument("--api", help="daemon socket path or tcp:HOST:PORT "
                            "(default $OVERLAY_API or the default socket)")
        parser.add_argument("--key", type=Path, help="cluster key file, when peer links "
                            "are encrypted")
        parser.add_argument("--timeout", type=float, default=3.0,
                            help="seconds to wait for each node (default 3)")
        parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import trio

    from overlay.client import BlockingClient, ClientError
    from overlay.runtime.crypto import load_key

    try:
        with BlockingClient.connect(args.api, timeout=args.timeout,
                                    client_name=f"overlay-{args.command}") as client:
            status = client.status()
    except ClientError as exc:
        print(f"overlay {args.command}: {exc}", file=sys.stderr)
        return 1
    if status.get("mode") != "structured":
        print(f"overlay {args.command}: the daemon runs in {status.get('mode')} mode; "
              "rings and trees exist in structured mode", file=sys.stderr)
        return 1
    key = load_key(args.key) if args.key else None
    return int(trio.run(_run, args, str(status["address"]), key))


async def _run(args: argparse.Namespace, start: str, key: bytes | None) -> int:
    from chord.ring import hex_id
    from overlay.runtime.topology import TopologyError, peer_client, tree_infos, walk_ring

    async with peer_client(key, args.timeout) as transport:
        try:
            walk = await walk_ring(transport, start, args.timeout)
        except TopologyError as exc:
            print(f"overlay {args.command}: {exc}", file=sys.stderr)
            return 1
        bits = len(walk.states[0].fingers) or 128
        if args.command == "ring":
            for state in walk.states:
                entry = {"node": hex_id(state.node.id, bits), "address": state.node.addr}
                print(json.dumps(entry) if args.json else f"{entry['node']}  {entry['address']}")
            _report_walk(walk)
            return 0 if walk.closed else 1
        infos = await tree_infos(transport, [s.node.addr for s in walk.states], args.topic,
                                 args.timeout)
    _report_walk(walk)
    return _print_tree(args, infos, bits)


def _report_walk(walk: Any) -> None:
    end = "back at the start" if walk.closed else "NOT back at the start"
    silent = f"; silent: {', '.join(walk.silent)}" if walk.silent else ""
    print(f"{len(walk.states)} nodes, {end}{silent}", file=sys.stderr)


def _print_tree(args: argparse.Namespace, infos: list[Any], bits: int) -> int:
    from chord.ring import hex_id

    def name(ref: Any) -> str:
        return hex_id(ref.id, bits)

    nodes = {name(i.node): i for i in infos}
    if not nodes:
        print(f"overlay tree: no node is in the tree of {args.topic!r}", file=sys.stderr)
        return 1
    children: dict[str, list[str]] = {}
    for key, info in nodes.items():
        if info.parent is not None:
            children.setdefault(name(info.parent), []).append(key)
    roots = sorted(k for k, i in nodes.items() if i.role == "root")
    if args.json:
        for key, info in sorted(nodes.items()):
            print(json.dumps({"node": key, "address": info.node.addr, "role": info.role,
                              "parent": None if info.parent is None else name(info.parent),
                              "depth": info.depth, "subscriptions": info.subscriptions,
                              "children": sorted(name(c) for c in info.children)}))
    elif args.dot:
        print(f'digraph "{args.topic}" {{')
        for key, info in sorted(nodes.items()):
            shape = "doublecircle" if info.role == "root" else (
                "box" if info.role == "member" else "ellipse")
            print(f'  "{key[:8]}" [shape={shape}, label="{key[:8]}\\n{info.role} '
                  f'subs={info.subscriptions}"];')
            if info.parent is not None:
                print(f'  "{name(info.parent)[:8]}" -> "{key[:8]}";')
        print("}")
    else:
        reached: set[str] = set()

        def show(key: str, indent: int) -> None:
            if key in reached:
                return
            reached.add(key)
            info = nodes[key]
            print(f"{'  ' * indent}{key}  {info.node.addr}  {info.role}  depth {info.depth}"
                  f"  subs {info.subscriptions}")
            for child in sorted(children.get(key, [])):
                if child in nodes:
                    show(child, indent + 1)

        for root in roots:
            show(root, 0)
        for key in sorted(set(nodes) - reached):
            print(f"(detached) {key}  {nodes[key].node.addr}  {nodes[key].role}")
    print(f"{len(nodes)} nodes in the tree of {args.topic!r}, roots: {len(roots)}",
          file=sys.stderr)
    return 0 if len(roots) == 1 else 1
