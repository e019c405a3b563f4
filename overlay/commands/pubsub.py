"""``overlay pub``, ``overlay sub`` and ``overlay status``: the local API from a shell."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any

from overlay.client import BlockingClient, ClientError, Event, default_target
from overlay.client_durable import durable_fields

PUB_EXAMPLES = """examples:
  overlay pub prices '{"px": 1}' -a sym=ACME -a price=101.5
  echo hello | overlay pub greetings               payload from stdin
  overlay pub ticks -a n=1 --count 100 --unreliable
  OVERLAY_API=/var/lib/overlay/api.sock overlay pub alerts -a urgent=true
attribute values: integers and floats become numbers, true/false booleans,
quoted ('"42"') or anything else text.
"""

SUB_EXAMPLES = """examples:
  overlay sub prices --filter "price > 100 AND sym IN ('ACME', 'INIT')"
  overlay sub prices --count 10 --timeout 30 --json
  overlay sub jobs --group workers           one of the group gets each event
  overlay sub prices --last 50               replay what the root still retains
  overlay sub orders --from-start            every retained event from the first (durable logs)
  overlay sub tasks --durable workers --ack  a work queue: each event acknowledged once printed
  overlay sub tasks --durable audit --ack --ack-wait 60 --max-deliver 3 --dead-letter tasks.dead
"""


def register(subparsers: Any) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    pub = subparsers.add_parser("pub", help="publish events", epilog=PUB_EXAMPLES,
                                description="Publish an event on TOPIC through the local "
                                "daemon.", formatter_class=fmt)
    pub.add_argument("topic")
    pub.add_argument("payload", nargs="?", help="payload text (default: read stdin)")
    pub.add_argument("-a", "--attr", action="append", default=[], metavar="KEY=VALUE",
                     help="an event attribute (repeatable)")
    pub.add_argument("--count", type=int, default=1, help="publish N times (default 1)")
    pub.add_argument("--unreliable", action="store_true",
                     help="do not wait for the root and its replicas to hold the event")
    pub.add_argument("--msg-id", help="hex id making a retried publish idempotent")
    pub.add_argument("--ttl", type=float, metavar="S",
                     help="not delivered once S seconds old (structured mode)")
    api_arg(pub)
    pub.set_defaults(func=run_pub)

    sub = subparsers.add_parser("sub", help="subscribe and print events", epilog=SUB_EXAMPLES,
                                description="Subscribe to TOPIC and print matching events "
                                "until interrupted, --count or --timeout.", formatter_class=fmt)
    sub.add_argument("topic")
    sub.add_argument("--filter", default="", help="filter expression (FILTERS.md)")
    sub.add_argument("--count", type=int, help="exit after N events")
    sub.add_argument("--timeout", type=float, help="exit after S seconds without an event")
    sub.add_argument("--expiry", type=float, help="subscription lifetime in seconds")
    sub.add_argument("--group", help="share events with other members of this group")
    replay = sub.add_mutually_exclusive_group()
    replay.add_argument("--last", type=int, help="first replay the last N retained events")
    replay.add_argument("--from-start", action="store_true",
                        help="first replay every retained event, from the first")
    replay.add_argument("--since-seq", type=int, metavar="S",
                        help="first replay every retained event with seq >= S")
    durable_args(sub)
    out = sub.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object per event")
    out.add_argument("--raw", action="store_true", help="payload bytes only")
    api_arg(sub)
    sub.set_defaults(func=run_sub)

    status = subparsers.add_parser("status", help="show the local daemon's status",
                                   description="Show the local daemon's status.",
                                   epilog="examples:\n  overlay status\n  overlay status --json",
                                   formatter_class=fmt)
    status.add_argument("--json", action="store_true", help="print the raw status as JSON")
    api_arg(status)
    status.set_defaults(func=run_status)

    topics = subparsers.add_parser(
        "topics", help="this node's topics: tree role and durable log",
        description="The topics this node is in or keeps a log of (structured mode): its "
        "role in the tree, and its log's role (root or replica), events, payload bytes, "
        "first and last seq, counter, and retention (events/bytes/seconds).",
        epilog="examples:\n  overlay topics\n  overlay topics --json", formatter_class=fmt)
    topics.add_argument("--json", action="store_true", help="one JSON object per topic")
    api_arg(topics)
    topics.set_defaults(func=run_topics)


def durable_args(parser: argparse.ArgumentParser, pull: bool = False) -> None:
    """The options of a durable subscription (docs/API.md, Durable consumers)."""
    group = parser.add_argument_group("durable consumer")
    group.add_argument("--durable", metavar="NAME", required=pull,
                       help="attach to the topic's durable consumer NAME (created if new)")
    group.add_argument("--ack", action="store_true", default=None,
                       help="acknowledge each event once printed (else redelivered after "
                       "--ack-wait)")
    group.add_argument("--ack-wait", type=float, metavar="S", help="seconds (default 30)")
    group.add_argument("--max-deliver", type=int, metavar="K",
                       help="attempts before the dead letter (default 5)")
    group.add_argument("--dead-letter", metavar="TOPIC",
                       help="publish dead-lettered events there (default: drop them)")
    group.add_argument("--max-inflight", type=int, metavar="N",
                       help="unacknowledged events at once (default 256)")


def durable_options(args: argparse.Namespace, pull: bool | None = None) -> dict[str, Any]:
    """The subscribe keyword arguments of the durable options given (ValueError: settings
    without ``--durable``)."""
    settings = {"ack": args.ack, "ack_wait": args.ack_wait, "max_deliver": args.max_deliver,
                "dead_letter": args.dead_letter, "max_inflight": args.max_inflight,
                "pull": pull}
    durable_fields(args.durable, **settings)  # the client's one check of them
    return {} if args.durable is None else {"durable": args.durable, **settings}


def api_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api", help="daemon socket path or tcp:HOST:PORT "
                        f"(default $OVERLAY_API or {default_target()})")


def parse_attr(text: str) -> tuple[str, str | int | float | bool]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"attribute {text!r} is not KEY=VALUE")
    if raw in ("true", "false"):
        return key, raw == "true"
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return key, raw[1:-1]
    for kind in (int, float):
        try:
            return key, kind(raw)
        except ValueError:
            pass
    return key, raw


def run_pub(args: argparse.Namespace) -> int:
    try:
        attrs = dict(parse_attr(a) for a in args.attr)
    except argparse.ArgumentTypeError as exc:
        print(f"overlay pub: {exc}", file=sys.stderr)
        return 2
    payload = args.payload.encode() if args.payload is not None else sys.stdin.buffer.read()
    try:
        with BlockingClient.connect(args.api, client_name="overlay-pub") as client:
            for _ in range(max(args.count, 0)):
                result = client.publish(args.topic, payload, attrs=attrs,
                                        reliable=not args.unreliable, msg_id=args.msg_id,
                                        ttl=args.ttl)
                seq = "" if result.seq is None else f" seq {result.seq}"
                print(f"published {result.msg_id}{seq}", file=sys.stderr)
    except ClientError as exc:
        print(f"overlay pub: {exc}", file=sys.stderr)
        return 1
    return 0


def format_event(event: Event, as_json: bool) -> str:
    if as_json:
        try:
            payload: Any = event.payload.decode()
        except UnicodeDecodeError:
            payload = {"base64": base64.b64encode(event.payload).decode()}
        return json.dumps({"topic": event.topic, "msg_id": event.msg_id, "seq": event.seq,
                           "attrs": event.attrs, "payload": payload,
                           "publisher": event.publisher, "ts": event.ts,
                           "attempt": event.attempt})
    attrs = " ".join(f"{k}={v!r}" for k, v in sorted(event.attrs.items()))
    seq = "-" if event.seq is None else event.seq
    return f"[{event.topic} #{seq}] {attrs} {event.payload.decode(errors='replace')}".rstrip()


def print_event(event: Event, args: argparse.Namespace) -> None:
    if args.raw:
        sys.stdout.buffer.write(event.payload)
        sys.stdout.buffer.flush()
    else:
        print(format_event(event, args.json), flush=True)


def run_sub(args: argparse.Namespace) -> int:
    received = 0
    try:
        durable = durable_options(args)
    except ValueError as exc:
        print(f"overlay sub: {exc}", file=sys.stderr)
        return 2
    try:
        with BlockingClient.connect(args.api, timeout=None, client_name="overlay-sub") as client:
            client.subscribe(args.topic, args.filter, expiry=args.expiry, group=args.group,
                             last=args.last,
                             since_seq=1 if args.from_start else args.since_seq, **durable)
            client.set_timeout(args.timeout)
            for item in client.events():
                if not isinstance(item, Event):
                    print("overlay sub: the subscription ended (expired, or its durable "
                          "consumer was deleted)", file=sys.stderr)
                    return 0
                print_event(item, args)
                if args.ack:  # printed (flushed): done with it
                    item.ack()
                received += 1
                if args.count is not None and received >= args.count:
                    return 0
    except TimeoutError:
        print(f"overlay sub: no event for {args.timeout} s ({received} received)",
              file=sys.stderr)
        return 1 if args.count is not None else 0
    except ClientError as exc:
        print(f"overlay sub: {exc}", file=sys.stderr)
        return 1
    return 0


def _status(args: argparse.Namespace, command: str) -> dict[str, Any] | None:
    """The daemon's status, or None once the failure is reported."""
    try:
        with BlockingClient.connect(args.api, client_name=f"overlay-{command}") as client:
            return client.status()
    except ClientError as exc:
        print(f"overlay {command}: {exc}", file=sys.stderr)
        return None


def run_topics(args: argparse.Namespace) -> int:
    status = _status(args, "topics")
    if status is None:
        return 1
    trees: dict[str, Any] = status.get("topics") or {}
    logs: dict[str, Any] = status.get("logs") or {}
    rows = []
    for topic in sorted({*trees, *logs}):
        tree, log = trees.get(topic) or {}, logs.get(topic) or {}
        rows.append({"topic": topic, "tree": tree.get("role"), "log": log.get("role"),
                     "events": log.get("events", 0), "bytes": log.get("bytes", 0),
                     "first_seq": log.get("first_seq"), "last_seq": log.get("last_seq"),
                     "counter": log.get("counter"), "retention": log.get("retention")})
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
        return 0
    columns = ("topic", "tree", "log", "events", "bytes", "first_seq", "last_seq", "counter",
               "retention")
    table = [columns, *[tuple(_cell(r[c]) for c in columns) for r in rows]]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
    storage = status.get("storage")
    if storage:
        quota = storage.get("max_bytes")
        print(f"storage: {storage['path']} (sync {storage['sync']}"
              f"{'' if quota is None else f', max_bytes {quota}'}), {storage['commits']} "
              f"commits, {storage['failures']} failed")
        if storage.get("failing"):
            print(f"storage: FAILING: {storage['failing']} (reliable publishes are refused "
                  "with storage_error)")
    return 0


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):  # a retention: events / payload bytes / seconds
        return f"{value['count']}/{value['bytes']}B/{value['seconds']:g}s"
    return str(value)


def run_status(args: argparse.Namespace) -> int:
    status = _status(args, "status")
    if status is None:
        return 1
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True, default=str))
        return 0
    for key in sorted(status):
        value = status[key]
        if isinstance(value, dict | list):
            value = json.dumps(value, sort_keys=True, default=str)
        print(f"{key:>14}: {value}")
    return 0

