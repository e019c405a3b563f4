"""The ``overlay`` command: one entry point, one module per subcommand.

Each module in :mod:`overlay.commands` listed in ``COMMANDS`` exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int``.
Exit codes: 0 ok, 1 error, 2 usage (argparse's own).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from overlay import __version__
from overlay.core.errors import OverlayError

#: Subcommands, in the order ``--help`` lists them.
COMMANDS = ["pub", "sub", "fetch", "consumers", "status", "topics", "ring", "tree", "analyze",
            "keygen", "sim", "daemon", "cluster", "lab", "deploy"]

#: Subcommands that parse their own arguments (module with ``run_argv``).
PASSTHROUGH = {"analyze": "analyze"}

#: Subcommands defined together in one module.
COMMAND_MODULES = {"pub": "pubsub", "sub": "pubsub", "status": "pubsub", "topics": "pubsub",
                   "fetch": "consumers",
                   "ring": "topology",
                   "tree": "topology"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="overlay",
        description="Peer-to-peer publish/subscribe: Scribe trees on Chord, gossip, filters.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"overlay {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in dict.fromkeys(COMMAND_MODULES.get(name, name) for name in COMMANDS):
        importlib.import_module(f"overlay.commands.{module}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in PASSTHROUGH:
        # These commands own their whole argument list (and its --help).
        module = importlib.import_module(f"overlay.commands.{PASSTHROUGH[argv[0]]}")
        return int(module.run_argv(argv[1:]))
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except OverlayError as exc:
        print(f"overlay {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``overlay tree --dot | head``): stop quietly, as cat does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
