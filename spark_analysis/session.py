"""A SparkSession set up for trace analysis: quiet, no UI, few shuffle partitions."""

from __future__ import annotations

import os
import sys
import threading
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


# Printed by the JVM itself (not log4j) because Spark's launcher always adds the vector
# incubator module; nothing can switch it off, so the JVM's stderr is filtered instead.
JVM_NOISE = (b"WARNING: Using incubator modules",)


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
    # Workers must run the same Python as the driver (the virtualenv with pyarrow, pandas
    # and the matching package), unless the user chose one explicitly.
    # pyspark reads PYSPARK_PYTHON from the environment (the spark.pyspark.python setting
    # only reaches spark-submit), so set it for the workers this process starts.
    python = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    partitions = shuffle_partitions or default_shuffle_partitions(master)
    builder = (
        SparkSession.builder.master(master)
        .appName(APP_NAME)
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", python)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # A 10M-record run sorts and joins a few million rows; Spark's 1g default spills.
        .config("spark.driver.memory", driver_memory or "2g")
    )
    if not is_local(master):
        builder = builder.config("spark.executor.memory", "1g")
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    if SparkSession.getActiveSession() is None and not _jvm_running():
        spark = _with_filtered_jvm_stderr(builder.getOrCreate)
    else:
        spark = builder.getOrCreate()
    if shuffle_partitions is None and not is_local(master):
        # Two per core the cluster gave us; adaptive execution merges small ones.
        partitions = max(2, 2 * spark.sparkContext.defaultParallelism)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    spark.sparkContext.setLogLevel("ERROR")
    return spark
