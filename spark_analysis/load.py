"""Reading trace files: lines -> typed records, malformed lines counted, Parquet by ``ev``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from spark_analysis.schema import (
    CORRUPT,
    LIVE_RANK,
    NORMALIZED_SCHEMA,
    RECORD_SCHEMA,
    REQUIRED,
    Ev,
)

TRACE_GLOB = "*.jsonl*"
BAD_REASONS = (
    "not a JSON object",
    "field of the wrong type",
    "empty line",
    "missing ts, node or ev",
    "ts not finite",
    "node or ev not text",
    "attrs not an object",
)

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


JSON_OPTIMIZATION = "spark.sql.optimizer.enableJsonExpressionOptimization"


@dataclass
class LoadResult:
    """What loading found: the records (read back from Parquet) and the line counts."""

    records: DataFrame
    lines: int
    bad_lines: int
    record_count: int
    bad_samples: list[dict[str, str]] = field(default_factory=list)
    bad_by_reason: dict[str, int] = field(default_factory=dict)


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


def _quoted(name: str, sep: str) -> Column:
    return F.concat(F.lit(f'"{name}"{sep}"'), F.col(name), F.lit('"'))


def _node_and_ev_are_strings() -> Column:
    """True when the line really has ``"node": "<parsed>"`` and ``"ev": "<parsed>"``.

    Spark's JSON reader turns any scalar into text for a string field (``"node": 5``
    reads as ``"5"``); these two must be JSON strings, so look for the quoted values
    in the raw line. The writer's own compact form (node then ev) is one search; other
    layouts (a space after the colon, other field order) fall back to four.
    """
    compact = F.concat(_quoted("node", ":"), F.lit(","), _quoted("ev", ":"))

    def present(name: str) -> Column:
        return (F.instr("value", _quoted(name, ":")) > 0) | (
            F.instr("value", _quoted(name, ": ")) > 0
        )

    return (F.instr("value", compact) > 0) | (present("node") & present("ev"))


def _attrs_is_object() -> Column:
    # Only publish records carry attrs, so the second parse touches about 1% of lines.
    kind = F.schema_of_variant(F.variant_get(F.try_parse_json("value"), "$.attrs", "variant"))
    return kind.startswith("OBJECT")


def parse_lines(lines: DataFrame) -> DataFrame:
    """Typed fields for every line plus ``bad_reason`` (null for a good record)."""
    # Each line must be parsed exactly once. Spark's JSON expression optimization would
    # rewrite every r.ts, r.node, ... into a from_json of its own with a one-field
    # schema, parsing a line a dozen times; with it off, the parse stays in one
    # projection (the optimizer does not copy an expensive expression into its many
    # references). That is about a fifth cheaper than the former generator barrier,
    # inline(array(from_json(...))), which runs outside generated code.
    lines.sparkSession.conf.set(JSON_OPTIMIZATION, "false")
    parsed = (
        lines.select("*", F.from_json("value", RECORD_SCHEMA, JSON_OPTIONS).alias("_r"))
        .select("*", "_r.*")
        .drop("_r")
    )
    all_null = F.col("ts").isNull() & F.col("node").isNull() & F.col("ev").isNull()
    missing = F.lit(False)
    for name in REQUIRED:
        missing = missing | F.col(name).isNull()
    # Ordered so that a good line pays for the cheap tests only.
    reason = (
        F.when(F.col(CORRUPT).isNotNull() & all_null, F.lit("not a JSON object"))
        .when(F.col(CORRUPT).isNotNull(), F.lit("field of the wrong type"))
        .when(
            missing,
            F.when(F.trim("value") == "", F.lit("empty line")).otherwise(
                F.lit("missing ts, node or ev")
            ),
        )
        .when(F.isnan("ts") | F.col("ts").isin(float("inf"), float("-inf")), F.lit("ts not finite"))
        .when(~_node_and_ev_are_strings(), F.lit("node or ev not text"))
        .when(
            (F.col("ev") == Ev.PUBLISH) & F.col("attrs").isNotNull() & ~_attrs_is_object(),
            F.lit("attrs not an object"),
        )
    )
    return parsed.withColumn("bad_reason", reason).drop(CORRUPT)


def normalize(parsed: DataFrame, run: str | None = None) -> DataFrame:
    """Good records only, in the normalized column order, optionally one run."""
    good = parsed.filter(F.col("bad_reason").isNull())
    if run is not None:
        good = good.filter(F.col("run") == run)
    return good.select(*NORMALIZED_SCHEMA.fieldNames())


def _observed_metrics(parsed: DataFrame, keep: Column) -> list[Column]:
    """Counts, and the first malformed line of each kind, gathered during the write.

    One example per reason is enough to tell what is wrong and stays small however
    broken the input is; getting them in the same pass spares a rescan of the text.
    """
    reason = F.col("bad_reason")
    metrics = [
        F.count(F.lit(1)).alias("lines"),
        F.count(reason).alias("bad_lines"),
        F.count_if(keep).alias("records"),
    ]
    for i, name in enumerate(BAD_REASONS):
        hit = reason == name
        sample = F.when(hit, F.struct(F.col("src_file"), F.substring("value", 1, 300)))
        metrics.append(F.count_if(hit).alias(f"n{i}"))
        metrics.append(F.min_by(sample, F.when(hit, F.col("src_row"))).alias(f"s{i}"))
    return metrics


# Columns whose values are nearly all distinct: a Parquet dictionary for them is built
# and then abandoned, which costs time and saves nothing.
NO_DICTIONARY = ("ts", "attrs", "msg_id", "key", "ms", "src_row", "src_block")
# Work the writer does per value that no reader here uses: page checksums, the
# level histograms of size statistics, and min/max of long, near-unique texts (no
# step filters on them by value). 1M records from a cache, alternating runs:
# 9.9/9.6/7.5 -> 6.3/7.9/7.1 s.
WRITE_OPTIONS = {
    "parquet.page.write-checksum.enabled": "false",
    "parquet.size.statistics.enabled": "false",
    **{f"parquet.column.statistics.enabled#{name}": "false" for name in ("attrs", "msg_id", "key")},
}


def _write_records(spark: SparkSession, records: DataFrame, target: str) -> None:
    """Parquet partitioned by ``ev``.

    With a writer per ``ev`` value open at once, Spark does not sort each task's rows
    by ``ev`` first (a sort of every record, about a third of the write's cost).
    """
    spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", "32")
    writer = records.write.mode("overwrite").partitionBy("ev")
    for name in NO_DICTIONARY:
        writer = writer.option(f"parquet.enable.dictionary#{name}", "false")
    for key, value in WRITE_OPTIONS.items():
        writer = writer.option(key, value)
    writer.parquet(target)


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
    obs = Observation()
    observed = parsed.observe(obs, *_observed_metrics(parsed, keep))
    target = str(Path(out_dir) / "records")
    _write_records(spark, normalize(observed, run), target)
    metrics = obs.get
    samples: list[dict[str, str]] = []
    by_reason: dict[str, int] = {}
    for i, name in enumerate(BAD_REASONS):
        count = int(metrics.get(f"n{i}") or 0)
        if count:
            by_reason[name] = count
            sample = metrics.get(f"s{i}")
            if sample is not None:
                samples.append({"file": sample[0], "line": sample[1], "reason": name})
    return LoadResult(
        records=read_records(spark, target),
        lines=int(metrics.get("lines") or 0),
        bad_lines=int(metrics.get("bad_lines") or 0),
        record_count=int(metrics.get("records") or 0),
        bad_samples=samples,
        bad_by_reason=by_reason,
    )


def read_records(spark: SparkSession, parquet_dir: str) -> DataFrame:
    """The normalized records written by :func:`load_traces` (ev comes back last)."""
    if not any(Path(parquet_dir).glob("ev=*")):
        return spark.createDataFrame([], NORMALIZED_SCHEMA)
    return spark.read.schema(NORMALIZED_SCHEMA).parquet(parquet_dir)


def of_type(records: DataFrame, ev: str) -> DataFrame:
    """Records of one type; on Parquet this reads only that partition."""
    return records.filter(F.col("ev") == ev)
