"""The CLI against a Spark standalone master and worker on loopback: same summary as local.

The master and worker are started by the test with ``spark-class`` from the installed
pyspark, on free ports, waited for with deadlines, and stopped at the end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pyspark
import pytest

from tests.spark.conftest import LocalRun

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SPARK_HOME = Path(pyspark.__file__).parent
START_DEADLINE = 90.0
JOB_TIMEOUT = 300.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(
    what: str,
    check: Callable[[], bool],
    procs: list[subprocess.Popen[bytes]],
    deadline: float = START_DEADLINE,
) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{what}: process {p.args} exited with {p.returncode}")
        if check():
            return
        time.sleep(0.2)  # polling interval, not a guess: the condition is re-checked
    raise AssertionError(f"{what}: not ready within {deadline:.0f}s")


def master_state(ui_port: int) -> dict[str, object]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
            return json.loads(r.read())
    except OSError:
        return {}


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("standalone")
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(logs),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_NO_DAEMONIZE": "1",
    }
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, ui = free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(logs / "master.log", "wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        spark_class,
                        "org.apache.spark.deploy.master.Master",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--webui-port",
                        str(ui),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
        wait_for("master", lambda: master_state(ui).get("status") == "ALIVE", procs)
        with open(logs / "worker.log", "wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        f"spark://127.0.0.1:{port}",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(free_port()),
                        "--webui-port",
                        str(free_port()),
                        "--cores",
                        "2",
                        "--memory",
                        "2g",
                        "--work-dir",
                        str(logs / "work"),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
        wait_for("worker", lambda: int(master_state(ui).get("aliveworkers", 0) or 0) >= 1, procs)
        yield f"spark://127.0.0.1:{port}"
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_cluster_run_gives_the_local_summary(
    match_all_run: LocalRun, standalone: str, tmp_path: Path
) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    out = tmp_path / "cluster"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_analysis",
            "--traces",
            str(match_all_run.traces),
            "--out",
            str(out),
            "--master",
            standalone,
            "--run",
            "synthetic",
            "--no-report",  # the report is checked by the end-to-end test
        ],
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # quiet: no JVM or log4j chatter, and stdout ends with where things are
    assert proc.stderr == "", proc.stderr[-3000:]
    out_lines = proc.stdout.strip().splitlines()
    assert out_lines[-1] == f"summary: {out / 'summary.json'}"
    cluster = json.loads((out / "summary.json").read_text())
    assert cluster == json.loads(json.dumps(match_all_run.summary))
    assert cluster["overall"]["delivered"] > 0
