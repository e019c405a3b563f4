"""Spark trace analysis throughput, end to end.

For each size, writes a synthetic trace directory (spark_analysis.synthetic: 256
nodes, 8 topics of which 2 gossip, faults and malformed lines included), then runs
``python -m spark_analysis`` on it as a separate process, exactly as a user would
(JVM start, parse, Parquet, every metric, summary.json and report.html), and reports:

- records per second end to end (records / wall time of that process);
- CPU seconds of the whole process tree (the command, its JVM and the Python workers:
  user and system time of each process, sampled from /proc every 0.2 s), the figure to
  compare on a shared machine, where wall time follows the other users' load; the load
  average at start and end is printed beside it;
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
from dataclasses import dataclass, field
from pathlib import Path

# This file shares its name with the package: drop its own folder from the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from spark_analysis.synthetic import Spec, generate  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def _children() -> tuple[dict[int, list[int]], dict[int, int]]:
    """Each process' children, and each process' CPU time so far (user + system, in
    clock ticks; not its children's, which are counted as processes of their own)."""
    kids: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        kids.setdefault(int(fields[1]), []).append(int(entry.name))
        ticks[int(entry.name)] = int(fields[11]) + int(fields[12])
    return kids, ticks


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
    # Latest CPU ticks seen of each process of the tree (the root included); a process
    # that ends keeps what it had at the last sample (up to 0.2 s of it is missed).
    ticks: dict[int, int] = field(default_factory=dict)

    @property
    def cpu_seconds(self) -> float:
        return sum(self.ticks.values()) / TICKS


def _sample(root: int, peak: Peak, stop: threading.Event) -> None:
    """Peak RSS of the JVMs and of the Python workers below ``root``, and the CPU time
    of every process of the tree."""
    while not stop.is_set():
        kids, ticks = _children()
        todo, jvm, workers = [root], 0, 0
        while todo:
            pid = todo.pop()
            todo.extend(kids.get(pid, []))
            if pid in ticks:
                peak.ticks[pid] = max(peak.ticks.get(pid, 0), ticks[pid])
            if pid == root:
                continue
            rss, name = _rss_and_name(pid)
            if name == "java":
                jvm += rss
            elif name.startswith("python"):
                workers += rss
        peak.jvm = max(peak.jvm, jvm)
        peak.python_workers = max(peak.python_workers, workers)
        stop.wait(0.2)


def _load() -> str:
    with open("/proc/loadavg", encoding="ascii") as fh:
        return fh.read().split()[0]


@dataclass
class Measured:
    """One process' run: wall seconds, CPU seconds of its tree, load at start and end."""

    seconds: float
    peak: Peak
    load: tuple[str, str]
    stdout: str

    @property
    def cpu_seconds(self) -> float:
        return self.peak.cpu_seconds


def measure(cmd: list[str], what: str) -> Measured:
    """Run ``cmd`` and sample its process tree until it ends."""
    peak, stop = Peak(), threading.Event()
    load_before = _load()
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = threading.Thread(target=_sample, args=(proc.pid, peak, stop), daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    seconds = time.monotonic() - started
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed ({proc.returncode}):\n{stderr[-4000:]}")
    return Measured(seconds, peak, (load_before, _load()), stdout)


@dataclass
class Result:
    records: int
    bad_lines: int
    gen_seconds: float
    trace_bytes: int
    analysis: Measured
    floor: Measured

    @property
    def seconds(self) -> float:
        return self.analysis.seconds

    @property
    def peak(self) -> Peak:
        return self.analysis.peak

    @property
    def rate(self) -> float:
        return self.records / self.analysis.seconds

    @property
    def floor_rate(self) -> float:
        return self.records / self.floor.seconds


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


def floor_run(traces: Path, master: str) -> Measured:
    cmd = [sys.executable, __file__, "--floor-of", str(traces), "--master", master]
    return measure(cmd, "spark.read.json")


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
    analysis = measure(cmd, "analysis")
    print("  " + "\n  ".join(analysis.stdout.strip().splitlines()[:3]), flush=True)
    return Result(info.records, info.bad_lines, gen, size, analysis, floor_run(traces, master))


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
            a, f = r.analysis, r.floor
            print(
                f"  end to end {a.seconds:.1f} s = {r.rate:,.0f} records/s, "
                f"{a.cpu_seconds:.1f} CPU s (load {a.load[0]} -> {a.load[1]}); peak RSS "
                f"JVM {r.peak.jvm / 2**20:,.0f} MiB, Python workers "
                f"{r.peak.python_workers / 2**20:,.0f} MiB",
                flush=True,
            )
            print(
                f"  floor, plain spark.read.json (explicit schema, own process) "
                f"{f.seconds:.1f} s = {r.floor_rate:,.0f} records/s, "
                f"{f.cpu_seconds:.1f} CPU s (load {f.load[0]} -> {f.load[1]})",
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(
        "\nrecords       seconds   records/s   CPU s   JVM peak MiB   py workers MiB"
        "   read.json s   read.json rec/s   read.json CPU s"
    )
    for r in results:
        print(
            f"{r.records:>11,}  {r.seconds:8.1f}  {r.rate:10,.0f}  {r.analysis.cpu_seconds:6.1f}"
            f"  {r.peak.jvm / 2**20:13,.0f}  {r.peak.python_workers / 2**20:15,.0f}"
            f"  {r.floor.seconds:12.1f}  {r.floor_rate:16,.0f}  {r.floor.cpu_seconds:16.1f}"
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
