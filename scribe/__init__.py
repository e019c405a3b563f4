"""Scribe topic trees on the KBR API of Chord, with content filters, anycast groups and
tree repair. A sans-IO application of the KBR host: see :class:`ScribeApp`."""

from scribe.app import ScribeApp
from scribe.config import ScribeConfig

__all__ = ["ScribeApp", "ScribeConfig"]
