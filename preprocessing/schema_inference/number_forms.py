"""The number-form part of a column's statistics (ColumnStats): its values read as numbers
written otherwise than the grammar (contract/values.py) writes them: with a decimal comma
(39,1, in a file not delimited by commas: `comma_view`), or with thousands separators and a
unit sign (1,234,567.5, $5, 13.5%, in a comma-delimited one: `written_view`), for schema
inference (infer._as_numbers)."""
from __future__ import annotations

import copy
import dataclasses
import re
from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc

from preprocessing.contract.units import (
    NEGATIVE_PARENS,
    UNIT_WORD,
    UNITS,
    is_unit,
    unit_of,
    unit_pattern,
)
from preprocessing.contract.values import (
    DECIMAL_COMMA_PATTERN,
    NUMBER_PATTERN,
    grouped_pattern,
)
from preprocessing.schema_inference.strays import STRAY_TEXT_SHARE

_NUMBER = f"^{NUMBER_PATTERN}$"
_DECIMAL_COMMA = f"^{DECIMAL_COMMA_PATTERN}$"  # 39,1: a European spreadsheet's number
# 1.234.567,5 (or 1.234 beside a decimal comma): its thousands grouped by points
_DOT_GROUPED = grouped_pattern(".", ",")
_COMMA_NUMBER = f"{_DECIMAL_COMMA}|{_DOT_GROUPED}"
_GROUPED = grouped_pattern(",")  # 1,234,567.5: a report's or a spreadsheet's number
# What a number may be written with besides the grammar (_view_written): a separator, a sign.
_MARKS = "[" + re.escape("," + "".join(UNITS[1:])) + "]"


# A number and a word after it: the word may be the column's unit (units.UNIT_WORD), read
# in Python over a sample's values that end in a letter (most end in a digit).
_WORD_AFTER = re.compile(r"[+-]?\(?[0-9][0-9.,]*\)? ?(" + UNIT_WORD.pattern + ")")
UNIT_PROBES = 3          # batches whose first UNIT_PROBE_VALUES are searched for unit words
UNIT_PROBE_VALUES = 2_000
UNIT_WORDS_MAX = 3       # past one the column has no one unit (unit()); more are not kept
WORD_UNIT_SHARE = 0.5    # a unit word is carried by at least this share of the values


def _without_units(s: pa.Array, words: tuple = ()) -> tuple:
    """(`s` with an accountant's `(5)` read as -5 (units.NEGATIVE_PARENS: the readers do so
    in a column written with a separator, a sign or a decimal comma) and each unit sign, or
    unit word of `words`, dropped where it belongs (units.unit_pattern), {unit: values
    written with it})."""
    if pc.any(pc.match_substring(s, "(")).as_py():  # a plain search first: most have none
        s = pc.replace_substring_regex(s, *NEGATIVE_PARENS)
    counts = {}
    for unit in UNITS[1:] + words:
        if not pc.any(pc.match_substring(s, unit)).as_py():
            continue
        pattern, replacement = unit_pattern(unit)
        signed = pc.sum(pc.match_substring_regex(s, pattern)).as_py() or 0
        if signed:
            counts[unit] = signed
            s = pc.replace_substring_regex(s, pattern, replacement)
    return s, counts


class NumberFormStats:
    """ColumnStats' methods over its number-form fields (decimal_comma, only_numbers,
    reads_commas, comma_view, points; grouped, units, unwritten, written_view)."""

    def _find_unit_words(self, s: pa.Array) -> None:
        """Adds to `unit_words` the words written after a number (`23.4 kmpl`) among the
        first values of the first UNIT_PROBES batches of stripped values `s`."""
        if self.unit_probes >= UNIT_PROBES or len(self.unit_words) >= UNIT_WORDS_MAX or \
                not len(s):
            return
        self.unit_probes += 1
        counts = {}
        for value in s.slice(0, UNIT_PROBE_VALUES).to_pylist():
            if value and (value[-1].isalpha() or value[-1] in "²³"):  # most end in a digit
                m = _WORD_AFTER.fullmatch(value)
                if m and is_unit(m[1]):
                    unit = unit_of(m[1])
                    counts[unit] = counts.get(unit, 0) + 1
        new = [w for w in sorted(counts, key=counts.get, reverse=True) if w not in self.unit_words]
        self.unit_words = (self.unit_words + tuple(new))[:UNIT_WORDS_MAX]

    def _count_decimal_commas(self, present: pa.Array, is_number=None) -> None:
        """Counts the values that are no number but one with a decimal comma (maybe grouped
        by points), a unit sign dropped, and those that are neither (`uncomma`); stops once
        these are more than a few strays (STRAY_TEXT_SHARE of the values: only_numbers).
        A numeric column costs nothing: no value is left."""
        if is_number is None:
            is_number = pc.match_substring_regex(present, _NUMBER)
        others = present.filter(pc.invert(is_number))
        if len(others):
            others = _without_units(others, self.unit_words)[0]
            commas = pc.sum(pc.match_substring_regex(others, _COMMA_NUMBER)).as_py() or 0
            plain = pc.sum(pc.match_substring_regex(others, _NUMBER)).as_py() or 0
            self.uncomma += len(others) - commas - plain
            self.only_numbers = self.uncomma <= STRAY_TEXT_SHARE * self.present
            self.decimal_comma += commas

    def _view_with_commas(self, s: pa.Array, na: pa.Array) -> None:
        """Feeds comma_view the stripped values `s` (before they are added here; `na`: those
        of NA_TOKENS, "." among them, which is no point) with a decimal comma read as a
        point and points grouping thousands dropped (1.234,5; `dot_grouped` counts them),
        while no other value holds a point and they may all be numbers; until the first
        value with a decimal comma the view would equal these statistics, so it is copied
        from them then (a 1.234 before it is 1.234 there, 1234 read: a float either way)."""
        if self.points or not self.only_numbers or (self.comma_view and
                                                    self.comma_view.mostly_text):
            return
        s = self._drop_units(s)
        grouped = pc.and_(pc.match_substring_regex(s, _DOT_GROUPED), pc.match_substring(s, "."))
        self.points += pc.sum(pc.and_(pc.match_substring(s, "."), pc.invert(
            pc.or_(na, grouped)))).as_py() or 0
        self.dot_grouped += pc.sum(grouped).as_py() or 0
        comma = pc.match_substring_regex(s, _COMMA_NUMBER)
        if self.points or (self.comma_view is None and not self.units and not pc.any(
                pc.match_substring(s.filter(comma), ",")).as_py()):
            return
        if self.comma_view is None:
            self.comma_view = dataclasses.replace(copy.deepcopy(self), reads_commas=False)
        read = pc.replace_substring(pc.if_else(grouped, pc.replace_substring(s, ".", ""), s),
                                    ",", ".")
        self.comma_view.add(pc.if_else(comma, read, s))

    def _view_written(self, s: pa.Array) -> None:
        """Feeds written_view the stripped values `s` (before they are added here) with each
        unit sign where it belongs dropped, then the separators of those grouped in threes
        (the others, `12,34` or words, are texts there, maybe a few strays), until the view
        is mostly text; until the first value holding a ',' or a sign the view would equal
        these statistics, so it is copied then."""
        if self.written_view is not None and self.written_view.mostly_text:
            self.unwritten, self.written_view = True, None
            return
        if self.written_view is None and not pc.any(pc.match_substring_regex(s, _MARKS)).as_py() \
                and not any(pc.any(pc.match_substring(s, w)).as_py() for w in self.unit_words):
            return
        s = self._drop_units(s)
        grouped = pc.match_substring_regex(s, _GROUPED)
        self.grouped += pc.sum(grouped).as_py() or 0
        if self.written_view is None:
            self.written_view = dataclasses.replace(copy.deepcopy(self), unwritten=True,
                                                    clocks_only=False, clock_view=None)
        self.written_view.add(pc.if_else(grouped, pc.replace_substring(s, ",", ""), s))

    def _drop_units(self, s: pa.Array) -> pa.Array:
        """`s` without its unit signs, each sign's values counted in `units`."""
        s, counts = _without_units(s, self.unit_words)
        for unit, n in counts.items():
            self.units[unit] = self.units.get(unit, 0) + n
        return s

    def unit(self) -> Optional[str]:
        """The unit most values written with one were written with ("" for none); None where
        those written with another are more than a few strays (STRAY_TEXT_SHARE of the
        present values): `5 €` beside `$5`, `1 year` beside `2 years`, or where a word is
        carried by under WORD_UNIT_SHARE of them. The few are refused by every reader
        (unparsable_number), as a text in a number column is."""
        units = self._ranked_units()
        if not units:
            return ""
        (n, unit), present = units[0], self.present
        if unit not in UNITS and n < WORD_UNIT_SHARE * present:
            return None  # a suffix of some values: Galton's family `136A`, a quarter's `1OT`
        return unit if self.other_units() <= STRAY_TEXT_SHARE * present else None

    def other_units(self) -> int:
        """Values written with a unit other than the one most are written with."""
        return sum(n for n, _ in self._ranked_units()[1:])

    def _ranked_units(self) -> list:
        """[(values, unit)] of the units values were written with, the most used first."""
        return sorted(((n, u) for u, n in self.units.items() if n), reverse=True)

    def written_numbers(self) -> tuple:
        """(the statistics of the column read with its unit sign dropped and ',' as a
        thousands separator, the grouping, the unit: ColumnSpec's) where some values are so
        written (1,234, $5, 13.5%), with one sign at most, and the view numbers but for a few
        texts (whether those may be read as missing is decided on them as on any column);
        else (None, "", "")."""
        view, unit = self.written_view, self.unit()
        if view is None or self.unwritten or view.mostly_text or view.rows != self.rows or \
                unit is None or not (self.grouped or unit):
            return None, "", ""
        return view, "," if self.grouped else "", unit

    def comma_numbers(self) -> Optional["NumberFormStats"]:
        """The statistics of the column read with a decimal comma (ColumnSpec.decimal ","),
        and points as thousands separators where some group them (`dot_grouped`:
        ColumnSpec.grouping "."), where that makes every present value a number but for a
        few stray texts (decided on as in any column), some written 39,1, no other holds a
        point, and one unit at most; else None."""
        view, unit = self.comma_view, self.unit()
        if view is None or unit is None or not (self.decimal_commas or self.only_numbers and unit) \
                or self.points or view.mostly_text or view.present == 0 \
                or view.rows != self.rows:
            return None
        return view

    @property
    def unread_commas(self) -> bool:
        """decimal_commas, and neither reading (comma_numbers, written_numbers) takes them."""
        return self.decimal_commas and self.comma_numbers() is None and \
            self.written_numbers()[0] is None

    @property
    def decimal_commas(self) -> bool:
        """Every present value a number but for a few strays, some written with a decimal
        comma (39,1): numbers the grammar's decimal points alone read as text."""
        return self.only_numbers and self.decimal_comma > 0
