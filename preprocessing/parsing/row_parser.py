"""Raw record parsing against the schema: pure functions shared by every job.

A CSV record becomes a tuple of typed values in `schema.columns` order, or a `Reject`
with a reason code (used for counters) and a detail (for the dead-letter record). Valid rows
are packed column-wise into Arrow RecordBatches, the TFXIO format tf.transform runs fastest on.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence

import numpy as np
import pyarrow as pa

from preprocessing.accounting.rejects import Reject
from preprocessing.contract.schema import Schema
from preprocessing.contract.values import (
    DATE_ORDER_FORMS,
    DTYPE_TABLE,
    DURATION,
    JsonNumber,
    NumberError,
    coerce_value,
    looks_like_datetime,
)
from preprocessing.parsing import columns as columns_mod
from preprocessing.parsing.csv_records import delimiter_hint, fit_width, near_names_hint

FEW_ROWS = 8  # parse_many takes fewer rows than this row by row (Arrow's per-call cost)


@dataclasses.dataclass(frozen=True)
class ColumnPlan:
    """How one schema column is read from a file with a given header: the one description
    the row (`RowParser.parse`), column (`parse_many`) and Arrow block (`fast_csv`) parsers
    share, so a rule lives in one place."""
    name: str
    pos: Optional[int]      # the column's field index in the header; None: not in the file
    dtype: str              # "float" | "int" | "string"
    default: object         # the typed default for an empty field; None: empty is an error
    dates: Optional[str]    # a datetime's date order (values.DATE_ORDERS); None: no datetime
    optional: bool          # empty (or absent) without a default reads as None
    missing: frozenset = frozenset()  # texts that read as an empty field ("NA", "?")
    decimal: str = "."      # a number's decimal mark (ColumnSpec.decimal)
    clock: bool = False     # numbers written as a clock, read as seconds (ColumnSpec.clock)
    grouping: str = ""      # a number's thousands separator (ColumnSpec.grouping)
    unit: str = ""          # a number's unit sign (ColumnSpec.unit)


class RowParser:
    """Parses field lists with a given header into typed tuples in schema column order.
    `plan` (one ColumnPlan per schema column) and `width` (fields per record) are public:
    the column-wise parsers read them."""

    def __init__(self, schema: Schema, header: Sequence[str], optional: Sequence[str] = (),
                 whole_columns: bool = False):
        """`optional` columns may be absent or empty (value None), e.g. the label at serving.
        With `whole_columns`, every other column must be in the header, a column with a
        default too (a model's input absent from a file is no empty field: each row would
        be read with the default)."""
        self.schema = schema
        self.header = [h.strip() for h in header]
        positions = {h: i for i, h in enumerate(self.header)}
        self.missing_columns = [c.name for c in schema.columns
                                if c.name not in positions and c.name not in optional
                                and (c.required or whole_columns)]
        self.plan = [ColumnPlan(
            c.name, positions.get(c.name), c.type, c.typed_default(),
            c.date_order if c.transform == "datetime" else None, c.name in optional,
            frozenset(c.missing), c.decimal, c.clock, c.grouping, c.unit)
            for c in schema.columns]
        self.width = len(self.header)
        # field position -> the decimal mark of a column not written with a point
        self._marks = {c.pos: c.decimal for c in self.plan
                       if c.pos is not None and c.decimal != "."}

    def parse(self, fields: Optional[Sequence[str]]) -> tuple:
        if fields is None:
            raise Reject("malformed_csv", "the record is not valid CSV (unbalanced quotes?)")
        if self.missing_columns:
            raise Reject("missing_column",
                         f"the file's header lacks column(s) {self.missing_columns}"
                         f"{near_names_hint(self.missing_columns, self.header)}"
                         f"{delimiter_hint(self.header)}")
        if len(fields) != self.width:
            fitted = fit_width(fields, self.width)
            if fitted is None:
                raise Reject("wrong_column_count",
                             f"expected {self.width} fields, found {len(fields)}")
            fields = fitted
        values = []
        for c in self.plan:
            text = fields[c.pos].strip() if c.pos is not None else ""
            if text == "" or text in c.missing:
                if c.default is None and c.optional:
                    values.append(None)
                    continue
                if c.default is None:
                    raise Reject("missing_value",
                                   f"column '{c.name}' is empty and has no default")
                values.append(c.default)
                continue
            if c.dates and not looks_like_datetime(text, c.dates):
                raise Reject("unparsable_datetime", f"column '{c.name}': {text!r} is not "
                                                    f"{DATE_ORDER_FORMS[c.dates]}")
            try:
                values.append(coerce_value(text, c.dtype, c.decimal, c.clock, c.grouping,
                                           c.unit))
            except NumberError as e:
                mark = (f" as a {'duration' if c.clock == DURATION else 'clock'}" if c.clock
                        else ("" if c.decimal == "." else f" with a decimal {c.decimal!r}")
                        + (f" grouped in threes by {c.grouping!r}" if c.grouping else "")
                        + (f" written with {c.unit!r}" if c.unit else ""))
                raise Reject(e.reason, f"column '{c.name}': cannot read {text!r} as "
                                       f"{c.dtype}{mark} ({e.reason})") from None
        return tuple(values)

    def parse_many(self, fields_list: Sequence[Optional[Sequence[str]]]) -> "ColumnBlock":
        """Parses many records column by column; the same values and reasons as `parse`.

        Each column is converted in Arrow (preprocessing.parsing.columns, as the CSV block parser
        does); only the rows it cannot take (empty fields, defaults, bad values, wrong width)
        go through `parse` one by one, which gives their exact value or reason. Valid rows
        come first in input order, then the valid slow-path rows.
        """
        n = len(fields_list)
        if self.missing_columns or n < FEW_ROWS:  # a few rows: Arrow's per-call cost dominates
            return self._parse_rows(fields_list, range(n), [], [])
        width = self.width
        good = [i for i, f in enumerate(fields_list) if f is not None and len(f) == width]
        rows = [fields_list[i] for i in good] if len(good) != n else fields_list
        slow = set()
        columns = []
        for c in self.plan:
            if c.pos is None:  # absent optional column: its default, or None
                columns.append(("const", c.default))
                continue
            try:
                texts = columns_mod.stripped(pa.array([f[c.pos] for f in rows], pa.string()))
            except (pa.ArrowException, UnicodeError):  # e.g. a lone surrogate from JSON
                slow.update(range(len(rows)))
                columns.append(("values", [None] * len(rows)))
                continue
            values, bad = columns_mod.convert(texts, c.dtype, c.dates, c.decimal, c.clock,
                                              c.grouping, c.unit)
            if c.dtype == "string":
                values = values.to_pylist()
            slow.update(np.flatnonzero(bad).tolist())
            columns.append(("values", values))
        keep = [j for j in range(len(rows)) if j not in slow] if slow else None
        fast_index = good if keep is None else [good[j] for j in keep]
        out = []
        for c, (kind, values) in zip(self.schema.columns, columns):
            if kind == "const":
                out.append([values] * len(fast_index))
            elif c.type == "string":
                out.append(values if keep is None else [values[j] for j in keep])
            else:
                arr = np.asarray(values, dtype=DTYPE_TABLE[c.type].parsed)
                out.append(arr if keep is None else arr[keep])
        slow_index = sorted(set(range(n)) - set(fast_index)) if len(fast_index) != n else []
        return self._parse_rows(fields_list, slow_index, out, fast_index)

    def _parse_rows(self, fields_list, indices, columns, index) -> "ColumnBlock":
        """Row-by-row `parse` of `indices`, appended to the given columns."""
        columns = list(columns) if columns else [[] for _ in self.schema.columns]
        index = list(index)
        errors = []
        extra = []
        for i in indices:
            try:
                extra.append(self.parse(fields_list[i]))
                index.append(i)
            except Reject as e:
                errors.append((i, e))
        append_rows(columns, extra)
        return ColumnBlock(columns, index, errors)

    def parse_dict(self, obj: dict) -> tuple:
        """Parses a JSON-style mapping (values may already be typed). A JSON number is a
        number in any column: in one written with a decimal comma, its point is read as the
        mark (texts there follow the column's mark, as a CSV file's do)."""
        fields = []
        for i, h in enumerate(self.header):
            v = obj.get(h)
            text = "" if v is None else str(v)
            if i in self._marks and isinstance(v, (int, float, JsonNumber)) and \
                    not isinstance(v, bool):
                text = text.replace(".", self._marks[i])
            fields.append(text)
        return self.parse(fields)


class ColumnBlock:
    """Parsed records, column-wise: the one shape every column parser gives (`parse_many`,
    `fast_csv.parse_block`). `columns[k]` (schema column order: a numpy array for a numeric
    column without None, an Arrow string array, or a list) holds the values of the valid
    records `index` (their positions in the input, aligned with the columns); `errors` lists
    (position, Reject). A block parsed from CSV bytes also keeps its `lines` (an Arrow
    array, line endings stripped; positions index it) and `record_count` (its non-empty
    lines, i.e. CSV records)."""

    __slots__ = ("columns", "index", "errors", "lines", "record_count")

    def __init__(self, columns, index, errors, lines=None, record_count=None):
        self.columns, self.index, self.errors = columns, index, errors
        self.lines = lines
        self.record_count = len(index) + len(errors) if record_count is None else record_count

    def __len__(self):
        return len(self.index)

    def rows(self) -> List[tuple]:
        cols = [c.tolist() if isinstance(c, np.ndarray) else
                c.to_pylist() if isinstance(c, pa.Array) else c for c in self.columns]
        return list(zip(*cols)) if cols else [() for _ in self.index]


def append_rows(columns: list, rows: Sequence[tuple]) -> None:
    """Appends parsed rows to value columns in place, keeping each column's kind (numpy
    array, Arrow string array) where the new values fit it, else turning it into a list."""
    for k, col in enumerate(zip(*rows)):
        base = columns[k]
        if None not in col:
            try:
                if isinstance(base, np.ndarray):
                    columns[k] = np.concatenate([base, np.asarray(col, dtype=base.dtype)])
                    continue
                if isinstance(base, pa.Array):
                    columns[k] = pa.concat_arrays([base, pa.array(col, base.type)])
                    continue
            except (OverflowError, ValueError, TypeError, pa.ArrowException):
                pass
        columns[k] = (base.to_pylist() if isinstance(base, pa.Array) else
                      base.tolist() if isinstance(base, np.ndarray) else list(base)) + list(col)


def concat_columns(parts: list):
    """Value columns of consecutive batches as one (numpy, Arrow or a list, as they are)."""
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts)
    if all(isinstance(p, pa.Array) for p in parts) and len({p.type for p in parts}) == 1:
        return pa.concat_arrays(parts)
    out = []
    for p in parts:
        out += p.tolist() if isinstance(p, np.ndarray) else \
            p.to_pylist() if isinstance(p, pa.Array) else list(p)
    return out


def refuse_near_names(used: Sequence[str], present, lacks: str) -> None:
    """A `missing_column` Reject ("`lacks` [names] (it has ...)") where names `used` are
    absent from `present` (a JSON object's keys, a tf.Example's features) that holds them
    under another case or punctuation; a name simply left out reads as its default."""
    absent = [n for n in used if n not in present]
    near = absent and near_names_hint(absent, list(present), "it")
    if near:
        raise Reject("missing_column", f"{lacks} {absent}{near}")


def example_to_fields(serialized: bytes, header: Sequence[str],
                      used: Sequence[str] = ()) -> List[str]:
    """A serialized raw tf.Example as text fields in `header` order ('' where absent; a
    `used` feature absent while the Example holds it under another case or punctuation is a
    `missing_column`, as a JSON object's key is).

    Going through text keeps one validation path (RowParser) for CSV, JSON and tf.Example.
    """
    from tensorflow.core.example import example_pb2
    try:
        ex = example_pb2.Example.FromString(serialized)
    except Exception as e:  # protobuf's DecodeError: not a tf.Example
        raise Reject("bad_example", f"not a serialized tf.Example ({type(e).__name__})") from None
    feats = ex.features.feature
    refuse_near_names(used, feats, "the tf.Example lacks feature(s)")
    out = []
    for name in header:
        f = feats.get(name)
        if f is None:
            out.append("")
            continue
        kind = f.WhichOneof("kind")
        values = getattr(f, kind).value if kind else []
        if len(values) == 0:
            out.append("")
        elif len(values) > 1:
            raise Reject("bad_example", f"feature '{name}' has {len(values)} values, expected 1")
        else:
            v = values[0]
            out.append(v.decode("utf-8", errors="replace") if isinstance(v, bytes) else repr(v)
                       if isinstance(v, float) else str(v))
    return out
