"""``overlay fetch`` and ``overlay consumers``: durable consumers from a shell (docs/API.md,
Durable consumers). ``overlay sub --durable`` is the push side (overlay.commands.pubsub)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from overlay.client import BlockingClient, ClientError
from overlay.commands.pubsub import api_arg, durable_args, durable_options, print_event

FETCH_EXAMPLES = """examples:
  overlay fetch tasks --durable workers --ack --max 10 --wait 5
  overlay fetch tasks --durable workers --ack --max 100 --json
A pull consumer's settings (--ack, --ack-wait, ...) must be the same at every member:
the first one creates the consumer with them.
"""

CONSUMERS_EXAMPLES = """examples:
  overlay consumers tasks            the topic's durable consumers, from its root
  overlay consumers                  those this daemon is the root for
  overlay consumers tasks --durable workers --delete
"""

#: The figures of one consumer, in the order the table shows them.
COLUMNS = ("topic", "durable", "pending", "inflight", "members", "redelivered", "dead_lettered",
           "ack_floor", "ack", "pull", "filter")


def register(subparsers: Any) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    fetch = subparsers.add_parser(
        "fetch", help="pull events from a durable consumer", epilog=FETCH_EXAMPLES,
        description="Attach to TOPIC's pull consumer NAME, fetch up to --max events (waiting "
        "up to --wait seconds for the first), print them, acknowledge them with --ack, and "
        "detach. Exit 1 when none came.", formatter_class=fmt)
    fetch.add_argument("topic")
    fetch.add_argument("--filter", default="", help="the consumer's filter (FILTERS.md)")
    fetch.add_argument("--max", type=int, default=1, help="events at most (default 1)")
    fetch.add_argument("--wait", type=float, default=0.0,
                       help="seconds to wait for the first event (default 0: at once)")
    durable_args(fetch, pull=True)
    out = fetch.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object per event")
    out.add_argument("--raw", action="store_true", help="payload bytes only")
    api_arg(fetch)
    fetch.set_defaults(func=run_fetch)

    consumers = subparsers.add_parser(
        "consumers", help="durable consumers and their figures", epilog=CONSUMERS_EXAMPLES,
        description="TOPIC's durable consumers as its root reports them (without TOPIC: "
        "those this daemon is the root for): pending, in flight, attached members, "
        "redeliveries, dead letters, acknowledgement floor.", formatter_class=fmt)
    consumers.add_argument("topic", nargs="?")
    consumers.add_argument("--durable", metavar="NAME", help="only this consumer")
    consumers.add_argument("--delete", action="store_true",
                           help="end the consumer named by --durable (its members' "
                           "subscriptions end)")
    consumers.add_argument("--json", action="store_true", help="one JSON object per consumer")
    api_arg(consumers)
    consumers.set_defaults(func=run_consumers)


def run_fetch(args: argparse.Namespace) -> int:
    try:
        options = durable_options(args, pull=True)
        with BlockingClient.connect(args.api, timeout=args.wait + 30,
                                    client_name="overlay-fetch") as client:
            sub = client.subscribe(args.topic, args.filter, **options)
            events = client.fetch(sub, args.max, args.wait)
            for event in events:
                print_event(event, args)
            if args.ack and events:
                client.ack(sub, [event.msg_id for event in events])
            client.unsubscribe(sub)
    except ValueError as exc:
        print(f"overlay fetch: {exc}", file=sys.stderr)
        return 2
    except ClientError as exc:
        print(f"overlay fetch: {exc}", file=sys.stderr)
        return 1
    print(f"overlay fetch: {len(events)} event(s)", file=sys.stderr)
    return 0 if events else 1


def run_consumers(args: argparse.Namespace) -> int:
    if args.delete and (args.topic is None or args.durable is None):
        print("overlay consumers: --delete needs TOPIC and --durable", file=sys.stderr)
        return 2
    try:
        with BlockingClient.connect(args.api, client_name="overlay-consumers") as client:
            if args.delete:
                deleted = client.delete_consumer(args.topic, args.durable)
                print(f"overlay consumers: {'deleted' if deleted else 'no such consumer'}",
                      file=sys.stderr)
                return 0 if deleted else 1
            if args.topic is not None:
                rows = [{"topic": args.topic, **c}
                        for c in client.consumers(args.topic, args.durable)]
            else:
                hosted: dict[str, list[dict[str, Any]]] = client.status().get("consumers") or {}
                rows = [{"topic": topic, **c} for topic, found in sorted(hosted.items())
                        for c in found if args.durable in (None, c["durable"])]
    except ClientError as exc:
        print(f"overlay consumers: {exc}", file=sys.stderr)
        return 1
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
        return 0
    table = [COLUMNS, *[tuple("-" if r.get(c) is None else str(r.get(c)) for c in COLUMNS)
                        for r in rows]]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
    return 0
