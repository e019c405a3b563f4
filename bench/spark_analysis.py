"""Spark trace analysis throughput, end to end.

For each size, writes a synthetic trace directory (spark_analysis.synthetic: 256
nodes, 8 topics of which 2 gossip, faults and malformed lines included), then runs
``python -m spark_analysis`` on it as a separate process, exactly as a user would
(JVM start, parse, Parquet, every metric, summary.json and report.html), and reports:

- records per second end to end (records / wall time of that process);
- peak resident memory of the JVM (sampled from /proc every 0.2 s, the driver JVM and
  any JVM it starts) and of the Python workers;
- how the rate at the largest size compares with the smallest (linear scaling keeps
  the rate constant);
- as a floor, the rate of a plain ``spark.read.json`` with the explicit schema over
  the same files (every field parsed, nothing else: ``write.format("noop")``), also as
  a process of its own, session start included.

Run: .venv/bin/python bench/spark_analysis.py [--records 1000000,10000000]
     [--master local[2]] [--work DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

# This file shares its name with the package: drop its own folder from the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from spark_analysis.synthetic import Spec, generate  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _rss_and_name(pid: int) -> tuple[int, str]:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
            rss = int(fh.read().split()[1]) * PAGE
        with open(f"/proc/{pid}/comm", encoding="ascii") as fh:
            name = fh.read().strip()
    except OSError:
        return 0, ""
    return rss, name


@dataclass
class Peak:
    jvm: int = 0
    python_workers: int = 0


def _sample(root: int, peak: Peak, stop: threading.Event) -> None:
    """Peak RSS of the JVMs and of the Python workers below ``root``."""
    while not stop.is_set():
        kids = _children()
        todo, jvm, workers = list(kids.get(root, [])), 0, 0
        while todo:
            pid = todo.pop()
            todo.extend(kids.get(pid, []))
            rss, name = _rss_and_name(pid)
            if name == "java":
                jvm += rss
            elif name.startswith("python"):
                workers += rss
        peak.jvm = max(peak.jvm, jvm)
        peak.python_workers = max(peak.python_workers, workers)
        stop.wait(0.2)


@dataclass
class Result:
    records: int
    bad_lines: int
    gen_seconds: float
    seconds: float
    peak: Peak
    trace_bytes: int
    floor_seconds: float = float("nan")

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def floor_rate(self) -> float:
        return self.records / self.floor_seconds


def read_json_floor(traces: str, master: str) -> None:
    """In a process of its own: Spark's JSON reader with the explicit schema over the
    trace files, every field parsed (the noop sink keeps the columns)."""
    from pyspark.sql import types as T

    from spark_analysis.load import TRACE_GLOB
    from spark_analysis.schema import FIELDS
    from spark_analysis.session import build_session

    spark = build_session(master)
    schema = T.StructType([T.StructField(name, kind) for name, kind in FIELDS])
    (
        spark.read.schema(schema)
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", TRACE_GLOB)
        .json(traces)
        .write.format("noop")
        .mode("overwrite")
        .save()
    )
    spark.stop()


def floor_seconds(traces: Path, master: str) -> float:
    started = time.monotonic()
    cmd = [sys.executable, __file__, "--floor-of", str(traces), "--master", master]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"spark.read.json failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return time.monotonic() - started


def run_one(n: int, master: str, work: Path, seed: int) -> Result:
    traces, out = work / f"traces-{n}", work / f"out-{n}"
    shutil.rmtree(traces, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    started = time.monotonic()
    info = generate(
        traces,
        Spec(
            seed=seed,
            nodes=256,
            topics=8,
            gossip_topics=2,
            records=n,
            rotate_bytes=64 << 20,
            subdir_share=0.1,
            filters=True,
        ),
    )
    gen = time.monotonic() - started
    # The generator leaves its gigabytes as dirty pages; their write-back (disk and
    # kernel CPU) is not the analysis' cost, which starts on traces already on disk.
    os.sync()
    size = sum(p.stat().st_size for p in info.files)
    print(
        f"  generated {info.records:,} records ({size / 1e6:.0f} MB, "
        f"{info.bad_lines} malformed lines) in {gen:.1f} s",
        flush=True,
    )
    cmd = [
        sys.executable,
        "-m",
        "spark_analysis",
        "--traces",
        str(traces),
        "--out",
        str(out),
        "--master",
        master,
        "--no-report",
    ]
    peak, stop = Peak(), threading.Event()
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = threading.Thread(target=_sample, args=(proc.pid, peak, stop), daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    seconds = time.monotonic() - started
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"analysis failed ({proc.returncode}):\n{stderr[-4000:]}")
    print("  " + "\n  ".join(stdout.strip().splitlines()[:3]), flush=True)
    result = Result(info.records, info.bad_lines, gen, seconds, peak, size)
    result.floor_seconds = floor_seconds(traces, master)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--records",
        default="1000000,10000000",
        help="comma-separated record counts (default 1M and 10M)",
    )
    p.add_argument("--master", default="local[2]")
    p.add_argument("--work", default=None, help="where to write traces (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the traces and outputs")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--floor-of", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.floor_of:
        read_json_floor(args.floor_of, args.master)
        return 0
    sizes = [int(x) for x in args.records.split(",") if x]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="spark-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"master {args.master}, {os.cpu_count()} cpus, filters: the FILTERS.md mix")
    results = []
    try:
        for n in sizes:
            print(f"{n:,} records:", flush=True)
            r = run_one(n, args.master, work, args.seed)
            results.append(r)
            print(
                f"  end to end {r.seconds:.1f} s = {r.rate:,.0f} records/s; peak RSS "
                f"JVM {r.peak.jvm / 2**20:,.0f} MiB, Python workers "
                f"{r.peak.python_workers / 2**20:,.0f} MiB",
                flush=True,
            )
            print(
                f"  floor, plain spark.read.json (explicit schema, own process) "
                f"{r.floor_seconds:.1f} s = {r.floor_rate:,.0f} records/s",
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(
        "\nrecords       seconds   records/s   JVM peak MiB   py workers MiB"
        "   read.json s   read.json rec/s"
    )
    for r in results:
        print(
            f"{r.records:>11,}  {r.seconds:8.1f}  {r.rate:10,.0f}  {r.peak.jvm / 2**20:13,.0f}"
            f"  {r.peak.python_workers / 2**20:15,.0f}  {r.floor_seconds:12.1f}"
            f"  {r.floor_rate:16,.0f}"
        )
    if len(results) > 1:
        first, last = results[0], results[-1]
        print(
            f"rate at {last.records:,} / rate at {first.records:,}: "
            f"{last.rate / first.rate:.2f} (1.00 = linear)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
