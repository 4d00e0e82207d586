"""CSV bytes as Arrow tables of string columns for schema inference (profile.py): Arrow's
block reader, or, for a file whose first block it cannot cut, the pipeline's own bounded
record reader; and the rows the pipeline would not read (not UTF-8, over
--max_record_bytes) left out, as it dead-letters them."""
from __future__ import annotations

from typing import BinaryIO, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from preprocessing.contract.schema import SchemaError
from preprocessing.files.records import read_records
from preprocessing.parsing.csv_records import (
    BOM,
    MAX_RECORD_BYTES,
    MAX_RECORD_LINES,
    fit_width,
    parse_header,
    split_fields,
)

# Rows past the header's width that fit it (fit_width) held between Arrow's batches: Arrow
# yields no batch for a block whose every row it skips, so they are bounded here.
MAX_FITTED_ROWS = 50_000


class RowsPastHeader(Exception):
    """The first block's rows end in delimiters past the header's (fit_width): the file is
    read record by record (read_csv_records), whose memory is bounded by its batches."""


def read_csv_tables(stream: BinaryIO, delimiter: str = ",", block_bytes: int = 8 << 20,
                    max_header_bytes: int = 1 << 20):
    """(header, iterator of Arrow tables of string columns) of a CSV byte stream. Rows with
    the wrong field count are skipped (the pipeline dead-letters them), but for those whose
    extra fields are empty (fit_width); quoted fields may span lines. RowsPastHeader where
    the first block holds such rows; past MAX_FITTED_ROWS of them between two batches the
    reading fails (ArrowInvalid: the profile then says the file was not read to its end)."""
    import pyarrow.csv as pacsv
    raw = stream.readline(max_header_bytes + 1)
    if len(raw.rstrip(b"\r\n")) > max_header_bytes:
        raise SchemaError(f"cannot read the header row (line 1: record_too_large: a line over "
                          f"--max_record_bytes {max_header_bytes})")
    first = raw.decode("utf-8", errors="replace")
    if first.startswith(BOM):
        first = first[len(BOM):]
    try:
        header = list(parse_header(first.rstrip("\r\n"), delimiter, "the input file"))
    except ValueError as e:
        raise SchemaError(str(e)) from None
    if not header:
        raise SchemaError("the input file is empty (no header row)")
    names = [f"c{i}" for i in range(len(header))]
    longer: list = []  # rows of more fields than the header whose extra ones are empty
    opened = False  # the first block (read by open_csv) is bounded by its size

    def invalid(row):
        if row.actual_columns > row.expected_columns and row.text is not None:
            fields = split_fields([row.text], delimiter)[0]
            fitted = fit_width(fields, len(header)) if fields else None
            if fitted is not None:
                if opened and len(longer) >= MAX_FITTED_ROWS:
                    return "error"
                longer.append(fitted)
        return "skip"
    try:
        reader = pacsv.open_csv(
            stream,
            read_options=pacsv.ReadOptions(block_size=block_bytes, use_threads=True,
                                           column_names=names),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True,
                                              invalid_row_handler=invalid),
            convert_options=pacsv.ConvertOptions(
                check_utf8=False, strings_can_be_null=False, quoted_strings_can_be_null=False,
                column_types={n: pa.string() for n in names}))
    except pa.ArrowInvalid as e:
        if "Empty CSV" not in str(e):
            raise
        return header, iter(())  # a header and no rows
    if longer:
        raise RowsPastHeader()
    opened = True

    def tables():
        for batch in reader:  # none at all where every row was skipped
            yield pa.Table.from_batches([batch]).rename_columns(header)
            yield from fitted()
        yield from fitted()

    def fitted():
        if longer:
            yield fields_table(header, longer)
            longer.clear()

    return header, tables()


def fields_table(header, fields_list) -> pa.Table:
    """Arrow string columns of the records (split fields) that fit the header (fit_width)."""
    rows = [fit_width(f, len(header)) for f in fields_list if f]
    rows = [f for f in rows if f is not None]
    return pa.table({h: pa.array([f[i] for f in rows], pa.string())
                     for i, h in enumerate(header)})


def utf8_rows(table: pa.Table) -> Tuple[pa.Table, int]:
    """(the rows of `table`, string columns read without a UTF-8 check, whose every value is
    UTF-8 text; how many were left out). The pipeline dead-letters a line that is not
    (bad_encoding), so inference does not read it (Arrow's string kernels refuse it)."""
    try:
        table.validate(full=True)  # checks every string value's UTF-8
        return table, 0
    except pa.ArrowInvalid:
        pass
    ok = np.ones(table.num_rows, bool)
    for column in table.columns:
        for i, value in enumerate(column.cast(pa.binary()).to_pylist()):
            if value is not None and ok[i]:
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError:
                    ok[i] = False
    return table.filter(pa.array(ok)), int((~ok).sum())


def bounded_rows(table: pa.Table, max_bytes: int) -> Tuple[pa.Table, int]:
    """(the rows of `table` whose values, with their delimiters, hold at most `max_bytes`
    bytes; how many were left out): the pipeline dead-letters a longer record
    (record_too_large), so inference does not read it."""
    if not table.num_rows:
        return table, 0
    size = np.full(table.num_rows, max(table.num_columns - 1, 0), np.int64)
    for column in table.columns:
        size += pc.fill_null(pc.binary_length(column), 0).to_numpy(zero_copy_only=False)
    keep = size <= max_bytes
    return (table, 0) if keep.all() else (table.filter(pa.array(keep)), int((~keep).sum()))


def read_csv_records(stream: BinaryIO, delimiter: str = ",",
                     max_bytes: int = MAX_RECORD_BYTES, max_lines: int = MAX_RECORD_LINES,
                     rows: int = 10_000):
    """(header, iterator of Arrow tables of string columns) of a CSV byte stream read record
    by record by the pipeline's reader (preprocessing/files/records.py): a record past
    `max_bytes` / `max_lines`, not UTF-8, or of the wrong field count is left out, as the
    pipeline dead-letters it. Slower than read_csv_tables; for what Arrow cannot block."""
    skipped: list = []
    records = (record for _, record in read_records(stream, "csv", skipped, 1, max_bytes,
                                                     max_lines))
    first = next(records, None)
    if skipped:  # the header line itself (the pipeline: a bad_header file)
        line, _, reason, detail = skipped[0]
        raise SchemaError(f"cannot read the header row (line {line}: {reason}: {detail})")
    if first is None:
        raise SchemaError("the input file is empty (no header row)")
    try:
        header = list(parse_header(first, delimiter, "the input file"))
    except ValueError as e:
        raise SchemaError(str(e)) from None

    def table(batch):
        return fields_table(header, split_fields(batch, delimiter))

    def tables():
        batch = []
        for record in records:
            skipped.clear()  # counted by the pipeline, not here
            batch.append(record)
            if len(batch) >= rows:
                yield table(batch)
                batch = []
        if batch:
            yield table(batch)

    return header, tables()
