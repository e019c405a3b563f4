"""Content-based matching: the filter language of FILTERS.md, a multi-filter index, and
summaries of many filters for tree edges. Imports nothing of ours."""

from matching.errors import FilterLimitError, FilterSyntaxError, SummaryDecodeError
from matching.index import Index
from matching.parser import Filter, parse
from matching.summary import Summary, covers

__all__ = [
    "Filter",
    "FilterLimitError",
    "FilterSyntaxError",
    "Index",
    "Summary",
    "SummaryDecodeError",
    "covers",
    "parse",
]
