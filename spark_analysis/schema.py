"""The trace record contract (TRACES.md, version 1) as Spark types.

Lines are parsed with an explicit schema, never inferred: inference would make a
column's type depend on which records happen to be in the run, and a single bad line
could turn ``hop`` into a string for everyone.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

# Every field of every record type, with the type TRACES.md gives it. ``attrs`` is an
# object of mixed value types; it is kept as its compact JSON text so that the filter
# evaluation sees true, 1 and 1.0 as the writer wrote them.
FIELDS: list[tuple[str, T.DataType]] = [
    ("ts", T.DoubleType()),
    ("node", T.StringType()),
    ("ev", T.StringType()),
    ("run", T.StringType()),
    ("addr", T.StringType()),
    ("mode", T.StringType()),
    # TRACES.md gives no type; the nodes write the integer TRACE_VERSION (1), as the
    # title's "version 1" reads.
    ("version", T.LongType()),
    ("reason", T.StringType()),
    ("succ", T.StringType()),
    ("pred", T.StringType()),
    ("key", T.StringType()),
    ("hops", T.LongType()),
    ("ok", T.BooleanType()),
    ("ms", T.DoubleType()),
    ("topic", T.StringType()),
    ("sub", T.LongType()),
    ("filter", T.StringType()),
    ("expiry", T.DoubleType()),
    ("parent", T.StringType()),
    ("role", T.StringType()),
    ("child", T.StringType()),
    ("op", T.StringType()),
    ("msg_id", T.StringType()),
    ("attrs", T.StringType()),
    ("size", T.LongType()),
    ("seq", T.LongType()),
    ("to", T.StringType()),
    ("from", T.StringType()),
    ("hop", T.LongType()),
    ("dup", T.BooleanType()),
    ("kind", T.StringType()),
    # Beyond TRACES.md: a ``deliver`` record of an event the subscription asked for
    # (replay), which may predate the subscription.
    ("replay", T.BooleanType()),
    # ``recover``: what a node loaded of a topic's durable log (its ``first`` and
    # ``last`` seqs are not read).
    ("events", T.LongType()),
    ("bytes", T.LongType()),
    # Durable consumers' records (``consumer``, ``ack``, ``term``, ``redeliver``,
    # ``dead_letter``): the consumer's name, the member's node address, the delivery
    # attempt an ack or redelivery is about, and a dead letter's count of attempts.
    ("durable", T.StringType()),
    ("member", T.StringType()),
    ("attempt", T.LongType()),
    ("attempts", T.LongType()),
]

REQUIRED = ("ts", "node", "ev")

# Where a line came from. Records of one node are ordered by ``ts`` and, for equal
# ``ts`` (common in simulations, where one step writes several records), by their
# position in the node's trace: rotation rank (``.jsonl.1`` < ``.jsonl.2`` < ``.jsonl``),
# then the line number within the file (files are read whole).
SOURCE_FIELDS: list[tuple[str, T.DataType]] = [
    ("src_rank", T.IntegerType()),
    ("src_row", T.LongType()),
]
ORDER_COLUMNS = ("ts", "src_rank", "src_row")

NORMALIZED_SCHEMA = T.StructType(
    [T.StructField(name, dtype, nullable=True) for name, dtype in FIELDS + SOURCE_FIELDS]
)

# Rank of the live (not yet rotated) file: newer than every rotated one.
LIVE_RANK = 2**31 - 1


class Ev:
    """Record types (the ``ev`` field)."""

    NODE_UP = "node_up"
    NODE_DOWN = "node_down"
    RING = "ring"
    LOOKUP = "lookup"
    SUBSCRIBE = "subscribe"
    UNSUBSCRIBE = "unsubscribe"
    TREE = "tree"
    TREE_LEAVE = "tree_leave"
    CHILD = "child"
    PUBLISH = "publish"
    PUBLISH_ACK = "publish_ack"
    FORWARD = "forward"
    RECV = "recv"
    DELIVER = "deliver"
    REPAIR = "repair"
    DROP = "drop"
    RECOVER = "recover"
    STORAGE_DROPPED = "storage_dropped"
    CONSUMER = "consumer"
    ACK = "ack"
    TERM = "term"
    REDELIVER = "redeliver"
    DEAD_LETTER = "dead_letter"


# The field that tells a record tally's rows of one type apart (``detail``): a repair's
# kind and a drop's reason; other types have none. Spark's tally (cost.record_tally) and
# loading's per-file one (load.partial_tally) both read it from here.
TALLY_DETAIL = {Ev.REPAIR: "kind", Ev.DROP: "reason"}
TALLY_KEYS = ("node", "topic", "ev", "detail")


def order_key(prefix: str | None = None) -> Column:
    """A struct that sorts one node's records in the order they were written."""
    cols = [F.col(f"{prefix}.{c}" if prefix else c) for c in ORDER_COLUMNS]
    return F.struct(*[c.alias(name) for c, name in zip(cols, ORDER_COLUMNS, strict=True)])


def empty_records(spark: SparkSession) -> DataFrame:
    """An empty DataFrame of normalized records (for runs with no data)."""
    return spark.createDataFrame([], NORMALIZED_SCHEMA)
