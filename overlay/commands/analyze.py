"""``overlay analyze``: the Spark analysis of trace files (same as ``python -m spark_analysis``)."""

from __future__ import annotations

import argparse
from typing import Any

EXAMPLES = """examples:
  overlay analyze --traces runs/main/traces --out runs/main/analysis
  overlay analyze --traces /data/traces --out out --master spark://10.0.0.5:7077
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "analyze", help="analyze traces with Spark (tree depth, delivery, latency, cost)",
        description="Read every *.jsonl* trace under --traces and write summary.json, Parquet "
        "tables and report.html under --out. Options: --traces PATH --out DIR [--master URL] "
        "[--run RUN_ID] [--json] [--no-report].",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(func=None)


def run_argv(argv: list[str]) -> int:
    """Hand the arguments to the analysis' own parser, untouched."""
    from spark_analysis.cli import main  # Spark is heavy: import it only when asked

    return main(argv)
