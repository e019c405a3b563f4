"""overlay: a peer-to-peer publish/subscribe system (Scribe on Chord, gossip, content filters)."""

__version__ = "0.1.0"
