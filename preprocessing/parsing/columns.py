"""One column of field texts -> typed values, in Arrow's kernels: the column-wise reading of
the value grammar (preprocessing.contract.values) that both column parsers use (`RowParser.parse_many`
over split fields, `fast_csv.parse_block` over a CSV block's bytes).

It takes only what is provably what `coerce_value` / `looks_like_datetime` take (floats
through Arrow's correctly rounded parser, which accepts a subset of what `float()` accepts;
ints and datetimes through patterns that admit nothing those reject) and marks everything
else `bad`: empty fields (defaults and None), non-finite, out of range, `1_000`, a bad date.
Those rows go through `RowParser.parse`, the one place that decides, which gives the value
or the exact reason.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from preprocessing.contract.units import NEGATIVE_PARENS, reads_parens, unit_pattern
from preprocessing.contract.values import (
    CLOCK_PATTERN,
    DATETIME_TAIL_PATTERN,
    DURATION,
    MONTH_NAMES,
    NONZERO_MANTISSA_PATTERN,
    NUMBER_PATTERN,
    ORDERED_DATE_PATTERN,
    TWO_DIGIT_PIVOT,
    YEAR_MONTH_PATTERN,
    YMD_COMPLETIONS,
    YMD_SEPARATORS,
    float32_storable,
    grouped_pattern,
)

# Every character str.strip() removes (str.isspace), so utf8_trim is exactly .strip().
PY_WHITESPACE = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())
_FLOAT = f"^{NUMBER_PATTERN}$"
# The integer grammar's fast subset: what int64 surely holds; other integers go row by row.
_INT = r'^-?[0-9]{1,18}$'
_NONZERO_MANTISSA = "^" + NONZERO_MANTISSA_PATTERN  # '1e-400' casts to 0.0
_DATETIME_TAIL = f"^.{{19}}{DATETIME_TAIL_PATTERN}$"
# Byte ranges per position of YYYY-MM-DD?HH:MM:SS (positions 4 and 7, the date's separators,
# and 10, ' ' or 'T', checked apart).
_LOW = np.frombuffer(b"0000\x0000\x0000 00:00:00", dtype=np.uint8)
_HIGH = np.frombuffer(b"9999\xff99\xff99T99:99:99", dtype=np.uint8)
_YMD_SEPARATORS = np.frombuffer(YMD_SEPARATORS.encode(), dtype=np.uint8)
_NO_DATE = b"0000-00-00 00:00:00"
_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


def mask(arr) -> np.ndarray:
    """A boolean Arrow array as numpy."""
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def join(values: pa.Array, separator) -> pa.Scalar:
    """All of a string array's values joined into one (C++, no Python strings)."""
    lst = pa.LargeListArray.from_arrays(pa.array([0, len(values)], pa.int64()), values)
    return pc.binary_join(lst, pa.scalar(separator, values.type))[0]


def stripped(texts: pa.Array) -> pa.Array:
    return pc.utf8_trim(texts, characters=PY_WHITESPACE)


def convert(s: pa.Array, dtype: str, dates: Optional[str], decimal: str = ".", clock=False,
            grouping: str = "", unit: str = ""):
    """(values, bad) for one column of stripped, non-null texts `s`: values as an Arrow
    string array (strings) or a numpy array (numbers, written with `decimal` as their mark,
    maybe grouped in threes by `grouping`, maybe with their `unit` sign or in parentheses
    for a negative (values.reads_parens), or as
    values.coerce_value's `clock`: seconds),
    datetimes (`dates`: their date order, values.DATE_ORDERS) checked, `bad` a numpy mask of
    the positions the row-by-row parser must redo (their value here is a placeholder)."""
    bad = mask(pc.equal(s, ""))
    empty = bad.copy()
    if dates:
        bad |= ~datetime_ok(s, dates)
    if dtype == "string":
        return s, bad
    if reads_parens(decimal, grouping, unit):  # coerce_value's rule: (5) is -5
        s = pc.replace_substring_regex(s, *NEGATIVE_PARENS)
    if unit:  # coerce_value's rule: the sign where it belongs dropped; elsewhere refused
        s = pc.replace_substring_regex(s, *unit_pattern(unit))
        bad |= mask(pc.match_substring(s, unit))
    if grouping:  # coerce_value's rule: grouped in threes, the mark dropped; else refused
        marked = mask(pc.match_substring(s, grouping))
        bad |= marked & ~mask(pc.match_substring_regex(s, grouped_pattern(grouping, decimal)))
        s = pc.replace_substring(s, grouping, "")
    if clock:  # coerce_value's rule: a text with a ':' is a clock, else a number of seconds
        numbers, bad_number = convert(s, dtype, None, decimal)
        seconds, ok = clock_seconds(s, clock == DURATION)
        colon = mask(pc.match_substring(s, ":"))
        return np.where(colon, seconds, numbers), bad | np.where(colon, ~ok, bad_number)
    if decimal != ".":  # coerce_value's rule: a point there is refused, the mark read as one
        bad |= mask(pc.match_substring(s, "."))
        s = pc.replace_substring(s, decimal, ".")
    if dtype == "int":
        ok = mask(pc.match_substring_regex(s, _INT))
        bad |= ~ok
        return pc.cast(pc.if_else(pa.array(ok), s, "0"), pa.int64()).to_numpy(), bad
    filled = pc.if_else(pa.array(empty), "0", s) if empty.any() else s
    try:
        values = pc.cast(filled, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        ok = mask(pc.match_substring_regex(filled, _FLOAT))
        bad |= ~ok
        values = pc.cast(pc.if_else(pa.array(ok), filled, "0"), pa.float64())
    values = values.to_numpy()
    # Arrow's cast reads the number grammar plus nan/inf; what float32 cannot hold (and
    # NaN) goes to the row path for its reason.
    ok = float32_storable(values)
    zeros = np.flatnonzero(values == 0)
    if len(zeros):
        ok[zeros] &= ~mask(pc.match_substring_regex(s.take(zeros), _NONZERO_MANTISSA))
    bad |= ~ok
    return values, bad


def clock_seconds(s: pa.Array, duration: bool = False) -> tuple:
    """(seconds, ok): values.clock_seconds over a column of stripped texts, vectorised (the
    same sums, so the same float64s); where `ok` is False the value is a placeholder."""
    hours_first, ok, minutes_first, ok_duration = clock_readings(s)
    return (minutes_first, ok_duration) if duration else (hours_first, ok)


def _matched_groups(s: pa.Array, pattern: str) -> tuple:
    """(where `pattern` matches, {group name: its text, "" where empty or no match}). Each
    group is filled apart: the struct's own fill_null with a dict took most of schema
    inference's time (0.39 s a 65,536-row batch against 0.007 s for its fields apart)."""
    m = pc.extract_regex(s, pattern)
    ok = ~mask(pc.is_null(m))
    return ok, {f.name: pc.fill_null(pc.struct_field(m, [i]), "") for i, f in enumerate(m.type)}


def clock_readings(s: pa.Array) -> tuple:
    """(seconds, ok) as a time of day and then as a duration (values.clock_seconds with
    duration False, True) from one pass of the pattern."""
    ok, m = _matched_groups(s, CLOCK_PATTERN)

    def num(field, to=pa.int64()):
        v = m[field]
        return pc.cast(pc.if_else(pc.equal(v, ""), "0", v), to).to_numpy(zero_copy_only=False)

    hours, minutes, seconds, ap = num("h"), num("m"), num("s", pa.float64()), m["ap"]
    twelve = mask(pc.not_equal(ap, ""))
    # a duration: two parts are minutes and seconds (a fraction too); never am/pm
    two = mask(pc.equal(m["s"], ""))
    three_parts = (hours * 3600 + minutes * 60) + seconds
    minutes_first = np.where(two, (hours * 60 + minutes) + num("f", pa.float64()), three_parts)
    ok_duration = ok & ~twelve
    ok &= mask(pc.equal(m["f"], "")) & (~twelve | ((hours >= 1) & (hours <= 12)))
    pm = mask(pc.is_in(ap, value_set=pa.array(["P", "p"])))
    hours = np.where(twelve, hours % 12 + np.where(pm, 12, 0), hours)
    return (hours * 3600 + minutes * 60) + seconds, ok, minutes_first, ok_duration


def _valid_date(year, month, day) -> np.ndarray:
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    dim = _DAYS[np.clip(month, 0, 12)] + ((month == 2) & leap)
    return (year >= 1) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= dim)


_MONTH_KEYS = pa.array(list(MONTH_NAMES))
_MONTH_NUMBERS = np.array([0] + list(MONTH_NAMES.values()))


def _month_of_name(names: pa.Array) -> np.ndarray:
    """values.month_number of month names (lower case, the `.` dropped); 0 where none."""
    key = pc.utf8_lower(pc.replace_substring(names, ".", ""))
    index = pc.fill_null(pc.index_in(key, value_set=_MONTH_KEYS), -1)
    return _MONTH_NUMBERS[index.to_numpy(zero_copy_only=False) + 1]


def _ordered_ok(s, order: str) -> np.ndarray:
    """looks_like_datetime(text, order) for `mdy` / `dmy`, vectorised (values.ORDERED_DATE_PATTERN)."""
    ok, m = _matched_groups(s, ORDERED_DATE_PATTERN)

    def num(field):  # a field's number, 0 where empty or a month's name
        v = m[field]
        v = pc.if_else(pc.match_substring_regex(v, "^[0-9]+$"), v, "0")
        return pc.cast(v, pa.int32()).to_numpy(zero_copy_only=False)

    s1, s2, comma = m["s1"], m["s2"], mask(pc.equal(m["c"], ","))
    digits = {f: mask(pc.match_substring_regex(m[f], "^[0-9]")) for f in ("a", "b")}
    named = ~(digits["a"] & digits["b"])
    ok &= mask(pc.equal(s1, s2)) & (named | ~mask(pc.equal(s1, " ")))
    ok &= ~comma | (named & mask(pc.equal(s2, " ")))
    year = num("y")
    year = np.where(mask(pc.equal(pc.binary_length(m["y"]), 2)),
                    year + np.where(year < TWO_DIGIT_PIVOT, 2000, 1900), year)
    month_field, day_field = ("a", "b") if order == "mdy" else ("b", "a")
    ok &= digits[day_field]
    day = np.where(digits[day_field], num(day_field), 0)
    month = np.where(digits[month_field], num(month_field), _month_of_name(m[month_field]))
    ok &= _valid_date(year, month, day)
    return ok & (num("H") < 24) & (num("M") < 60) & (num("S") < 60)


def _year_month_ok(s) -> np.ndarray:
    """looks_like_datetime(text, "ym") vectorised (values.YEAR_MONTH_PATTERN, year_month)."""
    ok, m = _matched_groups(s, YEAR_MONTH_PATTERN)
    year, month, sep = (pc.binary_join_element_wise(m[a], m[b], "")
                        for a, b in (("y1", "y2"), ("m1", "m2"), ("s1", "s2")))
    digits = mask(pc.match_substring_regex(month, "^[0-9]+$"))
    quarter = mask(pc.match_substring_regex(month, "^[Qq]"))
    number = pc.cast(pc.if_else(pa.array(digits), month, "0"), pa.int32()).to_numpy(
        zero_copy_only=False)
    named = _month_of_name(month)
    spaced = mask(pc.equal(sep, " "))
    ok &= np.where(digits, (number >= 1) & (number <= 12) & ~spaced, quarter | (named > 0))
    two = mask(pc.equal(pc.binary_length(year), 2))
    ok &= ~two | (~digits & ~quarter & ~spaced)
    year_number = pc.cast(pc.if_else(pa.array(ok), year, "1"), pa.int32()).to_numpy(
        zero_copy_only=False)
    return ok & ((year_number >= 1) | two)


def datetime_ok(s, order: str = "ymd") -> np.ndarray:
    """looks_like_datetime, vectorised for ASCII `YYYY-MM-DD[[ T]HH:MM:SS[tail]]` (`/` or `.`
    for both `-`; a valid date and time, a fraction and zone as
    values.DATETIME_TAIL_PATTERN), or for the date
    `order` `mdy` / `dmy` / `ym`; anything else is False and goes to the row-by-row check."""
    n = len(s)
    if n == 0:
        return np.zeros(0, dtype=bool)
    if order == "ym":
        return _year_month_ok(s)
    if order != "ymd":
        return _ordered_ok(s, order)
    for length, tail in YMD_COMPLETIONS.items():  # a date alone: midnight; no seconds: :00
        s = pc.if_else(pc.equal(pc.binary_length(s), length),
                       pc.binary_join_element_wise(s, tail, ""), s)
    tail_ok = mask(pc.match_substring_regex(s, _DATETIME_TAIL))
    head = pc.binary_slice(s.cast(pa.binary()), 0, 19)
    full = mask(pc.equal(pc.binary_length(head), 19))
    head = pc.if_else(pa.array(full), head, pa.scalar(_NO_DATE))
    m = np.frombuffer(join(head, b"").as_buffer(), dtype=np.uint8).reshape(n, 19)
    ok = full & tail_ok & ((m >= _LOW) & (m <= _HIGH)).all(axis=1)  # digits, ':'
    ok &= (m[:, 4] == m[:, 7]) & np.isin(m[:, 4], _YMD_SEPARATORS)  # '-', '/' or '.', twice
    ok &= (m[:, 10] == 32) | (m[:, 10] == 84)  # ' ' or 'T'

    def num(*cols):
        v = np.zeros(n, dtype=np.int32)
        for c in cols:
            v = v * 10 + m[:, c] - 48
        return v

    ok &= _valid_date(num(0, 1, 2, 3), num(5, 6), num(8, 9))
    ok &= (num(11, 12) < 24) & (num(14, 15) < 60) & (num(17, 18) < 60)
    return ok
