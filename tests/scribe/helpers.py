"""Building Scribe apps on recording hosts, and the messages tests feed them."""

from __future__ import annotations

from chord.kbr import NodeRef
from matching import Summary
from overlay.core.ids import hash_id
from scribe import ScribeApp, ScribeConfig
from scribe.messages import Join, JoinAck
from scribe.wire_records import DigestWire, EventBody, GroupDigestWire
from tests.scribe.fakekbr import RecordingHost

BITS = 16
TOPIC = "t"
MID = hash_id(TOPIC, BITS)


def ref(node_id: int) -> NodeRef:
    return NodeRef(node_id, f"n{node_id}")


def make(node_id: int, root: bool = False, config: ScribeConfig | None = None,
         ) -> tuple[ScribeApp, RecordingHost]:
    """An app on node ``node_id``; ``root``: it is responsible for topic ``t``."""
    host = RecordingHost(ref(node_id), bits=BITS, responsible_for={MID} if root else set())
    app = ScribeApp(host, config or ScribeConfig())
    host.app = app
    return app, host


def digest(*filters: str, groups: dict[str, tuple[list[str], int]] | None = None) -> DigestWire:
    """A digest of plain ``filters`` and ``groups`` (name -> (member filters, distance))."""
    return DigestWire(Summary.of(list(filters)).to_wire(), {
        name: GroupDigestWire(Summary.of(member_filters).to_wire(), distance)
        for name, (member_filters, distance) in (groups or {}).items()})


def join(joiner: int, *filters: str, groups: dict[str, tuple[list[str], int]] | None = None,
         version: int = 1, redirects: int = 0) -> Join:
    return Join(TOPIC, ref(joiner), digest(*filters, groups=groups), version, redirects)


def attach(app: ScribeApp, host: RecordingHost, parent: int, path: tuple[int, ...],
           now: float = 0.0) -> None:
    """Let ``parent`` (whose path from the root is ``path``) adopt the app's node."""
    app.on_direct(now, f"n{parent}", JoinAck(TOPIC, ref(parent), path))
    host.clear()


def body(msg_id: str = "aa", seq: int | None = 1, **attrs: str | int | float | bool,
         ) -> EventBody:
    return EventBody(TOPIC, msg_id, seq, dict(attrs), b"p", "0001", 5.0)
