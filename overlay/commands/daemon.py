"""``overlay daemon``: run one node (Chord, Scribe, local API) until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  overlay daemon --bind 127.0.0.1:7400 --trace-dir traces           create a ring
  overlay daemon --bind 127.0.0.1:0 --join 127.0.0.1:7400 --trace-dir traces
  overlay daemon --bind 0.0.0.0:7400 --advertise 10.1.0.5:7400 --join 10.1.0.2:7400
  overlay daemon --config /etc/overlay/overlay.toml
  overlay daemon --bind 127.0.0.1:0 --state-dir /tmp/n1 --api-tcp 127.0.0.1:0
  overlay daemon --mode unstructured --bind 127.0.0.1:0 --join 127.0.0.1:7400
When serving, prints one JSON line to stdout: {"event": "ready", "address", "node", "pid",
"api"} and writes the same facts to <state_dir>/daemon.json (removed on exit).
Applications reach it through the local API at <state_dir>/api.sock (overlay pub/sub/status).
SIGTERM or SIGINT: graceful leave (the neighbours take over), traces flushed, exit 0.
Exit 2 for a bad configuration (the message names the setting).
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "daemon", help="run a node: join the ring and serve",
        description="Run one overlay node over TCP. Settings come from --config, then "
        "OVERLAY_* environment variables, then these flags.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, help="TOML config file")
    parser.add_argument("--bind", help="HOST:PORT to listen on (port 0: any free port)")
    parser.add_argument("--advertise", help="HOST:PORT other nodes reach us at "
                        "(default: the bound address)")
    parser.add_argument("--join", action="append", metavar="HOST:PORT",
                        help="a node of the ring to join through (repeatable; none: create "
                        "a ring)")
    parser.add_argument("--trace-dir", help="write this node's trace records here "
                        "(default <state_dir>/traces)")
    parser.add_argument("--state-dir", help="daemon.json, the API socket and default traces "
                        "(default $XDG_STATE_HOME/overlay)")
    parser.add_argument("--api-socket", help="Unix socket of the local API "
                        "(default <state_dir>/api.sock)")
    parser.add_argument("--api-tcp", metavar="HOST:PORT",
                        help="also serve the API on this loopback TCP address")
    parser.add_argument("--mode", choices=("structured", "unstructured"),
                        help="structured: Scribe trees on Chord (default); unstructured: gossip "
                        "([protocol] strategy = flood|random-walk|rumor|blind-counter|"
                        "anti-entropy|pbcast, and its settings)")
    parser.add_argument("--stabilize-interval", type=float, metavar="S",
                        help="mean period of stabilize, fix_fingers, check_predecessor")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import trio

    from overlay.runtime.config import ConfigError, build_config
    from overlay.runtime.daemon import run_until_signalled
    from overlay.runtime.serve import build_node

    try:
        config = build_config(args.config, os.environ, {
            "bind": args.bind, "advertise": args.advertise, "seeds": args.join,
            "trace_dir": args.trace_dir, "state_dir": args.state_dir,
            "api_socket": args.api_socket, "api_tcp": args.api_tcp, "mode": args.mode})
        if args.stabilize_interval is not None:
            period = args.stabilize_interval
            config = dataclasses.replace(config, protocol={
                **config.protocol, "stabilize_interval": period,
                "fix_fingers_interval": period, "check_predecessor_interval": period})
        node = build_node(config)
    except ConfigError as exc:
        print(f"overlay daemon: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=config.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    daemon = node.daemon
    tune_gc()

    def ready(address: str) -> None:
        print(json.dumps({"event": "ready", "address": address, "node": node.service.node_hex,
                          "pid": os.getpid(), "api": str(config.api_socket_path)}), flush=True)

    failures: list[OSError] = []
    try:
        trio.run(run_until_signalled, daemon, ready)
    except* OSError as group:  # a port or socket we cannot have: say which, exit 1
        failures += _leaves(group)
    if failures:
        print(f"overlay daemon: {failures[0]} (a second daemon on this host needs its own "
              "--state-dir or --api-socket, and its own --bind port)", file=sys.stderr)
        return 1
    return 0


#: Allocations between young collections (CPython's default is 700).
GC_YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    """A daemon keeps many objects alive (recent events, retained events, per-peer
    state) and allocates several per event it handles; with CPython's default
    thresholds the cycle collector ran so often that it took about a tenth of the
    daemon's time under load (bench/e2e.py, one daemon). Nearly all of our garbage is
    freed by reference counting, so collect cycles less often, and leave the objects
    made at start-up (modules, configuration) out of every collection."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def _leaves(group: BaseExceptionGroup[OSError]) -> list[OSError]:
    """The OSErrors inside nested nursery groups."""
    found: list[OSError] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found += _leaves(exc)
        else:
            found.append(exc)
    return found
