"""Traces read from, and results written to, URIs: the loader goes through Hadoop's
file systems, so ``ftp://`` (which cannot seek) and ``file:`` URIs work as local paths.

An FTP server (pyftpdlib) on loopback serves the synthetic trace directory; the CLI
reads it by ``ftp://user:pass@127.0.0.1:PORT/traces`` and must give the local summary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_analysis.analysis import run_analysis
from tests.spark.conftest import LocalRun

pyftpdlib = pytest.importorskip("pyftpdlib")

from pyftpdlib.authorizers import DummyAuthorizer  # noqa: E402
from pyftpdlib.handlers import FTPHandler  # noqa: E402
from pyftpdlib.servers import ThreadedFTPServer  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.integration]

JOB_TIMEOUT = 300.0
USER, PASSWORD = "reader", "s3cret-word"


def _serve(home: Path) -> tuple[ThreadedFTPServer, threading.Thread]:
    authorizer = DummyAuthorizer()
    authorizer.add_user(USER, PASSWORD, str(home), perm="elr")  # read only
    handler = type("TraceHandler", (FTPHandler,), {"authorizer": authorizer})
    # A thread per session: the single-threaded server stopped answering new sessions
    # under Hadoop's many short ones (a login left unread while it waited in epoll).
    server = ThreadedFTPServer(("127.0.0.1", 0), handler)  # listening once constructed
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"handle_exit": False}, name="ftp", daemon=True
    )
    thread.start()
    return server, thread


@pytest.fixture(scope="module")
def ftp_root(match_all_run: LocalRun) -> Iterator[str]:
    """``ftp://user:pass@127.0.0.1:PORT`` serving the folder that holds ``traces``."""
    server, thread = _serve(match_all_run.traces.parent)
    try:
        yield f"ftp://{USER}:{PASSWORD}@127.0.0.1:{server.address[1]}"
    finally:
        server.close_all()
        thread.join(timeout=10)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run(
        [sys.executable, "-m", "spark_analysis", *args],
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
        env=env,
        cwd=cwd,
    )


def test_traces_over_ftp_give_the_local_summary(
    match_all_run: LocalRun, ftp_root: str, tmp_path: Path
) -> None:
    assert match_all_run.traces.name == "traces"
    out = tmp_path / "out"
    proc = _cli(
        "--traces", f"{ftp_root}/traces", "--out", str(out), "--run", "synthetic", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary == json.loads(json.dumps(match_all_run.summary))
    # the generator's files include rotated ones and ones in subfolders
    assert summary["bad_lines"] == match_all_run.bad_lines > 0
    assert {s["file"] for s in summary["bad_line_samples"]} <= {
        p.relative_to(match_all_run.traces).as_posix()
        for p in match_all_run.traces.rglob("*.jsonl*")
    }
    assert (out / "report.html").is_file()
    for text in (proc.stdout, proc.stderr, (out / "report.html").read_text()):
        assert PASSWORD not in text


def test_a_missing_uri_is_a_usage_error(ftp_root: str, tmp_path: Path) -> None:
    proc = _cli("--traces", f"{ftp_root}/no-such-dir", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "no such trace path: ftp://127.0.0.1:" in proc.stderr
    assert PASSWORD not in proc.stderr


def test_outputs_go_to_a_uri_through_hadoop(
    spark: SparkSession, match_all_run: LocalRun, tmp_path: Path
) -> None:
    """A ``file:`` URI is written as any URI is: Spark's writers for the tables,
    Hadoop's FileSystem (by the JVM gateway) for summary.json and report.html."""
    out = tmp_path / "out"
    # The session writes local paths through Hadoop's raw local file system; for this
    # run its checksummed one, which leaves a .crc beside each file it writes: the mark
    # that summary.json went through Hadoop, not Python.
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    kept = {key: hadoop.get(key) for key in ("fs.file.impl", "fs.file.impl.disable.cache")}
    hadoop.set("fs.file.impl", "org.apache.hadoop.fs.LocalFileSystem")
    hadoop.set("fs.file.impl.disable.cache", "true")
    try:
        result = run_analysis(spark, str(match_all_run.traces), out.as_uri(), run="synthetic")
    finally:
        for key, value in kept.items():
            if value is None:
                hadoop.unset(key)
            else:
                hadoop.set(key, value)
    assert result.summary_path == f"{out.as_uri()}/summary.json"
    assert json.loads((out / "summary.json").read_text()) == json.loads(
        json.dumps(match_all_run.summary)
    )
    assert (out / ".summary.json.crc").is_file()  # Hadoop's file system wrote it
    assert (out / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in (out / "records").glob("ev=*"))
    assert (out / "tables" / "node_stress" / "_SUCCESS").is_file()
