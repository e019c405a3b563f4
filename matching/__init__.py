"""Content-based matching: the filter language of FILTERS.md, an index over many
filters, and summaries of many filters for tree edges. Imports nothing of ours.

- :func:`parse` turns text into a :class:`Filter` (``matches``, canonical ``str``);
- :class:`Index` finds the filters an event matches without evaluating each (many
  events at once: :class:`Matches`);
- :class:`Summary` stands for a set of filters in bounded space and never says no
  when one of them would say yes.
"""

from matching.covering import covers
from matching.errors import (
    FilterLimitError,
    FilterSyntaxError,
    FilterTooDeepError,
    FilterTooLongError,
    InListTooLongError,
    SummaryDecodeError,
)
from matching.index import Index, Matches
from matching.parser import Filter, parse
from matching.summary import Precision, Summary

__all__ = [
    "Filter",
    "FilterLimitError",
    "FilterSyntaxError",
    "FilterTooDeepError",
    "FilterTooLongError",
    "InListTooLongError",
    "Index",
    "Matches",
    "Precision",
    "Summary",
    "SummaryDecodeError",
    "covers",
    "parse",
]
