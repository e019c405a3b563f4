"""Small chispa-style DataFrame assertions."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T


def _norm(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if hasattr(value, "asDict"):
        return tuple(_norm(v) for v in value)
    return value


def rows_of(df: DataFrame, columns: Sequence[str] | None = None) -> list[tuple[Any, ...]]:
    cols = list(columns or df.columns)
    return [tuple(_norm(r[c]) for c in cols) for r in df.select(*cols).collect()]


def _key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in row)


def assert_df_equal(
    actual: DataFrame,
    expected: DataFrame | Iterable[tuple[Any, ...]],
    columns: Sequence[str] | None = None,
    ignore_order: bool = True,
    check_schema: bool = False,
) -> None:
    """Rows (and optionally schema) equal; on failure show both sides' differing rows."""
    cols = list(columns or actual.columns)
    if isinstance(expected, DataFrame):
        if check_schema:
            a = [(f.name, f.dataType) for f in actual.select(*cols).schema.fields]
            e = [(f.name, f.dataType) for f in expected.select(*cols).schema.fields]
            assert a == e, f"schemas differ:\n  actual   {a}\n  expected {e}"
        exp_rows = rows_of(expected, cols)
    else:
        exp_rows = [tuple(_norm(v) for v in r) for r in expected]
    act_rows = rows_of(actual, cols)
    if ignore_order:
        act_rows, exp_rows = sorted(act_rows, key=_key), sorted(exp_rows, key=_key)
    if act_rows != exp_rows:
        only_a = [r for r in act_rows if r not in exp_rows]
        only_e = [r for r in exp_rows if r not in act_rows]
        raise AssertionError(
            f"DataFrames differ on columns {cols}\n"
            f"  only in actual:   {only_a}\n  only in expected: {only_e}\n"
            f"  actual rows: {len(act_rows)}, expected rows: {len(exp_rows)}"
        )


def records_df(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    """Normalized records from dicts (missing fields null; src_* from the list order)."""
    from spark_analysis.schema import LIVE_RANK, NORMALIZED_SCHEMA

    full = []
    for i, r in enumerate(rows):
        d = {"src_rank": LIVE_RANK, "src_row": i, **r}
        full.append(tuple(d.get(f.name) for f in NORMALIZED_SCHEMA.fields))
    return spark.createDataFrame(full, NORMALIZED_SCHEMA)


def schema(*fields: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(n, t) for n, t in fields])
