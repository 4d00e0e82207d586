"""The value grammar every reader shares (the CSV row, column and Arrow paths, JSON values,
tf.Example text, schema inference): the raw column types (DTYPE_TABLE), numbers, their
storage bounds, and datetimes, each defined once here.

After surrounding whitespace is stripped, a number is an ASCII decimal with an optional
sign, fraction and exponent: `7`, `-3`, `+.5`, `5.`, `1.5e-3`. Not numbers: `1_000`, `0x10`,
non-ASCII digits, `nan`/`inf` (non_finite_number). Float columns are stored as float32, so a
value beyond it, or a non-zero one that would be stored as 0 (`1e-400`), is
number_out_of_range. An int column takes an integer literal within int64, or a decimal with
an integral value within +-2**53 (`3.0`, `2e3`). A datetime is `YYYY-MM-DD HH:MM:SS` (or with
a `T`; `/` or `.` may stand for both `-`, as some systems export dates), a valid calendar
time, optionally followed by a fraction of a second (`.123`) and a zone: `Z`, `UTC` or an
offset `+05:00`/`-0330`/`+05` (hours 0-23), with or without a space before it. A time
with a zone is converted to UTC before its parts are taken (in the transform graph, so
preprocess and serving agree); a time without one is taken as UTC.
Anything else after the seconds is unparsable_datetime. A date alone (`YYYY-MM-DD`) is that
date at midnight, UTC; a time without seconds (`YYYY-MM-DD HH:MM`, no zone) is that minute.

A float column may be written as a clock (ColumnSpec.clock: a time of day `13:30`, `5:00 a.m.`,
or a duration `2:31:38`, a race's time): hours (up to four digits), `:`, two digits of
minutes, optionally `:` and two digits of seconds with a fraction, optionally `am`/`pm`
(`a.m.`, `PM`; hours 1-12 then: 12 am is 0:00). It is read as a number of seconds. A column
of durations (ColumnSpec.clock `duration`) reads two parts as minutes and seconds instead
(`58:12`, `1:02.35`; three parts are still H:MM:SS), never with am/pm. A number
there is that many seconds (what a tf.Example or JSON carries for it, as the model gets it);
another text is unparsable_number.

A datetime column may instead be written month or day first (ColumnSpec.date_order `mdy`, a
US spreadsheet's `1/3/2011`, or `dmy`, `03.01.2011`): one or two digits, `/`, `.` or `-`, one
or two digits, the same separator, the year in four digits or two (`00`-`29` are 2000-2029,
`30`-`99` 1930-1999, as spreadsheets read them), optionally a time of day `H:MM` or `H:MM:SS`
after one space. Such a time has no zone: it is taken as UTC. The month may be written as
its English name instead, full or in three letters (`Sept` too; any case, a `.` after it),
and then a space may separate the parts, with a comma after the day: Excel's `6-Aug-09` is
`dmy`, `Aug 6, 2009` and `June 22 2018` are `mdy`.

A month without its day (date_order `ym`, a monthly series) is a year and a month in either
order, with `-`, `/` or a space between: `2018-03`, `03/2018`, `Mar-2018`, `1960 Jan`, or a
quarter, `1998 Q1` (its first month). A month's number needs a four-digit year and `-` or `/`;
beside a month's name the year may have two digits after `-` or `/` (Excel's `Oct-75`; `Mar
15` is more often a day than 2015). It is read as the first day of that month, UTC.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
from typing import Any

import numpy as np
import pyarrow as pa

from preprocessing.accounting.rejects import Reject
from preprocessing.contract.units import NEGATIVE_PARENS, reads_parens, unit_pattern

# The date's separators a `ymd` datetime may use (both the same); the transform graph reads
# its fields by position, so any of them parses alike there.
YMD_SEPARATORS = "-/."
DATETIME_RE = re.compile(rf"^\d{{4}}([{re.escape(YMD_SEPARATORS)}])\d{{2}}\1\d{{2}}[ T]"
                         rf"\d{{2}}:\d{{2}}:\d{{2}}")
# What may follow the seconds (the Arrow column check uses the same pattern).
DATETIME_TAIL_PATTERN = r"(?:\.[0-9]{1,9})? ?(?:Z|UTC|[+-](?:[01][0-9]|2[0-3])(?::?[0-5][0-9])?)?"
DATETIME_TAIL_RE = re.compile(DATETIME_TAIL_PATTERN)
NUMBER_PATTERN = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
INTEGER_PATTERN = r"[+-]?[0-9]+"
NUMBER_RE = re.compile(NUMBER_PATTERN)
# A float column's decimal mark (ColumnSpec.decimal): a European spreadsheet's ';'-delimited
# file writes 39,1. Every reader replaces it by a point before the grammar above; a value
# with a point in such a column is refused (1.234 there is a thousand and more, not 1.234).
DECIMAL_MARKS = (".", ",")
DECIMAL_COMMA_PATTERN = r"[+-]?[0-9]+,[0-9]+"  # 39,1
# A number column's thousands separator (ColumnSpec.grouping): a spreadsheet's or a report's
# `1,234,567.5` (",") or, beside a decimal comma, `1.234.567,5` ("."). A value holding it
# must be grouped in threes (`12,34` is refused); every reader drops it before the grammar.
GROUPING_MARKS = ("", ",", ".")


def grouped_pattern(grouping: str, decimal: str = ".") -> str:
    """A number whose integer part is grouped in threes by `grouping` (RE2 and Python)."""
    g, d = re.escape(grouping), re.escape(decimal)
    return rf"^[+-]?[0-9]{{1,3}}(?:{g}[0-9]{{3}})+(?:{d}[0-9]*)?$"


INTEGER_RE = re.compile(INTEGER_PATTERN)
NONZERO_MANTISSA_PATTERN = r"[^eE]*[1-9]"  # a number that must not round to zero (1e-400)
NONZERO_MANTISSA_RE = re.compile(NONZERO_MANTISSA_PATTERN)
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # the smallest normal float32
EXACT_FLOAT_INT = 1 << 53


@dataclasses.dataclass(frozen=True)
class DType:
    """A raw column type as every layer holds it: the one table of dtype maps (a new type or
    a changed width is one entry here)."""
    name: str
    python: type    # a typed value (defaults, JSON inputs, the export's examples)
    parsed: Any     # numpy dtype of a numeric column parsed column-wise (None: strings)
    stored: Any     # numpy dtype of the values packed into RecordBatches (None: strings)
    arrow: Any      # pyarrow element type in RecordBatches
    tf: str         # tf.dtypes name of the feature


DTYPE_TABLE = {
    "float": DType("float", float, np.float64, np.float32, pa.float32(), "float32"),
    "int": DType("int", int, np.int64, np.int64, pa.int64(), "int64"),
    "string": DType("string", str, None, None, pa.large_binary(), "string"),
}

class NumberError(ValueError):
    """A field that is not a number of its column's type; `reason` is the reject reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def float32_out_of_range(value: float, text: str) -> bool:
    """True when a finite float64 `value` read from `text` does not survive float32
    storage: beyond float32's range, or non-zero (in value or in text) but stored as 0."""
    magnitude = abs(value)
    if FLOAT32_TINY <= magnitude <= FLOAT32_MAX:  # the common case, without numpy
        return False
    if magnitude > FLOAT32_MAX:
        return True
    if value == 0:
        return NONZERO_MANTISSA_RE.match(text) is not None
    return np.float32(value) == 0


def float32_storable(values: np.ndarray) -> np.ndarray:
    """The vectorised float32_out_of_range for the column and Arrow parsers, apart from the
    text check: True where a float64 value is finite, within float32's range, and not a
    non-zero value float32 would store as 0. (A 0.0 read from non-zero text, `1e-400`, is each
    parser's own text check.)"""
    with np.errstate(over="ignore"):
        ok = np.abs(values) <= FLOAT32_MAX  # False for NaN and inf too
        ok &= (values.astype(np.float32) != 0) | (values == 0)
    return ok


# A clock's text (named groups: RE2, so the Arrow column check reads the same pattern). `f`,
# a fraction of a two-part text, is a duration's only (M:SS.ff: a swimmer's 1:02.35).
CLOCK_PATTERN = (r"^(?P<h>[0-9]{1,4}):(?P<m>[0-5][0-9])"
                 r"(?:(?P<f>\.[0-9]{1,9})|:(?P<s>[0-5][0-9](?:\.[0-9]{1,9})?))?"
                 r"(?: ?(?P<ap>[AaPp])\.?[Mm]\.?)?$")
CLOCK_RE = re.compile(CLOCK_PATTERN)
CLOCK_FORM = "a clock time H:MM[:SS] (am/pm optional) or a number of seconds"
# ColumnSpec.clock's value for elapsed times written as a race's results are: M:SS under an
# hour (58:12, 1:02.35), H:MM:SS past it (1:02:03); no am/pm.
DURATION = "duration"
DURATION_FORM = "a duration M:SS[.ff] or H:MM:SS[.ff], or a number of seconds"


def clock_form(clock) -> str:
    return DURATION_FORM if clock == DURATION else CLOCK_FORM


def clock_seconds(text: str, duration: bool = False):
    """The seconds a clock text (CLOCK_PATTERN) stands for, or None when it is not one: a
    time of day's two parts are hours and minutes, a duration's minutes and seconds."""
    m = CLOCK_RE.match(text)
    if not m:
        return None
    if duration:
        if m["ap"]:
            return None
        if m["s"] is None:
            return int(m["h"]) * 60 + int(m["m"]) + float(m["f"] or 0)
    elif m["f"]:
        return None
    hours = int(m["h"])
    if m["ap"]:
        if not 1 <= hours <= 12:
            return None
        hours = hours % 12 + (12 if m["ap"] in "Pp" else 0)
    return hours * 3600 + int(m["m"]) * 60 + float(m["s"] or 0)


def coerce_value(text: str, dtype: str, decimal: str = ".", clock=False, grouping: str = "",
                 unit: str = ""):
    """Parses one stripped field as the column's type (the grammar above), its numbers
    written with `decimal` as their mark (DECIMAL_MARKS), maybe grouped in threes by
    `grouping` (GROUPING_MARKS) and maybe with their `unit` (is_unit), a negative in
    parentheses where so written (NEGATIVE_PARENS), or as a clock (`clock`: True, or
    DURATION; read as seconds); raises NumberError with the reject reason and a short
    message."""
    if dtype == "string":
        return text
    if text.startswith("(") and reads_parens(decimal, grouping, unit):
        text = re.sub(*NEGATIVE_PARENS, text)
    if unit and unit in text:
        pattern, replacement = unit_pattern(unit)
        dropped = re.sub(pattern, replacement, text)
        if unit in dropped:
            raise NumberError("unparsable_number", f"{text!r} is not a number written with "
                              f"{unit!r}")
        text = dropped
    if grouping and grouping in text:
        if not re.match(grouped_pattern(grouping, decimal), text):
            raise NumberError("unparsable_number", f"{text!r} is not a number grouped in "
                              f"threes by {grouping!r}")
        text = text.replace(grouping, "")
    if clock and ":" in text:
        seconds = clock_seconds(text, clock == DURATION)
        if seconds is None:
            raise NumberError("unparsable_number", f"{text!r} is not {clock_form(clock)}")
        return seconds
    if decimal != ".":
        if "." in text:  # 1.234 where the mark is a comma: a thousands separator, not 1.234
            raise NumberError("unparsable_number", f"{text!r} has a decimal point; this "
                              f"column's numbers are written with a decimal {decimal!r}")
        try:
            return coerce_value(text.replace(decimal, "."), dtype)
        except NumberError as e:
            raise NumberError(e.reason, f"{e} (written {text!r})") from None
    if dtype == "int" and INTEGER_RE.fullmatch(text):
        v = int(text)
        if not INT64_MIN <= v <= INT64_MAX:
            raise NumberError("number_out_of_range", f"{text!r} is beyond int64")
        return v
    if not NUMBER_RE.fullmatch(text):
        if text.lstrip("+-").lower() in ("nan", "inf", "infinity"):
            raise NumberError("non_finite_number", f"non-finite number {text!r}")
        raise NumberError("unparsable_number", f"{text!r} is not a decimal number")
    v = float(text)
    if dtype == "float":
        if not math.isfinite(v) or float32_out_of_range(v, text):
            raise NumberError("number_out_of_range", f"{text!r} is beyond float32")
        return v
    if not v.is_integer():
        raise NumberError("unparsable_number", f"{text!r} is not an integer")
    if abs(v) > EXACT_FLOAT_INT:
        raise NumberError("number_out_of_range", f"{text!r} is not an exact integer")
    return int(v)


# What completes a `ymd` datetime written short, by its length: a date alone (`YYYY-MM-DD`)
# is midnight (UTC), a time without its seconds (`YYYY-MM-DD HH:MM`) that minute's start.
YMD_COMPLETIONS = {10: " 00:00:00", 16: ":00"}
# ColumnSpec.date_order: ISO's year first, a date written month first or day first, or a
# month without its day.
DATE_ORDERS = ("ymd", "mdy", "dmy", "ym")
DATE_ORDER_FORMS = {"ymd": ("YYYY-MM-DD (or YYYY/MM/DD, YYYY.MM.DD)"
                            "[ HH:MM:SS[.fff][Z|UTC|+HH:MM] or HH:MM]"),
                    "mdy": "M/D/YYYY (or M/D/YY, '.' or '-' for '/'; Aug 6, 2009)[ H:MM[:SS]]",
                    "dmy": "D/M/YYYY (or D/M/YY, '.' or '-' for '/'; 6-Aug-09)[ H:MM[:SS]]",
                    "ym": "a year and a month, no day (2018-03, 03/2018, Mar-2018, 1960 Jan, "
                          "1998 Q1)"}
# Two numbers (or a day and a month's name) and a year, one separator, and an optional time
# (named groups: RE2, so Arrow and the transform graph read the same pattern, has no
# back-references; the separators `s1` and `s2`, and the comma `c`, are checked apart:
# ordered_date_ok).
ORDERED_DATE_PATTERN = (r"^(?P<a>[0-9]{1,2}|[A-Za-z]{3,9}\.?)(?P<s1>[/.\- ])"
                        r"(?P<b>[0-9]{1,2}|[A-Za-z]{3,9}\.?)(?P<c>,?)(?P<s2>[/.\- ])"
                        r"(?P<y>[0-9]{4}|[0-9]{2})"
                        r"(?: (?P<H>[0-9]{1,2}):(?P<M>[0-9]{2})(?::(?P<S>[0-9]{2}))?)?$")
ORDERED_DATE_RE = re.compile(ORDERED_DATE_PATTERN)
# A month's English name (lower case, its `.` dropped) -> its number.
MONTH_NAMES = {name: i + 1 for i, full in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september",
     "october", "november", "december")) for name in (full, full[:3])}
MONTH_NAMES["sept"] = 9


def month_number(text: str):
    """The month a date's month field names (`3`, `03`, `Mar`, `march`, `Sept.`), or None."""
    if text.isdigit():
        return int(text)
    return MONTH_NAMES.get(text.lower().rstrip("."))


def ordered_date_ok(m) -> bool:
    """The separators of an ORDERED_DATE_RE match: the same twice; a space (or a comma after
    the day, then before a space) only beside a month's name (`1 3 2011` is no date)."""
    named = not (m["a"].isdigit() and m["b"].isdigit())
    return (m["s1"] == m["s2"] and (named or m["s1"] != " ")
            and (not m["c"] or (named and m["s2"] == " ")))


# A two-digit year below it is in the 2000s, else in the 1900s: Excel's and Google Sheets'
# rule, where such files come from (C's `%y` takes 69: a birth year `45` would be 2045).
TWO_DIGIT_PIVOT = 30


def full_year(text: str) -> int:
    year = int(text)
    if len(text) == 2:
        year += 2000 if year < TWO_DIGIT_PIVOT else 1900
    return year


# A year and a month (or quarter), either first (named groups as above: the year `y1` or
# `y2`, the month `m1` or `m2`, the separator `s1` or `s2`; year_month checks the rest).
YEAR_MONTH_PATTERN = (r"^(?:(?P<y1>[0-9]{4})(?P<s1>[-/ ])(?P<m1>[0-9]{1,2}|[A-Za-z]{3,9}\.?|[Qq][1-4])"
                      r"|(?P<m2>[0-9]{1,2}|[A-Za-z]{3,9}\.?|[Qq][1-4])(?P<s2>[-/ ])"
                      r"(?P<y2>[0-9]{4}|[0-9]{2}))$")
YEAR_MONTH_RE = re.compile(YEAR_MONTH_PATTERN)


def year_month(text: str):
    """(year, month) of a `ym` value (a quarter: its first month), or None: a month's number
    (1-12) needs a four-digit year and `-` or `/`; a two-digit year needs a month's name and
    `-` or `/` (values.TWO_DIGIT_PIVOT)."""
    m = YEAR_MONTH_RE.match(text)
    if not m:
        return None
    year, month, sep = m["y1"] or m["y2"], m["m1"] or m["m2"], m["s1"] or m["s2"]
    if month[0] in "Qq":
        number = 3 * int(month[1]) - 2
    else:
        number = month_number(month)
        if number is None or not 1 <= number <= 12 or (month.isdigit() and sep == " "):
            return None
    if len(year) == 2 and (month[0].isdigit() or month[0] in "Qq" or sep == " "):
        return None
    return (full_year(year), number) if full_year(year) >= 1 else None


def looks_like_datetime(text: str, order: str = "ymd") -> bool:
    if order == "ym":
        return year_month(text) is not None
    if order != "ymd":
        m = ORDERED_DATE_RE.match(text)
        if not m or not ordered_date_ok(m):
            return False
        month_text, day = (m["a"], m["b"]) if order == "mdy" else (m["b"], m["a"])
        month = month_number(month_text)
        if not day.isdigit() or month is None:
            return False
        try:
            datetime.datetime(full_year(m["y"]), month, int(day),
                              int(m["H"] or 0), int(m["M"] or 0), int(m["S"] or 0))
            return True
        except ValueError:
            return False
    text += YMD_COMPLETIONS.get(len(text), "")
    if not DATETIME_RE.match(text) or not DATETIME_TAIL_RE.fullmatch(text[19:]):
        return False
    try:
        datetime.datetime.fromisoformat(f"{text[:4]}-{text[5:7]}-{text[8:19]}")
        return True
    except ValueError:
        return False


class JsonNumber(float):
    """A JSON number with a fraction or exponent that keeps its text: `str()` gives the text,
    so values read from JSON follow the same number grammar as CSV fields (JSON's `1e-400`
    would otherwise be 0.0 and `1e400` infinity before the grammar sees them)."""

    def __new__(cls, text: str):
        obj = super().__new__(cls, text)
        obj.text = text
        return obj

    def __str__(self) -> str:
        return self.text


def parse_json(text):
    """A JSON document (str or bytes), or Reject("invalid_json") saying why it is not one
    (nesting past the parser's recursion limit included: one line must not stop a job)."""
    try:
        return json.loads(text, parse_float=JsonNumber)
    except ValueError as e:
        raise Reject("invalid_json", f"not JSON: {e}") from None
    except RecursionError:
        raise Reject("invalid_json", "nested too deeply") from None
