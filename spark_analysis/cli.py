"""Command line: ``python -m spark_analysis --traces PATH --out DIR``.

stdout carries only the final summary and the report's path; progress (when stderr
is a terminal) and errors go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from spark_analysis.location import glob_free_prefix, local_path, without_credentials
from spark_analysis.session import DEFAULT_MASTER

EXIT_OK = 0
EXIT_FAILED = 1  # the analysis itself failed (Spark error, unwritable output)
EXIT_USAGE = 2  # bad arguments or no traces (argparse uses 2 as well)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="spark_analysis",
        description="Analyze overlay trace files (TRACES.md) with Spark.",
    )
    p.add_argument(
        "--traces",
        required=True,
        help="trace directory (read recursively), file or glob; a local path or any URI "
        "Hadoop reads (hdfs://, s3a://, gs://, abfs://, ftp://, ...)",
    )
    p.add_argument("--out", required=True, help="output directory: a local path or a URI")
    p.add_argument("--master", default=DEFAULT_MASTER, help="Spark master (default local[*])")
    p.add_argument("--run", default=None, help="only records of this run id")
    p.add_argument("--shuffle-partitions", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--driver-memory", default=None, help="Spark driver memory (default 2g)")
    p.add_argument("--no-report", action="store_true", help="skip report.html")
    p.add_argument("--json", action="store_true", help="print the whole summary as JSON")
    return p


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def format_summary(summary: dict[str, Any]) -> str:
    o = summary["overall"]
    lk = summary["lookup"]
    lines = [
        f"records {summary['records']}  bad lines {summary['bad_lines']}  "
        f"nodes {summary['nodes']}  bad filters {summary['bad_filters']}",
        f"published {o['published']}  expected {o['expected']}  delivered {o['delivered']}  "
        f"ratio {_fmt(o['delivery_ratio'])}  false {o['false_deliveries']}  "
        f"duplicates {o['duplicates']}",
        f"latency ms p50 {_fmt(o['latency_ms_p50'])}  p99 {_fmt(o['latency_ms_p99'])}  "
        f"tree depth mean {_fmt(o['tree_depth_mean'])} max {_fmt(o['tree_depth_max'])}  "
        f"forwards/delivery {_fmt(o['forwards_per_delivery'])}",
        f"lookups {lk['count']}  ok {_fmt(lk['ok_rate'])}  path length (ok lookups) mean "
        f"{_fmt(lk.get('path_length_mean'))}  p99 {_fmt(lk.get('path_length_p99'))}",
    ]
    if consumers := summary.get("consumers"):
        c = consumers["overall"]
        lines.append(
            f"durable consumers {consumers['consumers']}  expected {c['expected']}  "
            f"acknowledged {c['acknowledged']}  redelivered {c['redelivered']}  "
            f"dead-lettered {c['dead_lettered']}  lost {c['lost']}  ack ms p50 "
            f"{_fmt(c['ack_latency_ms_p50'])}  p99 {_fmt(c['ack_latency_ms_p99'])}"
        )
    for topic, s in summary["topics"].items():
        lines.append(
            f"  {topic}: ratio {_fmt(s['delivery_ratio'])}  expected {s['expected']}  "
            f"p99 {_fmt(s['latency_ms_p99'])} ms  depth max {_fmt(s['tree_depth_max'])}"
        )
    return "\n".join(lines)


def _no_traces(traces: str) -> int:
    print(f"spark_analysis: no such trace path: {without_credentials(traces)}", file=sys.stderr)
    return EXIT_USAGE


def _failed(exc: Exception) -> int:
    # Spark errors carry the whole JVM stack trace; its first line says what failed.
    first = without_credentials((str(exc).strip().splitlines() or [""])[0][:500])
    print(f"spark_analysis: analysis failed: {type(exc).__name__}: {first}", file=sys.stderr)
    return EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    """Run the analysis; returns the process exit code (0 ok, 1 failed, 2 usage)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits; callers of main() want a code
        return int(exc.code or 0)
    local = local_path(args.traces)
    if local is not None and glob_free_prefix(str(local)) == str(local) and not local.exists():
        return _no_traces(args.traces)

    import json

    from pyspark.errors import AnalysisException

    from spark_analysis.analysis import Progress, run_analysis
    from spark_analysis.session import build_session

    progress = Progress()
    spark = None
    try:
        spark = build_session(args.master, args.shuffle_partitions, args.driver_memory)
        result = run_analysis(
            spark, args.traces, args.out, args.run, progress=progress, report=not args.no_report
        )
    except AnalysisException as exc:
        progress.done()
        if exc.getCondition() == "PATH_NOT_FOUND":
            return _no_traces(args.traces)
        return _failed(exc)
    except Exception as exc:
        progress.done()
        return _failed(exc)
    finally:
        if spark is not None:
            spark.stop()
    progress.done()
    if args.json:
        print(json.dumps(result.summary, indent=2))
    else:
        print(format_summary(result.summary))
    print(f"summary: {result.summary_path}")
    if result.report_path is not None:
        print(f"report: {result.report_path}")
    return EXIT_OK
