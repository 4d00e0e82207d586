"""Mergeable statistics of one column's text values, for schema inference (profile.py feeds
them, infer.py decides from them): missing marks (empty, NA_TOKENS), numbers of the one
number grammar (contract/values.py), integer literals (and those with a leading zero),
datetimes, distinct values (up to DISTINCT_CAP), whether integers rise strictly in file
order (row numbers), numbers written otherwise (number_forms.py: 39,1, 1,234, $5, 13.5%), and
clock texts (13:30, 2:31:38: clock_stats.py).
"""
from __future__ import annotations

import dataclasses
import re
from typing import List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from preprocessing.contract.values import (
    DATE_ORDERS,
    INTEGER_PATTERN,
    NUMBER_PATTERN,
)
from preprocessing.parsing.columns import PY_WHITESPACE, datetime_ok, mask
from preprocessing.schema_inference.clock_stats import ClockStats
from preprocessing.schema_inference.number_forms import NumberFormStats
from preprocessing.schema_inference.strays import (
    STRAY_TEXT_SHARE,
    few,
    keep_first,
)

# Texts that mean "no value" in a numeric column (R, pandas, spreadsheets, surveys).
NA_TOKENS = ("NA", "N/A", "n/a", "na", "NaN", "nan", "NAN", "null", "NULL", "Null", "None",
             "none", "?", "-", "--", ".", "#N/A", "#NA", "missing")
DISTINCT_CAP = 100_000       # distinct values counted per column; past it, over a prefix
MIN_ID_ROWS = 20             # fewer rows than this are never identifiers
ID_SPAN = 10                 # increasing integers spanning at most this many values a row: ids
EXAMPLES = 3                 # non-numeric texts kept per column for the report
# A token of NA_TOKENS in at least this share of a column's rows, beside at most
# CATEGORY_MARK_VALUES other distinct values, is one of a few categories ("None": no previous
# convictions), not a missing mark (category_marks).
CATEGORY_MARK_SHARE = 0.1
CATEGORY_MARK_VALUES = 20
EXAMPLE_CHARS = 40           # an example is cut to this for the log and summary.json
# Distinct values past which numbers with texts among them are a measure (measure_with_texts),
# not a few categories (`<5` and `10+` hours of sleep beside 5..9: a vocabulary).
MEASURE_VALUES = 20
_NUMBER = f"^{NUMBER_PATTERN}$"
_NUMBER_RE = re.compile(_NUMBER)
_INTEGER = f"^{INTEGER_PATTERN}$"
_LEADING_ZERO = r"^[+-]?0[0-9]"
_LEADING_ZERO_RE = re.compile(_LEADING_ZERO)
# A time of day that is midnight UTC: a date exported with its time (12/2/1994 0:00:00,
# R's 1988-07-10T00:00:00Z).
_MIDNIGHT = r"[ T]0?0:00(:00(\.0+)?)? ?(Z|UTC|[+-]00(:?00)?)?$"
# Inference reads a date with '.' or '-' between its numbers only with a four-digit year: a
# column of `1.2.10` or `10-12-14` is versions or ranges more often than dates (a spec may
# still declare them: the grammar takes them).
_SHORT_DOTTED = r"^[0-9]{1,2}[.-][0-9]{1,2}[.-][0-9]{2}( |$)"


def short(text: str) -> str:
    """`text` cut to EXAMPLE_CHARS: a field may be a megabyte, a log line should not."""
    return text if len(text) <= EXAMPLE_CHARS else text[:EXAMPLE_CHARS] + "..."


@dataclasses.dataclass
class ColumnStats(ClockStats, NumberFormStats):
    """Mergeable statistics of one column's text values (stripped)."""
    rows: int = 0
    empty: int = 0
    na: int = 0                     # NA_TOKENS
    na_counts: dict = dataclasses.field(default_factory=dict)  # token -> rows
    non_numeric: int = 0            # present values outside the number grammar
    non_integer: int = 0            # numbers that are not integer literals
    leading_zero: int = 0           # integer literals like 007
    # Present values that are no datetime in each date order (values.DATE_ORDERS: ISO's
    # YYYY-MM-DD, 1/3/2011 month first, 03.01.2011 day first), counted while they are at
    # most STRAY_TEXT_SHARE of the values, and the first few of them (`undated`, ordered sets).
    not_dated: dict = dataclasses.field(default_factory=lambda: dict.fromkeys(DATE_ORDERS, 0))
    undated: dict = dataclasses.field(default_factory=lambda: {o: {} for o in DATE_ORDERS})
    timed: int = 0                  # datetimes with a time of day (not a date, or midnight)
    distinct: set = dataclasses.field(default_factory=set)
    distinct_rows: int = 0          # present values `distinct` was counted over
    capped: bool = False            # past DISTINCT_CAP: `distinct` covers a prefix only
    mostly_text: bool = False       # non_numeric passed STRAY_TEXT_SHARE
    # non_numeric and texts counted over every value so far: past STRAY_TEXT_SHARE they are
    # counted on while the texts are few (strays.few) and at most half the values.
    texts_counted: bool = True
    # distinct non-numeric values in the order met (a dict as an ordered set), capped
    texts: dict = dataclasses.field(default_factory=dict)
    increasing: bool = True         # integer values strictly increasing in file order
    first: Optional[int] = None
    last: Optional[int] = None
    low: Optional[int] = None       # integer columns: the smallest and largest value
    high: Optional[int] = None
    fits_int64: bool = True
    decimal_comma: int = 0          # values like 39,1, while every value is a number or one
    only_numbers: bool = True       # ... but for a few strays (else no longer counted)
    uncomma: int = 0                # the strays: values neither
    # A file whose delimiter is not a comma (`reads_commas`): the same values with 39,1 read
    # as 39.1 (for `comma_numbers`), a copy made at the first such value and fed while they
    # may all be numbers; `points`: values with a point.
    reads_commas: bool = False
    comma_view: Optional["ColumnStats"] = None
    points: int = 0
    dot_grouped: int = 0            # 1.234,5: points grouping thousands, beside commas
    # A comma-delimited file: the same values with their unit signs dropped ($1,234.50,
    # 13.5%: `units` counts each sign's values) and their thousands separators where grouped
    # in threes (`grouped` counts them), for `written_numbers`: a copy made at the first
    # value holding either, fed until it is mostly text (`unwritten`).
    grouped: int = 0
    units: dict = dataclasses.field(default_factory=dict)
    # Unit words after numbers (`23.4 kmpl`: units.is_unit) met in the first values of the
    # first few batches (`unit_probes`), dropped as the signs are (number_forms).
    unit_words: tuple = ()
    unit_probes: int = 0
    unwritten: bool = False
    written_view: Optional["ColumnStats"] = None
    # Every present value so far a clock text (values.CLOCK_PATTERN) but for at most
    # STRAY_TEXT_SHARE of them (`unclocked`, the first few kept in `unclocked_texts`), with
    # these numbers of ':' (1: H:MM, 2: H:MM:SS); `clock_view`: the same values read as
    # seconds (the others as empty), fed while so (for `clock_numbers`). What tells a
    # duration (clock_kind): `clock_fraction`, a two-part text with a fraction (1:02.35);
    # `clock_long`, one whose first part is 24 or more (58:12); `clock_ap`, an am/pm.
    # clock_stats.ClockStats reads and feeds them.
    clocks_only: bool = True
    clock_colons: set = dataclasses.field(default_factory=set)
    clock_fraction: bool = False
    clock_long: bool = False
    clock_ap: bool = False
    unclocked: int = 0
    unclocked_texts: dict = dataclasses.field(default_factory=dict)
    clock_view: Optional["ColumnStats"] = None

    @classmethod
    def for_delimiter(cls, delimiter: str) -> "ColumnStats":
        """Empty statistics of a column of a file with `delimiter`: where it is not a
        comma, 39,1 may be a number (in a comma-delimited file "1,234" is a thousand)."""
        return cls(reads_commas=delimiter != ",")

    @property
    def present(self) -> int:
        return self.rows - self.empty - self.na

    @property
    def numeric(self) -> bool:
        return self.present > 0 and self.non_numeric == 0

    @property
    def distinct_count(self) -> Optional[int]:
        """Distinct present values; None when there are more than DISTINCT_CAP."""
        return None if self.capped else len(self.distinct)

    @property
    def distinct_share(self) -> float:
        """Distinct values per present value (over a prefix once capped)."""
        return len(self.distinct) / max(self.distinct_rows, 1)

    def add(self, values: pa.Array) -> None:
        """Adds one batch of a column's raw text values (in file order)."""
        s = pc.utf8_trim(values, characters=PY_WHITESPACE)
        na = pc.is_in(s, value_set=pa.array(NA_TOKENS, s.type))
        self._find_unit_words(s)
        if self.reads_commas:
            self._view_with_commas(s, na)
        elif not self.unwritten:
            self._view_written(s)
        if self.clocks_only:
            self._view_as_clock(s, na)
        self.rows += len(s)
        empty = pc.equal(s, "")
        self.empty += pc.sum(empty).as_py() or 0
        na_rows = pc.sum(na).as_py() or 0
        self.na += na_rows
        if na_rows:
            counts = pc.value_counts(s.filter(na))
            for token, n in zip(counts.field("values").to_pylist(),
                                counts.field("counts").to_pylist()):
                self.na_counts[token] = self.na_counts.get(token, 0) + n
        present = s.filter(pc.invert(pc.or_(empty, na)))
        if not len(present):
            return
        is_number = None
        self.texts_counted = self.texts_counted and (
            not self.mostly_text or (few(self.texts) and self._texts_at_most_half()))
        if self.texts_counted or self.numeric_examples_wanted():
            is_number = pc.match_substring_regex(present, _NUMBER)
            bad = len(present) - (pc.sum(is_number).as_py() or 0)
            if bad:
                self.non_numeric += bad
                keep_first(self.texts, present.filter(pc.invert(is_number)))
                self.mostly_text = self.mostly_text or \
                    self.non_numeric > STRAY_TEXT_SHARE * self.present
        if self.only_numbers:
            self._count_decimal_commas(present, is_number)
        if self.non_numeric == 0:
            self._add_numbers(present)
        self._count_dates(present)
        if not self.capped:
            self.distinct.update(pc.unique(present).to_pylist())
            self.distinct_rows += len(present)
            self.capped = len(self.distinct) > DISTINCT_CAP

    def _count_dates(self, present: pa.Array) -> None:
        """Counts, per date order still within STRAY_TEXT_SHARE of the values, the values
        that are no datetime in it, and keeps the first few of them (`undated`)."""
        orders = [order for order, n in self.not_dated.items()
                  if n <= STRAY_TEXT_SHARE * self.present]
        for order in orders:
            bad = ~datetime_ok(present, order)
            if order != "ymd":  # 1.2.10 is a version more likely than a date
                bad |= mask(pc.match_substring_regex(present, _SHORT_DOTTED))
            count = int(bad.sum())
            self.not_dated[order] += count
            if count:
                keep_first(self.undated[order], present.filter(pa.array(bad)))
        if orders:
            self.timed += pc.sum(pc.and_(pc.match_substring(present, ":"), pc.invert(
                pc.match_substring_regex(present, _MIDNIGHT)))).as_py() or 0

    def stray_dates(self) -> tuple:
        """(the date orders in which every present value but a few texts is a datetime, those
        texts): at most STRAY_TEXT_VALUES distinct, in at most STRAY_TEXT_SHARE of the values,
        none longer than STRAY_TEXT_CHARS (MySQL's `0000-00-00`, an `unknown`); the orders
        with the fewest such values. ((), ()) where none (or where every value is a date)."""
        if self.present == 0 or self.numeric or self.date_orders():
            return (), ()
        fit = {order: n for order, n in self.not_dated.items()
               if n <= STRAY_TEXT_SHARE * self.present and few(self.undated[order])}
        if not fit:
            return (), ()
        fewest = min(fit.values())
        orders = tuple(order for order, n in fit.items() if n == fewest)
        return orders, tuple(sorted(set().union(*(self.undated[o] for o in orders))))

    def date_orders(self) -> tuple:
        """The date orders (values.DATE_ORDERS) in which every present value is a datetime
        (both `mdy` and `dmy` where no value has a number past 12 first or second)."""
        if self.present == 0 or self.numeric:
            return ()
        return tuple(order for order, n in self.not_dated.items() if n == 0)

    @property
    def stray_text(self) -> bool:
        """Numbers but for a few text values (at most STRAY_TEXT_SHARE of them, counted)."""
        return 0 < self.non_numeric and not self.mostly_text

    def stray_texts(self) -> tuple:
        """The few texts of a numeric column, when they can be read as missing values: at
        most STRAY_TEXT_VALUES distinct, in at most STRAY_TEXT_SHARE of the values, or in at
        most half of them where the column is a measure (measure_with_texts: a daily
        precipitation's `T` for a trace, in 5% of days, had made 141 amounts a vocabulary)."""
        if (self.stray_text or self.texts_counted and self._texts_at_most_half() and
                self.measure_with_texts()) and few(self.texts):
            return tuple(sorted(self.texts))
        return ()

    def _texts_at_most_half(self) -> bool:
        return 2 * self.non_numeric <= self.present

    def measure_with_texts(self) -> bool:
        """Numbers and texts, over MEASURE_VALUES distinct values (a prefix's once capped),
        over half of them numbers and none an integer with a leading zero (00123 is a code):
        a measure whose texts are marks or bad values (reported heights' `5' 4"`)."""
        if self.numeric or self.present == 0 or len(self.distinct) <= MEASURE_VALUES:
            return False
        numbers = self._distinct_numbers()
        return len(numbers) > len(self.distinct) / 2 and \
            not any(_LEADING_ZERO_RE.match(v) for v in numbers)

    def mostly_numbers(self) -> bool:
        """Over half the distinct values counted are numbers."""
        return len(self._distinct_numbers()) > len(self.distinct) / 2

    def _distinct_numbers(self) -> list:
        return [v for v in map(str, self.distinct) if _NUMBER_RE.fullmatch(v)]

    def category_marks(self) -> tuple:
        """The tokens of NA_TOKENS this column holds as categories: each in at least
        CATEGORY_MARK_SHARE of its rows, beside at most CATEGORY_MARK_VALUES other values."""
        if self.capped or not 0 < len(self.distinct) <= CATEGORY_MARK_VALUES:
            return ()
        return tuple(sorted(t for t, n in self.na_counts.items()
                            if n >= CATEGORY_MARK_SHARE * self.rows))

    def marked(self) -> int:
        """Rows holding a category mark."""
        return sum(self.na_counts[t] for t in self.category_marks())

    @property
    def examples(self) -> List[str]:
        """The first non-numeric texts met, cut short, for the report."""
        return [short(t) for t in list(self.texts)[:EXAMPLES]]

    def numeric_examples_wanted(self) -> bool:
        return len(self.texts) < EXAMPLES and self.non_numeric < EXAMPLES

    def _add_numbers(self, present: pa.Array) -> None:
        if self.non_integer == 0:
            is_int = pc.match_substring_regex(present, _INTEGER)
            self.non_integer += len(present) - (pc.sum(is_int).as_py() or 0)
        if self.non_integer:
            self.increasing = False
            return
        if self.leading_zero == 0:
            self.leading_zero += pc.sum(pc.match_substring_regex(present, _LEADING_ZERO)).as_py() or 0
        try:
            ints = pc.cast(present, pa.int64()).to_numpy()
        except (pa.ArrowInvalid, OverflowError):
            self.increasing = self.fits_int64 = False
            return
        low, high = int(ints.min()), int(ints.max())
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)
        if self.increasing and self.empty == 0 and self.na == 0:
            if (self.last is not None and ints[0] <= self.last) or (np.diff(ints) <= 0).any():
                self.increasing = False
            if self.first is None:
                self.first = int(ints[0])
            self.last = int(ints[-1])
        else:
            self.increasing = False

    def _an_integer_in_every_row(self) -> bool:
        return (self.numeric and self.non_integer == 0 and self.empty == 0 and self.na == 0
                and self.rows >= MIN_ID_ROWS)

    def is_row_number(self) -> bool:
        """A gap-free strictly increasing integer sequence in every row (row numbers)."""
        return (self._an_integer_in_every_row() and self.increasing and self.first is not None
                and self.last - self.first + 1 == self.rows)

    def is_integer_id(self) -> bool:
        """Integers in every row, strictly increasing in file order (so each row's its own),
        spanning at most ID_SPAN values a row: row numbers with gaps, as a sample or a split
        of a table leaves them (R's `rownames` after an 80/20 split), or a sorted `id`.
        Distinct integers in no order stay numbers: a rank or a score is a feature."""
        if not (self._an_integer_in_every_row() and self.increasing and self.fits_int64
                and self.low is not None):
            return False
        return self.high - self.low + 1 <= ID_SPAN * self.rows

    def is_distinct_integers(self) -> bool:
        """Integers in every row, no two equal, in any order (an identifier only under a
        row-index header: schema_inference.infer)."""
        return self._an_integer_in_every_row() and self.fits_int64 and self.distinct_share == 1.0
