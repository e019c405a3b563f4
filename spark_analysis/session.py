"""A SparkSession set up for trace analysis: quiet, no UI, few shuffle partitions."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from pyspark.sql import SparkSession

APP_NAME = "overlay-trace-analysis"
DEFAULT_MASTER = "local[*]"


def log4j_config_path() -> Path:
    """The packaged log4j2 configuration (a real file: the JVM reads it by path)."""
    return Path(str(resources.files("spark_analysis") / "log4j2.properties"))


def jit_directives_path() -> Path:
    """The packaged compiler directives (:data:`JIT_DIRECTIVES`; read by the JVM by path)."""
    return Path(str(resources.files("spark_analysis") / "jit_directives.json"))


def _jvm_running() -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def is_local(master: str) -> bool:
    return master.startswith("local")


def default_shuffle_partitions(master: str) -> int:
    """Shuffle partitions: Spark's 200 makes every tiny aggregation 200 tasks.

    Locally two per core keeps both cores busy without per-task overhead dominating;
    on a cluster adaptive execution coalesces small partitions anyway.
    """
    if is_local(master):
        cores = os.cpu_count() or 2
        if master.startswith("local[") and master[6:-1].isdigit():
            cores = int(master[6:-1])
        return max(2, 2 * cores)
    return 8  # replaced once the session knows the cluster's cores


# Printed by the JVM itself (not log4j): Spark's launcher always adds the vector
# incubator module, and the JVM counts the compiler directives it read (JIT_DIRECTIVES);
# nothing can switch either off, so the JVM's stderr is filtered instead.
JVM_NOISE = (b"WARNING: Using incubator modules", b"1 compiler directives added")


def _pump(read_fd: int, write_fd: int) -> None:
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        pending = b""
        while chunk := pipe.read(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            kept = [line for line in lines if not line.startswith(JVM_NOISE)]
            if kept:
                os.write(write_fd, b"".join(line + b"\n" for line in kept))
        if pending and not pending.startswith(JVM_NOISE):
            os.write(write_fd, pending)


def _with_filtered_jvm_stderr(start: Callable[[], SparkSession]) -> SparkSession:
    """Run ``start`` (which launches the JVM) with fd 2 on a filtering pipe.

    The JVM keeps the pipe as its stderr for its whole life; a daemon thread copies
    every line but the known noise to the real stderr.
    """
    try:
        sys.stderr.flush()
        original = os.dup(2)
    except (OSError, ValueError):
        return start()
    read_fd, write_fd = os.pipe()
    threading.Thread(target=_pump, args=(read_fd, original), daemon=True).start()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    try:
        return start()
    finally:
        sys.stderr.flush()
        os.dup2(original, 2)


# A class-data archive (AppCDS) of the classes a Spark driver loads: a JVM started
# with it maps them instead of loading and verifying some twenty thousand classes,
# which halves session start and the first jobs (about 7 s here). The first run
# writes it when its JVM exits; later runs use it. The JVM checks that an archive
# fits its own build and class path and ignores it otherwise, so a stale one costs
# nothing. OVERLAY_SPARK_CDS=off disables it, or names another directory.
CDS_ENV = "OVERLAY_SPARK_CDS"
CDS_QUIET = "-Xlog:cds*=off"  # archive warnings (skipped classes) are not ours to show


def class_archive(java_home: str | None = None) -> Path | None:
    """Where the archive for this pyspark and this Java lives (None: disabled)."""
    setting = os.environ.get(CDS_ENV, "")
    if setting.lower() in ("off", "0", "no", "false"):
        return None
    import pyspark

    java = Path(java_home or os.environ.get("JAVA_HOME", "") or "/", "bin", "java")
    found = java if java.is_file() else Path(shutil.which("java") or "java")
    try:
        real = found.resolve()
        stamp = [f"{real}:{real.stat().st_mtime_ns}:{pyspark.__file__}"]
        # The JVM refuses the whole archive when any jar on the class path differs from
        # the one it was written with (a reinstalled pyspark, same version and path):
        # each jar's size and time are in the name, so such an archive is written anew.
        jars = Path(pyspark.__file__).parent / "jars"
        for jar in sorted(jars.glob("*.jar")):
            info = jar.stat()
            stamp.append(f"{jar.name}:{info.st_size}:{info.st_mtime_ns}")
    except OSError:
        return None
    digest = hashlib.sha1("\n".join(stamp).encode()).hexdigest()[:12]
    cache = Path(setting) if setting else Path.home() / ".cache" / "overlay" / "spark-cds"
    return cache / f"spark-{pyspark.__version__}-{digest}.jsa"


def _class_archive_options() -> str:
    """JVM options that use the archive, or write it at exit when there is none yet."""
    path = class_archive()
    if path is None:
        return ""
    if path.is_file():
        with contextlib.suppress(OSError):
            os.utime(path)  # in use: see _prune_archives
        return f"-XX:SharedArchiveFile={path} {CDS_QUIET}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return ""
    _prune_archives(path.parent)
    # Written under a name of this process's own, renamed once the JVM has exited, so
    # a run never maps a half-written archive of a concurrent one.
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    atexit.register(_finish_class_archive, partial, path)
    return f"-XX:ArchiveClassesAtExit={partial} {CDS_QUIET}"


# An archive is some 190 MB, and every pyspark or Java install gets its own (a venv
# set up again writes jars anew): when a new one is written, those unused this long are
# removed (each use touches its file), and all but the most recently used before it, so
# that the folder holds at most ARCHIVES_KEPT.
ARCHIVE_UNUSED_DAYS = 7
ARCHIVES_KEPT = 3


def _prune_archives(folder: Path, now: float | None = None) -> None:
    cutoff = (time.time() if now is None else now) - ARCHIVE_UNUSED_DAYS * 86400
    kept: list[tuple[float, Path]] = []
    for old in folder.glob("spark-*.jsa*"):
        try:
            used = old.stat().st_mtime
            if used < cutoff:
                old.unlink()
            elif old.suffix == ".jsa":
                kept.append((used, old))
        except OSError:
            pass
    for _, old in sorted(kept, reverse=True)[ARCHIVES_KEPT - 1:]:
        with contextlib.suppress(OSError):
            old.unlink()


def _finish_class_archive(partial: Path, path: Path) -> None:
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.stdin is not None:
        try:
            proc.stdin.close()  # the JVM exits on EOF, and dumps the archive then
            proc.wait(timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        if partial.is_file() and partial.stat().st_size > 0:
            os.replace(partial, path)
        else:
            partial.unlink(missing_ok=True)
    except OSError:
        pass


# The driver JVM (in local mode also the executor) collects with the throughput
# collector: G1's concurrent threads cost 3.5 s more than the parallel collector at 10M
# records (31.9 and 32.5 s against 28.1-28.9 s), whose pauses a batch job does not mind.
# It keeps both JIT compilers: C1 alone paid while the loading tasks wrote Parquet in
# Python, but Spark now converts and writes every record in the JVM, and at 10M records
# (local[2], load 1-3.6) a run took 87.1 and 81.9 s with C2 against 100.1 and 101.5 s
# with C1 only (runs alternated). Cluster executors run long and keep the defaults.
#
# Arrow's bounds and reference-count checks on every value read are off: Spark reads
# each record the Python workers parse from their Arrow batches, and the checks
# (ArrowBuf.ensureAccessible/checkIndex) were 6.6% of the JVM's CPU samples while
# loading 10M records (JFR). The batches come from pyarrow in our own workers, and Spark
# asks isNullAt before every get. Loading 10M records (local[2]): tasks 44.8 against
# 46.7 CPU s, loading 88.4 against 91.4 CPU s (one run each).
ARROW_UNCHECKED = " ".join(
    ("-Darrow.enable_unsafe_memory_access=true", "-Darrow.enable_null_check_for_get=false")
)
# The JIT compiles at three times Java's invocation and loop thresholds: its compilers
# took 30 of 131 CPU s at 10M records (C2 24), mostly on code that runs a few
# thousand times (planning, Janino, task (de)serialization, the closure cleaner's ASM),
# while the tasks' loops pass any threshold within their first rows. 10M records, runs
# at once with Java's thresholds (load 12-19): 139.3 -> 135.2, 149.4 -> 144.0 and
# 132.4 -> 130.5 CPU s (the compilers 31.2 -> 26.0, 34.9 -> 27.5, 32.1 -> 26.2); ten
# times: 144.6 against 149.4 (compilers 20.8, but tasks 5.3 s and planning 3 s more).
JIT_THRESHOLDS = "-XX:CompileThresholdScaling=3"
# C2 compiles no method of the code that runs per query or per task rather than per
# row (jit_directives.json): Janino compiling the generated code, ASM (the closure
# cleaner, lambda forms), Java serialization of tasks and their results, Catalyst's
# analysis, optimization and planning, adaptive execution. Such methods stay at C1,
# whose code is slower but far cheaper to make; the per-row code (generated classes,
# Arrow, the sorter, Parquet) still gets C2. The compilations of a 1M-record run
# (-XX:+LogCompilation) put Janino, Java serialization and ASM at about half of C2's
# time. CPU seconds of the process tree, runs at once with and without (load 8-15):
# 1M records 47.0 against 49.3; 10M 102.7 against 118.1. The JVM prints the count of
# directives it read on its stdout, which is the user's: VM output goes to stderr,
# where JVM_NOISE drops that line.
JIT_DIRECTIVES = (
    "-XX:+UnlockDiagnosticVMOptions -XX:+DisplayVMOutputToStderr "
    "-XX:CompilerDirectivesFile={path}"
)
DRIVER_JVM = f"-XX:+UseParallelGC {ARROW_UNCHECKED} {JIT_THRESHOLDS}"


def quiet_python_warnings() -> None:
    # pyspark warns on import about pandas versions it has not certified; the analysis
    # only uses Arrow record batches and plain pandas frames, which work.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark\..*")
    warnings.filterwarnings("ignore", category=UserWarning, module=r"pyspark\..*")


def build_session(
    master: str = DEFAULT_MASTER,
    shuffle_partitions: int | None = None,
    driver_memory: str | None = None,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Create (or return the already running) SparkSession for the analysis.

    JVM options only take effect when this call starts the JVM; an existing session
    (as in the test suite) is returned as it is, with the SQL settings applied.
    """
    quiet_python_warnings()
    log4j = log4j_config_path()
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j}"
    driver_jvm = f"{DRIVER_JVM} {JIT_DIRECTIVES.format(path=jit_directives_path())}"
    # Workers must run the same Python as the driver (the virtualenv with pyarrow, pandas
    # and the matching package), unless the user chose one explicitly.
    # pyspark reads PYSPARK_PYTHON from the environment (the spark.pyspark.python setting
    # only reaches spark-submit), so set it for the workers this process starts.
    python = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    partitions = shuffle_partitions or default_shuffle_partitions(master)
    builder = (
        SparkSession.builder.master(master)
        .appName(APP_NAME)
        .config("spark.driver.extraJavaOptions", f"{java_opts} {driver_jvm}")
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", python)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # Frames the analysis keeps (persist) are read two to four times, then dropped:
        # compressing the cached columns (gathering each column's statistics to pick an
        # encoding) cost more CPU than those few reads gain (the 10M-record analysis
        # after loading: 29.3 and 30.2 s against 32.6 and 31.3 s compressed).
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
        # Spark describes every query's plan, and again at each of adaptive execution's
        # re-plans, for the UI and the event log, whether or not one is on; the
        # formatted description walks the plan once more to number its operators (a
        # 10M-record run: 30 descriptions, the deliveries' over 200,000 characters).
        .config("spark.sql.ui.explainMode", "simple")
        # A 10M-record run sorts and joins a few million rows; Spark's 1g default spills.
        .config("spark.driver.memory", driver_memory or "2g")
        # Local paths through Hadoop's raw local file system, not its checksummed one:
        # that one writes a .crc file beside every file of records/ and tables/ (a CRC
        # pass over all the bytes, and twice the files, each with a chmod process where
        # Hadoop has no native library) and checks every byte the steps read back
        # against it; summary.json and report.html, written by Python, never had one.
        # 10M records, runs at once (load 10-12): 99.7 against 102.3 CPU s.
        .config("spark.hadoop.fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
    )
    if not is_local(master):
        builder = builder.config("spark.executor.memory", "1g")
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    if SparkSession.getActiveSession() is None and not _jvm_running():
        cds = _class_archive_options()
        if cds and not (extra_conf or {}).get("spark.driver.extraJavaOptions"):
            builder = builder.config(
                "spark.driver.extraJavaOptions", f"{java_opts} {driver_jvm} {cds}"
            )
        spark = _with_filtered_jvm_stderr(builder.getOrCreate)
    else:
        spark = builder.getOrCreate()
    if shuffle_partitions is None and not is_local(master):
        # Two per core the cluster gave us; adaptive execution merges small ones.
        partitions = max(2, 2 * spark.sparkContext.defaultParallelism)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    spark.sparkContext.setLogLevel("ERROR")
    return spark
