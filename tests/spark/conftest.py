"""One SparkSession for the whole Spark suite (local[2], two shuffle partitions)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from spark_analysis.session import build_session

    session = build_session("local[2]", shuffle_partitions=2, driver_memory="1g")
    yield session
    session.stop()


@dataclass
class LocalRun:
    """A synthetic trace directory and the summary of its local analysis."""

    traces: Path
    out: Path
    bad_lines: int
    summary: dict[str, Any]


@pytest.fixture(scope="session")
def match_all_run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> LocalRun:
    """Synthetic traces whose filters are all empty (no filter parser needed), analyzed
    once on local[2]; shared by the end-to-end and the cluster tests."""
    from spark_analysis.analysis import run_analysis
    from spark_analysis.synthetic import Spec, generate

    base = tmp_path_factory.mktemp("match_all")
    info = generate(base / "traces", Spec(seed=3, events=150, filters=False))
    result = run_analysis(spark, str(info.out_dir), base / "out", run="synthetic")
    return LocalRun(info.out_dir, base / "out", info.bad_lines, result.summary)
