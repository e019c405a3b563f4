"""One SparkSession for the whole Spark suite (local[2], two shuffle partitions)."""

from __future__ import annotations

from collections.abc import Iterator

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
