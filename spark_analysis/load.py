"""Reading trace files: lines -> typed records, malformed lines counted, Parquet by ``ev``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from spark_analysis.schema import (
    CORRUPT,
    FIELDS,
    LIVE_RANK,
    NORMALIZED_SCHEMA,
    RECORD_SCHEMA,
    REQUIRED,
    Ev,
)

TRACE_GLOB = "*.jsonl*"
BAD_SAMPLE_SIZE = 20

# Stricter than Spark's defaults, which accept JSON that the contract does not:
# single-quoted strings and the NaN/Infinity tokens.
JSON_OPTIONS = {
    "columnNameOfCorruptRecord": CORRUPT,
    "mode": "PERMISSIVE",
    "allowSingleQuotes": "false",
    "allowNonNumericNumbers": "false",
    "allowUnquotedFieldNames": "false",
    "allowNumericLeadingZeros": "false",
}


@dataclass
class LoadResult:
    """What loading found: the records (read back from Parquet) and the line counts."""

    records: DataFrame
    lines: int
    bad_lines: int
    record_count: int
    bad_samples: list[dict[str, str]] = field(default_factory=list)


def read_lines(spark: SparkSession, path: str) -> DataFrame:
    """Every line of every ``*.jsonl*`` file under ``path``, with where it came from."""
    raw = (
        spark.read.option("recursiveFileLookup", "true")
        .option("pathGlobFilter", TRACE_GLOB)
        .text(path)
    )
    file_path = F.col("_metadata.file_path")
    rotated = F.regexp_extract(F.col("_metadata.file_name"), r"\.jsonl\.(\d+)", 1)
    return raw.select(
        F.col("value"),
        file_path.alias("src_file"),
        F.when(rotated == "", F.lit(LIVE_RANK)).otherwise(rotated.cast("int")).alias("src_rank"),
        F.col("_metadata.file_block_start").alias("src_block"),
        # Grows along each split, so with src_block it gives the line order in a file.
        F.monotonically_increasing_id().alias("src_row"),
    )


def _json_string_field(name: str) -> Column:
    """True when the line really has ``"name": "<parsed value>"``.

    Spark's JSON reader turns any scalar into text for a string field (``"node": 5``
    reads as ``"5"``); the required text fields must be JSON strings, so look for the
    quoted value in the raw line (compact or with a space after the colon).
    """
    value = F.col(name)
    compact = F.concat(F.lit(f'"{name}":"'), value, F.lit('"'))
    spaced = F.concat(F.lit(f'"{name}": "'), value, F.lit('"'))
    return (F.instr("value", compact) > 0) | (F.instr("value", spaced) > 0)


def _attrs_is_object() -> Column:
    # Only publish records carry attrs, so the second parse touches about 1% of lines.
    kind = F.schema_of_variant(F.variant_get(F.try_parse_json("value"), "$.attrs", "variant"))
    return kind.startswith("OBJECT")


def parse_lines(lines: DataFrame) -> DataFrame:
    """Typed fields for every line plus ``bad_reason`` (null for a good record)."""
    parsed = lines.withColumn("r", F.from_json("value", RECORD_SCHEMA, JSON_OPTIONS))
    parsed = parsed.select(
        "*", *[F.col(f"r.{name}").alias(name) for name, _ in FIELDS], F.col(f"r.{CORRUPT}")
    )
    all_null = F.col("ts").isNull() & F.col("node").isNull() & F.col("ev").isNull()
    missing = F.lit(False)
    for name in REQUIRED:
        missing = missing | F.col(name).isNull()
    reason = (
        F.when(F.trim("value") == "", F.lit("empty line"))
        .when(F.col(CORRUPT).isNotNull() & all_null, F.lit("not a JSON object"))
        .when(F.col(CORRUPT).isNotNull(), F.lit("field of the wrong type"))
        .when(missing, F.lit("missing ts, node or ev"))
        .when(F.isnan("ts") | F.col("ts").isin(float("inf"), float("-inf")), F.lit("ts not finite"))
        .when(~_json_string_field("node") | ~_json_string_field("ev"), F.lit("node or ev not text"))
        .when(
            (F.col("ev") == Ev.PUBLISH) & F.col("attrs").isNotNull() & ~_attrs_is_object(),
            F.lit("attrs not an object"),
        )
    )
    return parsed.withColumn("bad_reason", reason).drop("r", CORRUPT)


def normalize(parsed: DataFrame, run: str | None = None) -> DataFrame:
    """Good records only, in the normalized column order, optionally one run."""
    good = parsed.filter(F.col("bad_reason").isNull())
    if run is not None:
        good = good.filter(F.col("run") == run)
    return good.select(*NORMALIZED_SCHEMA.fieldNames())


def load_traces(
    spark: SparkSession, path: str, out_dir: str | Path, run: str | None = None
) -> LoadResult:
    """Parse every trace line once, write good records as Parquet by ``ev``, read back.

    Counting happens in the same pass as the write (an Observation), so the text is
    parsed once; later steps read only the ``ev`` partitions they need.
    """
    parsed = parse_lines(read_lines(spark, path))
    is_bad = F.col("bad_reason").isNotNull()
    keep = ~is_bad if run is None else (~is_bad & (F.col("run") == run))
    obs = Observation("load")
    observed = parsed.observe(
        obs,
        F.count(F.lit(1)).alias("lines"),
        F.sum(is_bad.cast("long")).alias("bad_lines"),
        F.sum(keep.cast("long")).alias("records"),
    )
    target = str(Path(out_dir) / "records")
    # Up to one writer per ev value at a time avoids sorting every task's rows by ev.
    spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", "24")
    normalize(observed, run).write.mode("overwrite").partitionBy("ev").parquet(target)
    metrics = obs.get
    lines = int(metrics.get("lines") or 0)
    bad = int(metrics.get("bad_lines") or 0)
    kept = int(metrics.get("records") or 0)
    samples: list[dict[str, str]] = []
    if bad:
        rows = (
            parsed.filter(is_bad)
            .select("src_file", "value", "bad_reason")
            .limit(BAD_SAMPLE_SIZE)
            .collect()
        )
        samples = [
            {"file": r["src_file"], "line": r["value"][:300], "reason": r["bad_reason"]}
            for r in rows
        ]
    records = read_records(spark, target)
    return LoadResult(records, lines, bad, kept, samples)


def read_records(spark: SparkSession, parquet_dir: str) -> DataFrame:
    """The normalized records written by :func:`load_traces` (ev comes back last)."""
    if not any(Path(parquet_dir).glob("ev=*")):
        return spark.createDataFrame([], NORMALIZED_SCHEMA)
    return spark.read.schema(NORMALIZED_SCHEMA).parquet(parquet_dir)


def of_type(records: DataFrame, ev: str) -> DataFrame:
    """Records of one type; on Parquet this reads only that partition."""
    return records.filter(F.col("ev") == ev)
