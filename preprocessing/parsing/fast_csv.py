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

from preprocessing.accounting.rejects import Reject
from preprocessing.parsing.columns import convert, join, mask, stripped
from preprocessing.parsing.csv_records import split_fields
from preprocessing.parsing.row_parser import ColumnBlock, RowParser, append_rows

# One CSV field as Python's csv module (strict) and Arrow read it identically: unquoted
# without quotes, or quoted with doubled inner quotes and nothing after the closing quote.
_FIELD = r'(?:[^",]*|"(?:[^"]|"")*")'


def _line_pattern(width: int) -> str:
    return "^" + _FIELD + ("(?:," + _FIELD + "){%d}" % (width - 1) if width > 1 else "") + "$"


def parse_block(parser: RowParser, data: bytes) -> Optional[ColumnBlock]:
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
    nonempty = mask(pc.greater(pc.binary_length(lines), 0))
    table = None
    if '"' not in text and not crlf:
        # Without quotes a line is strict CSV iff it has the header's field count: Arrow
        # reads the block as it is (empty lines skipped, as by iter_csv_records) and skips
        # the other lines, which are then found by counting commas.
        skipped = []
        table = _read(data, parser.width, lambda row: skipped.append(row) or "skip")
        strict = _comma_counts(data, len(lines)) == parser.width - 1 if skipped else nonempty
    else:
        strict = mask(pc.match_substring_regex(lines, _line_pattern(parser.width)))
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
        s = stripped(col)
        if n and c.optional and c.default is None and not pc.any(pc.not_equal(s, "")).as_py():
            columns.append(("const", None))
            continue
        values, col_bad = convert(s, c.dtype, c.dates, c.decimal, c.clock, c.grouping,
                                  c.unit)
        bad |= col_bad
        columns.append(("values", values))
    return columns, bad


def _with_slow_rows(parser, lines, columns, rows, slow, records) -> ColumnBlock:
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
    return ColumnBlock(columns, rows, errors, lines, records)
