"""Scribe topic trees on the KBR API of Chord, with content filters, anycast groups and
tree repair. A sans-IO application of the KBR host: see :class:`ScribeApp`."""

from scribe.app import UNSUBSCRIBE_REASONS, ScribeApp
from scribe.config import DuplicateSubscriptionError, ScribeConfig, UnknownSubscriptionError
from scribe.dissemination import DeliveredEvent

__all__ = [
    "UNSUBSCRIBE_REASONS",
    "DeliveredEvent",
    "DuplicateSubscriptionError",
    "ScribeApp",
    "ScribeConfig",
    "UnknownSubscriptionError",
]
