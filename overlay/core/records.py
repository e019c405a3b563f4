"""The trace records' vocabulary (docs/TRACES.md): the format version and the values its
enumerated fields take. Apart from the file writer (``overlay.core.tracing``), so that
the cores name records without importing any I/O."""

from __future__ import annotations

#: Version of the record format, written in every ``node_up`` record.
TRACE_VERSION = 1

#: Every record type a node writes (``ev``).
RECORD_TYPES = frozenset({
    "node_up", "node_down", "ring", "lookup", "subscribe", "subscribed", "unsubscribe",
    "tree", "tree_leave", "child", "publish", "publish_ack", "forward", "recv", "deliver",
    "repair", "drop", "recover", "storage_dropped", "storage_failed", "merge", "standin",
    "consumer", "ack", "term", "redeliver", "dead_letter"})

#: ``node_down`` reasons.
NODE_DOWN_REASONS = ("stop", "leave", "crash")
#: ``unsubscribe`` reasons: the application asked, the expiry passed, its connection closed.
UNSUBSCRIBE_REASONS = ("client", "expired", "disconnect")
#: ``repair`` kinds.
REPAIR_KINDS = ("gap", "digest", "rejoin")
#: ``drop`` reasons.
DROP_REASONS = ("ttl", "no_route", "overload", "expired", "storage_error", "dead_letter",
                "too_old")
#: ``lookup`` kinds: an iterative lookup, or a routed message with acknowledgement.
LOOKUP_KINDS = ("lookup", "route")
