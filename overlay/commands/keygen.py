"""``overlay keygen``: make a cluster key (32 random bytes, hex) for peer-link encryption."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from overlay.runtime.crypto import format_key, generate_key, write_key

EXAMPLES = """examples:
  overlay keygen > cluster.key        print a new key
  overlay keygen -o /etc/overlay/key  write it with mode 0600
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "keygen",
        help="generate a cluster key",
        description="Generate a cluster key. Every daemon of a cluster needs the same key "
        "(config cluster_key_file); peers without it are refused.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-o", "--output", type=Path, help="write to this file (mode 0600)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    key = generate_key()
    if args.output is None:
        sys.stdout.write(format_key(key) + "\n")
    else:
        write_key(args.output, key)
    return 0
