"""How records/ stores the records: a narrow schema whose columns each type fills.

The records as the analysis reads them (:data:`schema.NORMALIZED_SCHEMA`) have a column
for every field of every type, about 40, of which a record fills 8-10. Written that way,
each record paid Parquet a definition level (and Spark a null check and a row slot) for
each of the 30 columns its type never has: a seventh of a 10M-record run's CPU.

records/ therefore holds, under its own name, what every type may carry
(:data:`SHARED`: ``ts``, ``node``, ``run``, ``topic``, ``msg_id`` and where the line
was), and a few typed slots (:data:`SLOTS`: three texts, three integers, two booleans,
one double) that hold each type's own fields (:data:`LAYOUT`). A field always goes to the
same slot (:data:`FIELD_SLOT`), and two fields that share a slot never belong to one
type, so a slot's meaning in a record follows from its ``ev`` alone: ``text2`` is a
``forward``'s ``to`` and a ``recv``'s ``from``. The hop records, nearly every record,
fill 9 to 11 of the 16 columns written.

One DataFrame, one partitioned write, as before; :func:`decoded` turns the stored
columns back into the normalized records (a projection; a filter on ``ev`` still reads
only that type's folder). A record keeps the fields its type has here, TRACES.md's and
those beyond it the analysis reads (``replay`` and ``durable`` on ``deliver``); a field
a record carries that its type does not have (and every field of a type not listed
here) is not kept, as a reader ignores fields it does not know.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from spark_analysis.parse import nulls
from spark_analysis.schema import FIELDS, SOURCE_FIELDS, Ev

# Stored under their own names for every record type (null where a type has none).
SHARED = ("ts", "node", "run", "topic", "msg_id")

SLOTS: dict[str, T.DataType] = {
    "text1": T.StringType(),
    "text2": T.StringType(),
    "text3": T.StringType(),
    "int1": T.LongType(),
    "int2": T.LongType(),
    "int3": T.LongType(),
    "flag1": T.BooleanType(),
    "flag2": T.BooleanType(),
    "real1": T.DoubleType(),
}

FIELD_SLOT: dict[str, str] = {
    # texts
    "addr": "text1",
    "reason": "text1",
    "succ": "text1",
    "key": "text1",
    "filter": "text1",
    "parent": "text1",
    "child": "text1",
    "attrs": "text1",
    "durable": "text1",
    "mode": "text2",
    "pred": "text2",
    "role": "text2",
    "op": "text2",
    "to": "text2",
    "from": "text2",
    "kind": "text3",
    "member": "text3",
    # integers
    "hop": "int1",
    "version": "int1",
    "hops": "int1",
    "size": "int1",
    "events": "int1",
    "attempt": "int1",
    "attempts": "int1",
    "sub": "int2",
    "bytes": "int2",
    "seq": "int3",
    # booleans
    "dup": "flag1",
    "ok": "flag1",
    "replay": "flag2",
    # doubles
    "ms": "real1",
    "expiry": "real1",
}

# Each type's own fields (TRACES.md's that schema.FIELDS knows, and what the analysis
# reads beyond it), stored in their slots.
_DURABLE_ACK = ("durable", "seq", "attempt", "member")
LAYOUT: dict[str, tuple[str, ...]] = {
    Ev.NODE_UP: ("addr", "mode", "version"),
    Ev.NODE_DOWN: ("reason",),
    Ev.RING: ("succ", "pred"),
    Ev.LOOKUP: ("key", "hops", "ok", "ms", "kind"),
    Ev.SUBSCRIBE: ("sub", "filter", "expiry"),
    "subscribed": ("sub",),
    Ev.UNSUBSCRIBE: ("sub", "reason"),
    Ev.TREE: ("parent", "role"),
    Ev.TREE_LEAVE: (),
    Ev.CHILD: ("child", "op"),
    Ev.PUBLISH: ("attrs", "size"),
    Ev.PUBLISH_ACK: ("seq",),
    Ev.FORWARD: ("to", "hop"),
    Ev.RECV: ("from", "hop", "dup"),
    Ev.DELIVER: ("sub", "hop", "seq", "dup", "replay", "durable"),
    Ev.REPAIR: ("from", "kind"),
    Ev.DROP: ("reason",),
    Ev.RECOVER: ("events", "bytes", "ms"),
    Ev.STORAGE_DROPPED: ("reason",),
    "storage_failed": ("reason",),
    Ev.CONSUMER: ("durable", "op", "member", "sub"),
    Ev.ACK: _DURABLE_ACK,
    Ev.TERM: _DURABLE_ACK,
    Ev.REDELIVER: ("durable", "seq", "attempt"),
    Ev.DEAD_LETTER: ("durable", "seq", "attempts", "to"),
}

# field -> the types that have it
TYPES_OF: dict[str, tuple[str, ...]] = {
    name: tuple(ev for ev, fields in LAYOUT.items() if name in fields) for name in FIELD_SLOT
}

_SPARK_TYPES = dict(FIELDS + SOURCE_FIELDS)
_SOURCE = tuple(name for name, _ in SOURCE_FIELDS)

# What the loading workers hand Spark and records/ holds (ev is the partition column,
# never null: a line without it is malformed; see load.PARSED_SCHEMA).
STORED_SCHEMA = T.StructType(
    [T.StructField(name, _SPARK_TYPES[name]) for name in SHARED]
    + [T.StructField(name, dtype) for name, dtype in SLOTS.items()]
    + [T.StructField(name, _SPARK_TYPES[name]) for name in _SOURCE]
    + [T.StructField("ev", T.StringType(), nullable=False)]
)
_STORED_ARROW = to_arrow_schema(STORED_SCHEMA)
# records/ read back: an empty ev was written to Spark's default partition, read as null.
READ_SCHEMA = T.StructType([T.StructField(f.name, f.dataType) for f in STORED_SCHEMA.fields])


def layout_errors() -> list[str]:
    """What would make a slot ambiguous or a value change type; empty when sound."""
    errors = []
    for ev, fields in LAYOUT.items():
        slots = [FIELD_SLOT[f] for f in fields]
        if len(set(slots)) != len(slots):
            errors.append(f"{ev}: two fields share a slot ({fields})")
    for name, slot in FIELD_SLOT.items():
        if _SPARK_TYPES[name] != SLOTS[slot]:
            errors.append(f"{name} is {_SPARK_TYPES[name]}, its slot {slot} {SLOTS[slot]}")
    known = set(SHARED) | set(FIELD_SLOT) | set(_SOURCE) | {"ev"}
    errors += [f"{name} has no column" for name in _SPARK_TYPES if name not in known]
    return errors


def stored(records: pa.Table) -> pa.Table:
    """Normalized records (Arrow, every field a column) as records/ stores them.

    A table of one type (the parse's hop parts) moves its fields to their slots; one of
    several types takes each field from the rows of the types that have it.
    """
    n = records.num_rows
    ev = records.column("ev")
    kinds = pc.unique(ev)
    slot_values: dict[str, pa.Array | pa.ChunkedArray] = {}
    if len(kinds) == 1:
        for name in LAYOUT.get(kinds[0].as_py(), ()):
            slot_values[FIELD_SLOT[name]] = records.column(name)
    elif n:
        present = set(kinds.to_pylist())
        for name, slot in FIELD_SLOT.items():
            types = [t for t in TYPES_OF[name] if t in present]
            if not types:
                continue
            column = records.column(name)
            mask = pc.is_in(ev, value_set=pa.array(types, pa.string()))
            before = slot_values.get(slot, nulls(n, column.type))
            slot_values[slot] = pc.if_else(mask, column, before)
    columns = [
        records.column(f.name)
        if f.name in SHARED or f.name in _SOURCE or f.name == "ev"
        else slot_values.get(f.name, nulls(n, f.type))
        for f in _STORED_ARROW
    ]
    return pa.Table.from_arrays(columns, schema=_STORED_ARROW)


def decoded(stored_records: DataFrame) -> DataFrame:
    """records/ as read (:data:`STORED_SCHEMA`) -> the normalized records, every field a
    column (schema.NORMALIZED_SCHEMA's, ``ev`` last, as Spark reads a partition column)."""
    ev = F.col("ev")
    columns = []
    for name, _ in FIELDS + SOURCE_FIELDS:
        if name == "ev":
            continue
        if name in FIELD_SLOT:
            value = F.when(ev.isin(*TYPES_OF[name]), F.col(FIELD_SLOT[name]))
            columns.append(value.alias(name))
        else:
            columns.append(F.col(name))
    return stored_records.select(*columns, ev)
