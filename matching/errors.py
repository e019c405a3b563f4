"""Errors of the filter language and of summaries received from peers."""

from __future__ import annotations


class FilterSyntaxError(ValueError):
    """A filter does not parse. ``pos`` is the 0-based character offset of the problem;
    ``message`` says what was expected and what was found, without the position."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(f"{message} at {pos}")
        self.message = message
        self.pos = pos


class FilterLimitError(FilterSyntaxError):
    """A filter exceeds one of the limits of FILTERS.md; each limit has its own subclass."""


class FilterTooLongError(FilterLimitError):
    """The filter text is longer than 4096 characters."""


class FilterTooDeepError(FilterLimitError):
    """Parentheses and NOTs nest deeper than 64 levels."""


class InListTooLongError(FilterLimitError):
    """An IN list has more than 1024 items."""


class SummaryDecodeError(ValueError):
    """A summary received from a peer is malformed."""
