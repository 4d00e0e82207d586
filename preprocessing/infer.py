"""A schema inferred from the data (like TFX's StatisticsGen + SchemaGen) when no spec file is
given, the image schema, and the CSV head the launch step reads.

Types come from statistics over the whole input (`profile_csv`, Arrow kernels over every
row), never from a sample, so no row is rejected because inference guessed a narrower type
than a later row holds. The rules, per column, over its values with surrounding whitespace
stripped:

- missing: the empty field, and in a numeric column the tokens of NA_TOKENS (`NA`, `?`, ...);
- numeric: every present value is a decimal of the one number grammar (schema.py); `int`
  when every one is an integer literal and the whole input was profiled, else `float`
  (widening: a later `55.3` cannot be rejected). Any other text makes the column a string.
  Integer literals with a leading zero (`02134`) are codes: strings;
- datetime: strings that all look like `YYYY-MM-DD HH:MM:SS`;
- identifiers: strings unique in (nearly) every row, or a gap-free increasing integer
  sequence (row numbers), are not features: the first becomes the key when none is given,
  the others are left out (`transform: none`);
- other strings: a vocabulary when few distinct values, else hashed.

A numeric feature gets `numeric` (z-score + quantile bucket) and, when values are missing,
`default: mean`. `report()` says per column what was decided and why.
"""
from __future__ import annotations

import csv
import dataclasses
import io
from typing import BinaryIO, Dict, Iterable, List, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from preprocessing.parsing import BOM, check_line_ends, header_names
from preprocessing.schema import NUMBER_PATTERN, ColumnSpec, Schema, SchemaError

KEY_NAMES = ("key", "id", "uuid", "unique_key", "trip_id", "example_id")
# Texts that mean "no value" in a numeric column (R, pandas, spreadsheets, surveys).
NA_TOKENS = ("NA", "N/A", "n/a", "na", "NaN", "nan", "NAN", "null", "NULL", "Null", "None",
             "none", "?", "-", "--", ".", "#N/A", "#NA", "missing")
DISTINCT_CAP = 100_000       # distinct values tracked per column; more reads as "many"
ID_SHARE = 0.9               # strings distinct in at least this share of rows are ids
MIN_ID_ROWS = 20
MAX_VOCAB = 1000
CLASSIFICATION_MAX_CLASSES = 20
NUM_BUCKETS = 16             # quantile buckets of a `numeric` feature
EXAMPLES = 3                 # non-numeric texts kept per column for the report
_NUMBER = f"^{NUMBER_PATTERN}$"
_INTEGER = r"^[+-]?[0-9]+$"
_LEADING_ZERO = r"^[+-]?0[0-9]"


@dataclasses.dataclass
class ColumnStats:
    """Mergeable statistics of one column's text values (stripped)."""
    rows: int = 0
    empty: int = 0
    na: int = 0                     # NA_TOKENS
    non_numeric: int = 0            # present values outside the number grammar
    non_integer: int = 0            # numbers that are not integer literals
    leading_zero: int = 0           # integer literals like 007
    non_datetime: int = 0           # present values that are not YYYY-MM-DD HH:MM:SS
    distinct: set = dataclasses.field(default_factory=set)
    distinct_rows: int = 0          # present values `distinct` was counted over
    capped: bool = False            # past DISTINCT_CAP: `distinct` covers a prefix only
    increasing: bool = True         # integer values strictly increasing in file order
    first: Optional[int] = None
    last: Optional[int] = None
    examples: List[str] = dataclasses.field(default_factory=list)

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
        from preprocessing.fast_csv import PY_WHITESPACE, datetime_ok
        s = pc.utf8_trim(values, characters=PY_WHITESPACE)
        self.rows += len(s)
        empty = pc.equal(s, "")
        self.empty += pc.sum(empty).as_py() or 0
        na = pc.is_in(s, value_set=pa.array(NA_TOKENS, s.type))
        self.na += pc.sum(na).as_py() or 0
        present = s.filter(pc.invert(pc.or_(empty, na)))
        if not len(present):
            return
        if self.non_numeric == 0 or self.numeric_examples_wanted():
            is_number = pc.match_substring_regex(present, _NUMBER)
            bad = len(present) - (pc.sum(is_number).as_py() or 0)
            if bad:
                self.non_numeric += bad
                if len(self.examples) < EXAMPLES:
                    odd = present.filter(pc.invert(is_number)).slice(0, EXAMPLES)
                    self.examples += odd.to_pylist()[:EXAMPLES - len(self.examples)]
        if self.non_numeric == 0:
            self._add_numbers(present)
        if self.non_datetime == 0:
            self.non_datetime += int((~datetime_ok(present)).sum())
        if not self.capped:
            self.distinct.update(pc.unique(present).to_pylist())
            self.distinct_rows += len(present)
            self.capped = len(self.distinct) > DISTINCT_CAP

    def numeric_examples_wanted(self) -> bool:
        return len(self.examples) < EXAMPLES and self.non_numeric < EXAMPLES

    def _add_numbers(self, present: pa.Array) -> None:
        if self.non_integer == 0:
            is_int = pc.match_substring_regex(present, _INTEGER)
            self.non_integer += len(present) - (pc.sum(is_int).as_py() or 0)
        if self.non_integer:
            self.increasing = False
            return
        if self.leading_zero == 0:
            self.leading_zero += pc.sum(pc.match_substring_regex(present, _LEADING_ZERO)).as_py() or 0
        if self.increasing and self.empty == 0 and self.na == 0:
            try:
                ints = pc.cast(present, pa.int64()).to_numpy()
            except (pa.ArrowInvalid, OverflowError):
                self.increasing = False
                return
            if (self.last is not None and ints[0] <= self.last) or (np.diff(ints) <= 0).any():
                self.increasing = False
            if self.first is None:
                self.first = int(ints[0])
            self.last = int(ints[-1])
        else:
            self.increasing = False

    def is_row_number(self) -> bool:
        """A gap-free strictly increasing integer sequence in every row (row numbers)."""
        return (self.numeric and self.non_integer == 0 and self.increasing
                and self.empty == 0 and self.na == 0 and self.first is not None
                and self.last - self.first + 1 == self.rows and self.rows >= MIN_ID_ROWS)


@dataclasses.dataclass
class Profile:
    """Statistics of every column over the rows read; `complete`: the whole input was read."""
    header: tuple
    columns: Dict[str, ColumnStats]
    rows: int = 0
    complete: bool = True
    note: str = ""


def profile_tables(header: Sequence[str], tables: Iterable[pa.Table]) -> Profile:
    """A Profile of Arrow tables of string columns named by `header` (in file order)."""
    prof = Profile(tuple(header), {h: ColumnStats() for h in header})
    for table in tables:
        prof.rows += table.num_rows
        for name in header:
            if name in table.column_names:
                col = table.column(name)
                for chunk in col.chunks:
                    prof.columns[name].add(chunk)
    return prof


def profile_rows(header: Sequence[str], rows: Iterable[Sequence[str]]) -> Profile:
    """A Profile of parsed rows (lists of strings); rows of the wrong width are skipped."""
    header = [h.strip() for h in header]
    cols = [[] for _ in header]
    for r in rows:
        if len(r) == len(header):
            for i, v in enumerate(r):
                cols[i].append(v)
    table = pa.table({h: pa.array(c, pa.string()) for h, c in zip(header, cols)})
    return profile_tables(header, [table])


def read_csv_tables(stream: BinaryIO, delimiter: str = ",", block_bytes: int = 8 << 20,
                    max_header_bytes: int = 1 << 20):
    """(header, iterator of Arrow tables of string columns) of a CSV byte stream. Rows with
    the wrong field count are skipped (the pipeline dead-letters them); quoted fields may
    span lines."""
    import pyarrow.csv as pacsv
    first = stream.readline(max_header_bytes).decode("utf-8", errors="replace")
    if first.startswith(BOM):
        first = first[len(BOM):]
    fields = next(csv.reader([first.rstrip("\r\n")], delimiter=delimiter), None)
    if not fields:
        raise SchemaError("the input file is empty (no header row)")
    try:
        header = list(header_names(fields))
    except ValueError as e:
        raise SchemaError(str(e)) from None
    names = [f"c{i}" for i in range(len(header))]
    reader = pacsv.open_csv(
        stream,
        read_options=pacsv.ReadOptions(block_size=block_bytes, use_threads=True,
                                       column_names=names),
        parse_options=pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True,
                                          invalid_row_handler=lambda row: "skip"),
        convert_options=pacsv.ConvertOptions(
            check_utf8=False, strings_can_be_null=False, quoted_strings_can_be_null=False,
            column_types={n: pa.string() for n in names}))

    def tables():
        for batch in reader:
            yield pa.Table.from_batches([batch]).rename_columns(header)

    return header, tables()


def profile_csv(streams: Iterable, delimiter: str = ",", max_bytes: Optional[int] = None,
                progress=None) -> Profile:
    """A Profile over CSV files, given as (name, opener) pairs, the first file's header naming
    the columns; `progress(rows)` is called after each block. Reading stops after `max_bytes`
    of rows (None: all), or at a file Arrow cannot read to the end; then `complete` is False
    and `note` says why."""
    prof, seen = None, 0
    for name, opener in streams:
        try:
            with opener() as f:
                header, tables = read_csv_tables(f, delimiter)
                if prof is None:
                    prof = Profile(tuple(header), {h: ColumnStats() for h in header})
                for table in tables:
                    part = profile_tables(header, [table])
                    _merge_into(prof, part)
                    seen += table.nbytes
                    if progress:
                        progress(table.num_rows)
                    if max_bytes is not None and seen >= max_bytes:
                        prof.complete = False
                        prof.note = f"profiled the first {seen >> 20} MB (--infer_scan_mb)"
                        return prof
        except Exception as e:  # a cut or odd file: the pipeline dead-letters its rows
            if prof is None:
                raise
            prof.complete = False
            prof.note = f"{name}: not profiled to its end ({str(e).splitlines()[0][:200]})"
    if prof is None:
        raise SchemaError("no input to infer the schema from")
    return prof


def _merge_into(prof: Profile, part: Profile) -> None:
    """Adds a later batch's Profile (of the same or another file) to `prof`, by name."""
    prof.rows += part.rows
    for name, s in part.columns.items():
        t = prof.columns.get(name)
        if t is None:
            continue
        if t.rows and s.rows and s.first is not None and t.last is not None \
                and s.first <= t.last:
            t.increasing = False
        for f in ("rows", "empty", "na", "non_numeric", "non_integer", "leading_zero",
                  "non_datetime"):
            setattr(t, f, getattr(t, f) + getattr(s, f))
        t.increasing = t.increasing and s.increasing
        if s.first is not None:
            t.first = s.first if t.first is None else t.first
            t.last = s.last
        t.examples = (t.examples + s.examples)[:EXAMPLES]
        if not t.capped:
            t.distinct |= s.distinct
            t.distinct_rows += s.distinct_rows
            t.capped = s.capped or len(t.distinct) > DISTINCT_CAP


# ---- rules --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Decision:
    spec: ColumnSpec
    role: str      # feature | key | label | left_out
    why: str


def _is_id_string(s: ColumnStats) -> bool:
    return s.present >= MIN_ID_ROWS and s.distinct_share >= ID_SHARE


def decide_column(name: str, s: ColumnStats, complete: bool) -> Decision:
    """The type and transform of a feature column from its statistics (see the module doc)."""
    missing = s.empty + s.na
    if s.present == 0:
        return Decision(ColumnSpec(name, "string", "none", default=""), "left_out",
                        "no values")
    if s.numeric and not (s.leading_zero and s.non_integer == 0):
        if s.is_row_number():
            return Decision(ColumnSpec(name, "int"), "key", "row numbers (a gap-free "
                            "increasing integer sequence): an identifier")
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
    if s.non_datetime == 0 and not s.numeric:
        return Decision(ColumnSpec(name, "string", "datetime",
                                   default="1970-01-01 00:00:00" if missing else None),
                        "feature", "every value is a YYYY-MM-DD HH:MM:SS datetime")
    if _is_id_string(s):
        return Decision(ColumnSpec(name, "string", "none", default=""), "key",
                        f"distinct in {_share(s)} of rows: an identifier")
    d = s.distinct_count
    if d is not None and d <= MAX_VOCAB and d <= max(10, 0.5 * s.present):
        return Decision(ColumnSpec(name, "string", "vocabulary", default=default), "feature",
                        f"{why}; {d} distinct: a vocabulary")
    buckets = max(100, min(10_000, d or 10_000))
    return Decision(ColumnSpec(name, "string", "hash", default=default, hash_buckets=buckets),
                    "feature", f"{why}; {'many' if d is None else d} distinct: hashed")


def _share(s: ColumnStats) -> str:
    return f"{s.distinct_share:.0%}"


def decide_label(name: str, s: ColumnStats) -> tuple:
    """(ColumnSpec, task, why) of the label. Rows without a label are rejected (missing_value):
    NA tokens count as missing there too."""
    missing = NA_TOKENS if s.numeric or s.na else ()
    d = s.distinct_count
    if not s.numeric or (s.leading_zero and s.non_integer == 0):
        return (ColumnSpec(name, "string", missing=missing), "classification",
                f"string label, {d if d is not None else 'many'} classes")
    ints_non_negative = s.non_integer == 0 and d is not None and \
        not any(str(v).startswith("-") for v in s.distinct)
    if ints_non_negative and d <= CLASSIFICATION_MAX_CLASSES:
        return (ColumnSpec(name, "string", missing=missing), "classification",
                f"{d} integer classes")
    return (ColumnSpec(name, "float", missing=missing), "regression", "numeric label")


def infer_from_profile(prof: Profile, label: str, key: Optional[str] = None) -> tuple:
    """(Schema, decisions: {column: Decision}) from a Profile."""
    header = [h.strip() for h in prof.header]
    if label not in header:
        raise SchemaError(f"label column '{label}' is not in the header {header}")
    if key is not None and key not in header:
        raise SchemaError(f"key column '{key}' is not in the header {header}")
    if prof.rows == 0:
        raise SchemaError("no data rows to infer the schema from")
    by_name = key is None and next((h for h in header if h.lower() in KEY_NAMES), None)
    key = key or by_name or None
    decisions, cols, task = {}, [], None
    for name in header:
        s = prof.columns[name]
        if name == label:
            spec, task, why = decide_label(name, s)
            decisions[name] = Decision(spec, "label", why)
        elif name == key:
            decisions[name] = Decision(ColumnSpec(name, "string", default=""), "key",
                                       "--key_column" if not by_name else "named like a key")
        else:
            d = decide_column(name, s, prof.complete)
            if d.role == "key":
                if key is None:
                    key = name
                    d = Decision(ColumnSpec(name, "string", default=""), "key", d.why)
                else:
                    d = Decision(dataclasses.replace(d.spec, transform="none",
                                                     default="" if d.spec.type == "string"
                                                     else None, type="string"),
                                 "left_out", d.why)
            decisions[name] = d
        cols.append(decisions[name].spec)
    return Schema(columns=tuple(cols), label=label, key=key, task=task), decisions


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
                    "missing_rate": round((s.empty + s.na) / max(s.rows, 1), 4),
                    "distinct": s.distinct_count if not s.capped else f">{DISTINCT_CAP}",
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
        check_line_ends(text.split("\n", 1)[0], "the input file")
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
