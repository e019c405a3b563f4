"""Errors of the filter language."""

from __future__ import annotations


class FilterSyntaxError(ValueError):
    """A filter does not parse. ``pos`` is the 0-based character offset of the problem."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(f"{message} at {pos}")
        self.message = message
        self.pos = pos


class FilterLimitError(FilterSyntaxError):
    """A filter exceeds a limit of FILTERS.md (length, nesting depth, IN list size)."""


class SummaryDecodeError(ValueError):
    """A summary received from a peer is malformed."""
