"""The datetime decision of schema inference (infer.py decides the other columns): a column
whose every present value, but for a few stray texts, is a datetime in one date order
(values.DATE_ORDERS: ISO's, month first, day first, a month alone), read in the order its values
allow."""
from __future__ import annotations

import itertools
from typing import Optional

from preprocessing.contract.schema import ColumnSpec
from preprocessing.contract.values import looks_like_datetime
from preprocessing.schema_inference.column_stats import NA_TOKENS, ColumnStats

DATE_PARTS = ("weekday", "month", "day", "days")  # of a column of dates alone
# Of one with times of day: `days` too, the trend a date alone gets, and the time of day
# as a number (fpp3's bank_calls, calls every 5 minutes over 8 months, RMSE 21.60 / 21.66 /
# 22.08 without both, 18.33 / 18.06 / 18.60 with days, 15.25 / 15.21 / 15.19 with both,
# scikit-learn's 15.32 / 15.22 / 15.25: docs/preprocess.md).
TIMED_PARTS = ("hour", "weekday", "month", "days", "time_of_day")
MONTH_PARTS = ("month", "days")  # of a month without its day (its first day's weekday is noise)
# How a date order is named in a decision, and a missing value's default (a date, a datetime).
DATE_ORDER_NAMES = {"mdy": "month first (M/D/Y, 1/3/2011)",
                    "dmy": "day first (D/M/Y, 03.01.2011)"}
DATE_DEFAULTS = {"ymd": ("1970-01-01", "1970-01-01 00:00:00"),
                 "mdy": ("1/1/1970", "1/1/1970 0:00"), "dmy": ("1/1/1970", "1/1/1970 0:00"),
                 "ym": ("1970-01", "1970-01")}


def dated_column(name: str, s: ColumnStats, missing: int) -> Optional[tuple]:
    """(ColumnSpec, why) of a datetime feature where every present value reads as one in a
    date order (ISO's, or month or day first: the order the values allow, else the one their
    separator suggests), or all but a few texts (ColumnStats.stray_dates), read as missing
    like NA_TOKENS; None where there is none."""
    orders, strays = s.date_orders(), ()
    if not orders:
        orders, strays = s.stray_dates()
        if not orders:
            return None
    kind = "datetime" if s.timed else "date"
    if orders == ("ym",):  # no value of it is a date in another order
        order, what = "ym", ("month without its day (2018-03, Mar-2018, 1998 Q1), read as its "
                             "first day")
    elif "ymd" in orders:
        # as its values write it: `-`, `/` or `.`; a time with its seconds or without
        first = next((v for v in s.distinct if looks_like_datetime(v) and
                      (":" in v or not s.timed)), "0000-00-00 00:00:00")
        form = f"YYYY{first[4]}MM{first[4]}DD"
        if s.timed:
            form += " HH:MM:SS" if len(first) > 16 else " HH:MM"
        order, what = "ymd", f"{form} {kind}"
    elif len(orders) == 1:
        order = orders[0]
        named = any(c.isalpha() for v in itertools.islice(s.distinct, 1000) for c in v[:4])
        what = (f"{kind} written {DATE_ORDER_NAMES[order]}: " + (
            "the month named" if named else
            f"a day past 12 in the {'second' if order == 'mdy' else 'first'} place"))
    else:  # no number past 12: the separator decides (dotted dates are written day first)
        order = "dmy" if any("." in v for v in itertools.islice(s.distinct, 1000)) else "mdy"
        other = "dmy" if order == "mdy" else "mdy"
        what = (f"{kind} written {DATE_ORDER_NAMES[order]}: no number is past 12, so either "
                f"could be the day (a spec's `date_order: {other}` reads them the other way)")
    why = f"every value is a {what}"
    if strays:
        why = (f"every value but {s.not_dated[order]} text value(s) {list(strays)[:3]} is a "
               f"{what}; those read as missing")
    default = DATE_DEFAULTS[order][bool(s.timed)] if missing or strays else None
    if default:
        why += f"; {missing + s.not_dated[order]} missing -> {default}"
    if order == "ym":
        parts = MONTH_PARTS
        why += "; month and days since 1970 (a trend)"
    else:
        parts = TIMED_PARTS if s.timed else DATE_PARTS
        why += (f"; {'hour, ' if s.timed else ''}weekday, month, "
                f"{'' if s.timed else 'day of the month '}and days since 1970 (a trend)"
                f"{', and minutes since midnight' if s.timed else ''}")
    # NA tokens too: inference counted them as missing, so the parser must read them so.
    marks = (NA_TOKENS if s.na else ()) + strays
    return ColumnSpec(name, "string", "datetime", date_order=order, missing=marks,
                      default=default, parts=parts), why
