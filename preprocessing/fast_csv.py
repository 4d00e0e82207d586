"""Column-wise parsing of a whole block of CSV bytes with Arrow (batch prediction's fast path).

`parse_block` reads the same `RowParser.plan` (one ColumnPlan per column) and gives exactly
what the row-by-row path (`iter_csv_records` -> `split_fields`
-> `RowParser.parse`) gives for the same bytes: the same valid rows with the same values, the
same rejects with the same reasons and line numbers. It gets there by doing in Arrow's C++
kernels only what is provably the same, and handing everything else to that Python path:

- a line goes to Arrow's CSV reader only if it is strict, single-line CSV with exactly the
  header's field count (one RE2 match per line); Arrow is more lenient than Python's csv
  module (`"a"b` is `ab` to Arrow, an error to csv), so nothing else may reach it. A block
  without quotes needs no pattern: there, Arrow's own field count check is the same test;
- each field is stripped with exactly `str.strip`'s whitespace set, floats go through Arrow's
  correctly rounded parser (which accepts a subset of what `float()` accepts), ints and
  datetimes through patterns that only admit what `int()` / `looks_like_datetime` accept;
- any field those rules do not take (empty, non-finite, `1_000`, a bad date...) sends its
  row through `RowParser.parse`, which gives the value or the exact reason;
- a block with invalid UTF-8 or a quoted field spanning lines returns None: the caller
  parses the whole block the row-by-row way (dead letters for bad bytes, joined records).
"""
from __future__ import annotations

import io
from typing import List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from preprocessing.parsing import RowParser, append_rows, split_fields
from preprocessing.rejects import Reject
from preprocessing.values import NUMBER_PATTERN, float32_storable

# Every character str.strip() removes (str.isspace), so utf8_trim is exactly .strip().
PY_WHITESPACE = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())
# One CSV field as Python's csv module (strict) and Arrow read it identically: unquoted
# without quotes, or quoted with doubled inner quotes and nothing after the closing quote.
_FIELD = r'(?:[^",]*|"(?:[^"]|"")*")'
_FLOAT = f"^{NUMBER_PATTERN}$"
_INT = r'^-?[0-9]{1,18}$'  # what int() reads and int64 holds; others go row by row
_NONZERO_MANTISSA = r'^[^eE]*[1-9]'  # '1e-400' casts to 0.0
# Byte ranges per position of YYYY-MM-DD?HH:MM:SS (position 10, ' ' or 'T', checked apart).
_LOW = np.frombuffer(b"0000-00-00 00:00:00", dtype=np.uint8)
_HIGH = np.frombuffer(b"9999-99-99T99:99:99", dtype=np.uint8)
_NO_DATE = b"0000-00-00 00:00:00"
_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


class FastBlock:
    """A parsed block: `columns` (schema order: numpy arrays for numeric columns, Arrow
    string arrays, or lists where a value is None) for the valid rows, `rows` (their line
    indices within `lines`, fast-path rows first, then rows parsed one by one, each in line
    order), `errors` ((line index, Reject)), `lines` (the block's lines, line endings
    stripped) and `records` (how many non-empty lines, i.e. CSV records, the block held)."""

    __slots__ = ("columns", "rows", "errors", "lines", "records")

    def __init__(self, columns, rows, errors, lines, records):
        self.columns, self.rows, self.errors = columns, rows, errors
        self.lines, self.records = lines, records

    def __len__(self):
        return len(self.rows)


def join(values: pa.Array, separator) -> pa.Scalar:
    """All of a string array's values joined into one (C++, no Python strings)."""
    lst = pa.LargeListArray.from_arrays(pa.array([0, len(values)], pa.int64()), values)
    return pc.binary_join(lst, pa.scalar(separator, values.type))[0]


def _line_pattern(width: int) -> str:
    return "^" + _FIELD + ("(?:," + _FIELD + "){%d}" % (width - 1) if width > 1 else "") + "$"


def _mask(arr) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def parse_block(parser: RowParser, data: bytes) -> Optional[FastBlock]:
    """Parses CSV records (no header) in `data`; None where only the row-by-row path may."""
    if parser.missing_columns or not data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = pc.split_pattern(pa.array([text], pa.large_string()), "\n").flatten()
    if text.endswith("\n"):
        lines = lines.slice(0, len(lines) - 1)
    crlf = "\r" in text
    if crlf:  # records are rstrip("\r\n")'d; a bare CR inside a line is csv's business
        lines = pc.utf8_rtrim(lines, characters="\r")
        if pc.any(pc.match_substring(lines, "\r")).as_py():
            return None
    nonempty = _mask(pc.greater(pc.binary_length(lines), 0))
    table = None
    if '"' not in text and not crlf:
        # Without quotes a line is strict CSV iff it has the header's field count: Arrow
        # reads the block as it is (empty lines skipped, as by iter_csv_records) and skips
        # the other lines, which are then found by counting commas.
        skipped = []
        table = _read(data, parser.width, lambda row: skipped.append(row) or "skip")
        strict = _comma_counts(data, len(lines)) == parser.width - 1 if skipped else nonempty
    else:
        strict = _mask(pc.match_substring_regex(lines, _line_pattern(parser.width)))
    fast = nonempty & strict
    odd = np.flatnonzero(nonempty & ~strict)
    if table is None and any(lines[int(i)].as_py().count('"') % 2 for i in odd):
        return None  # a quoted field spans lines: records are not lines
    fast_idx = np.flatnonzero(fast)
    if table is None and len(fast_idx):
        buf = data if len(fast_idx) == int(nonempty.sum()) and not crlf else join(
            lines.filter(pa.array(fast)), "\n").as_buffer()
        table = _read(buf, parser.width)
    if table is not None and table.num_rows != len(fast_idx):
        return None  # never expected: the pattern admits only one-record lines
    columns, bad = _convert(parser, table, len(fast_idx))
    keep = ~bad
    rows = fast_idx[keep]
    slow = np.sort(np.concatenate([fast_idx[bad], odd]))
    out = []
    for kind, values in columns:
        if kind == "const":
            out.append([values] * len(rows))
        elif isinstance(values, np.ndarray):
            out.append(values[keep] if bad.any() else values)
        else:
            out.append(values.filter(pa.array(keep)) if bad.any() else values)
    return _with_slow_rows(parser, lines, out, rows, slow, int(nonempty.sum()))


def _comma_counts(data: bytes, n: int) -> np.ndarray:
    """Commas on each of the first n lines of data (lines split at b"\\n")."""
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)
    ends = np.append(ends, len(buf))[:n] if len(ends) < n else ends[:n]
    return np.diff(np.searchsorted(np.flatnonzero(buf == 44), ends), prepend=0)


def _read(buf: bytes, width: int, invalid_row_handler=None) -> pa.Table:
    names = [f"c{i}" for i in range(width)]
    return pacsv.read_csv(
        pa.BufferReader(buf) if isinstance(buf, pa.Buffer) else io.BytesIO(buf),
        read_options=pacsv.ReadOptions(column_names=names, use_threads=False,
                                       block_size=max(len(buf) + 1, 1 << 20)),
        parse_options=pacsv.ParseOptions(newlines_in_values=False,
                                          invalid_row_handler=invalid_row_handler),
        convert_options=pacsv.ConvertOptions(
            column_types={n: pa.string() for n in names}, strings_can_be_null=False,
            quoted_strings_can_be_null=False))


def _convert(parser: RowParser, table, n: int):
    """[(kind, values)] per schema column for the n fast rows, and the rows to redo by hand."""
    bad = np.zeros(n, dtype=bool)
    columns = []
    for c in parser.plan:
        if c.pos is None:  # absent optional column: its default, or None (as parse)
            columns.append(("const", c.default))
            continue
        col = table.column(c.pos).combine_chunks() if n else pa.array([], pa.string())
        s = pc.utf8_trim(col, characters=PY_WHITESPACE)
        empty = _mask(pc.equal(s, ""))
        if empty.all() and c.optional and c.default is None and n:
            columns.append(("const", None))
            continue
        bad |= empty  # defaults and None: parse's business
        if c.is_datetime:
            bad |= ~datetime_ok(s)
        if c.dtype == "string":
            columns.append(("values", s))
            continue
        if c.dtype == "int":
            ok = _mask(pc.match_substring_regex(s, _INT))
            bad |= ~ok
            columns.append(("values", pc.cast(pc.if_else(pa.array(ok), s, "0"),
                                              pa.int64()).to_numpy()))
            continue
        filled = pc.if_else(pa.array(empty), "0", s) if empty.any() else s
        try:
            values = pc.cast(filled, pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            ok = _mask(pc.match_substring_regex(filled, _FLOAT))
            bad |= ~ok
            values = pc.cast(pc.if_else(pa.array(ok), filled, "0"), pa.float64())
        values = values.to_numpy()
        # Arrow's cast reads the number grammar plus nan/inf; what float32 cannot hold (and
        # NaN) goes to the row path for its reason.
        ok = float32_storable(values)
        zeros = np.flatnonzero(values == 0)
        if len(zeros):
            ok[zeros] &= ~_mask(pc.match_substring_regex(s.take(zeros), _NONZERO_MANTISSA))
        if not ok.all():
            bad |= ~ok
        columns.append(("values", values))
    return columns, bad


def datetime_ok(s) -> np.ndarray:
    """looks_like_datetime, vectorised for ASCII `YYYY-MM-DD[ T]HH:MM:SS...` (a valid
    date and time); anything else is False and goes to the row-by-row check."""
    n = len(s)
    if n == 0:
        return np.zeros(0, dtype=bool)
    head = pc.binary_slice(s.cast(pa.binary()), 0, 19)
    full = _mask(pc.equal(pc.binary_length(head), 19))
    head = pc.if_else(pa.array(full), head, pa.scalar(_NO_DATE))
    m = np.frombuffer(join(head, b"").as_buffer(), dtype=np.uint8).reshape(n, 19)
    ok = full & ((m >= _LOW) & (m <= _HIGH)).all(axis=1)  # digits, '-', ':' (and ASCII)
    ok &= (m[:, 10] == 32) | (m[:, 10] == 84)  # ' ' or 'T'

    def num(*cols):
        v = np.zeros(n, dtype=np.int32)
        for c in cols:
            v = v * 10 + m[:, c] - 48
        return v

    year, month, day = num(0, 1, 2, 3), num(5, 6), num(8, 9)
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    dim = _DAYS[np.clip(month, 0, 12)] + ((month == 2) & leap)
    ok &= (year >= 1) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= dim)
    ok &= (num(11, 12) < 24) & (num(14, 15) < 60) & (num(17, 18) < 60)
    return ok


def _with_slow_rows(parser, lines, columns, rows, slow, records) -> FastBlock:
    """Parses the `slow` lines one by one and appends their valid rows after the fast ones."""
    errors: List[tuple] = []
    extra, extra_rows = [], []
    slow = slow.tolist()
    for i, fields in zip(slow, split_fields([lines[i].as_py() for i in slow])):
        try:
            extra.append(parser.parse(fields))
            extra_rows.append(i)
        except Reject as e:
            errors.append((i, e))
    if extra:
        append_rows(columns, extra)
        rows = np.concatenate([rows, np.asarray(extra_rows, dtype=rows.dtype)])
    return FastBlock(columns, rows, errors, lines, records)
