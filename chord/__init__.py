"""Chord: the DHT core (sans-IO) and the key-based routing API applications use.

- :class:`~chord.node.ChordNode`: the core, a ``ProtocolCore`` and a ``KbrHost``;
- :class:`~chord.config.ChordConfig`: its settings;
- :mod:`chord.kbr`: the KBR contract (``NodeRef``, ``KbrHost``, ``KbrApplication``);
- :mod:`chord.oracle`: correct tables for a static node set, and checks against them.
"""

from chord.config import ChordConfig
from chord.kbr import KbrApplication, KbrHost, NodeRef
from chord.node import ChordNode

__all__ = ["ChordConfig", "ChordNode", "KbrApplication", "KbrHost", "NodeRef"]
