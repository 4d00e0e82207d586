"""A number column's unit (ColumnSpec.unit) and an accountant's negative: how every reader
(values.coerce_value, parsing/columns.convert) and schema inference drop them."""
from __future__ import annotations

import re

# A number column's unit sign (ColumnSpec.unit): a currency's before the digits, after the
# number's sign (`$1,234.50`, `-€5`, a space after it allowed), or after the number as
# much of Europe writes it (`1.234,50 €`, `5$`); a percent after the number (`13.5%`,
# `13.5 %`); every reader drops it (13.5% reads 13.5) before the rest. A value without it
# is a plain number; one with it twice is refused.
UNITS = ("", "$", "€", "£", "%")
# Or a word after the number, one a column, as scraped tables write a measure (`23.4 kmpl`,
# `1248 CC`, `74 bhp`, `25 °C`, `90 km/h`): letters (an optional degree sign before, one
# `/letters` and a square or cube after), at most 8 before the slash. Not one that a number
# holds (`e` of 1e5, inf, nan).
UNIT_WORD = re.compile(r"°?[^\W\d_]{1,8}(?:/[^\W\d_]{1,4})?[²³]?")
_NUMBER_WORDS = frozenset({"e", "inf", "infinity", "nan"})


def is_unit(unit) -> bool:
    """Whether `unit` may be a number column's unit (ColumnSpec.unit): UNITS, or a word."""
    return unit in UNITS or (isinstance(unit, str) and UNIT_WORD.fullmatch(unit) is not None
                             and unit.lower() not in _NUMBER_WORDS)


def _has_plural(word: str) -> bool:
    """Whether a unit word is also written with an `s` (`2 years`, `3 kgs`, `5 hrs`): a word
    of two letters or more, no slash, not ending in `s` (`m` and `ms` are two units)."""
    return len(word) >= 2 and word[-1].isalpha() and word[-1] != "s" and "/" not in word


def unit_of(word: str) -> str:
    """The unit a word after a number writes: `years` is `year` (1 year and 2 years are one
    unit), `lbs` is `lb`; `ms` stays `ms`."""
    stem = word[:-1]
    return stem if word.endswith("s") and _has_plural(stem) and is_unit(stem) else word


def unit_pattern(unit: str) -> tuple:
    """(pattern, replacement) that drop `unit` from a number written with it, a unit word
    also in its plural (_has_plural) (RE2's and Python's syntax alike)."""
    u = re.escape(unit) + ("s?" if unit not in UNITS and _has_plural(unit) else "")
    # an alternative's groups that did not take part are empty in Python's and RE2's rewrite
    return (r"^(.+?) ?%$", r"\1") if unit == "%" else \
        (rf"^([+-]?){u} ?(.+)$|^(.+?) ?{u}$", r"\1\2\3")


# An accountant's negative, `(1,234.50)` or `($5)`: read as -1,234.50 in a number column
# written with a separator, a sign or a decimal comma (the spreadsheets that export these);
# a sign inside (`(-5)`) or a parenthesis more is refused. (pattern, replacement): RE2's
# syntax and Python's alike.
NEGATIVE_PARENS = (r"^\(([^()+-][^()]*)\)$", r"-\1")


def reads_parens(decimal: str, grouping: str, unit: str) -> bool:
    """Whether a column so written reads `(5)` as -5 (NEGATIVE_PARENS)."""
    return bool(grouping or unit or decimal != ".")
