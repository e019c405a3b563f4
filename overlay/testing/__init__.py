"""Helpers for tests and benchmarks: small cores and harnesses, like ``trio.testing``."""
