"""Column statistics over a whole CSV input, for schema inference (like TFX's StatisticsGen):
Arrow kernels over every row, in file order, one `ColumnStats` per column. The rules that turn
them into a schema are `preprocessing/schema_inference/infer.py`'s.

What a column's statistics hold is column_stats.py's; this module reads the files (Arrow's
block reader, or record by record: csv_tables.py), bounded as the pipeline reads them.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, Optional, Sequence, Tuple

import pyarrow as pa

from preprocessing.contract.schema import SchemaError
from preprocessing.parsing.csv_records import MAX_RECORD_BYTES, MAX_RECORD_LINES
from preprocessing.schema_inference.column_stats import ColumnStats
from preprocessing.schema_inference.csv_tables import (
    RowsPastHeader,
    bounded_rows,
    read_csv_records,
    read_csv_tables,
    utf8_rows,
)


@dataclasses.dataclass
class Profile:
    """Statistics of every column over the rows read; `complete`: the whole input was read."""
    header: tuple
    columns: Dict[str, ColumnStats]
    rows: int = 0
    complete: bool = True
    note: str = ""
    not_utf8: int = 0  # rows left out: not UTF-8 text (the pipeline rejects: bad_encoding)
    too_large: int = 0  # ... and longer than --max_record_bytes (record_too_large)


def add_table(prof: Profile, table: pa.Table) -> None:
    """Adds an Arrow table of string columns (the next rows in file order) to `prof`, by
    column name; columns the profile does not name are ignored."""
    prof.rows += table.num_rows
    for name, stats in prof.columns.items():
        if name in table.column_names:
            for chunk in table.column(name).chunks:
                stats.add(chunk)


def profile_tables(header: Sequence[str], tables: Iterable[pa.Table]) -> Profile:
    """A Profile of Arrow tables of string columns named by `header` (in file order)."""
    prof = Profile(tuple(header), {h: ColumnStats() for h in header})
    for table in tables:
        add_table(prof, table)
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


GATHER_ROWS = 65536  # small tables are gathered up to this many rows per statistics pass


def profile_csv(streams: Iterable, delimiter: str = ",", max_bytes: Optional[int] = None,
                progress=None, record_bounds: Tuple[int, int] = (MAX_RECORD_BYTES,
                                                                 MAX_RECORD_LINES)) -> Profile:
    """A Profile over CSV files, given as (name, opener) pairs, the first file's header naming
    the columns; `progress(rows)` is called after each block. Reading stops after `max_bytes`
    of rows (None: all), or at a file Arrow cannot read to the end; then `complete` is False
    and `note` says why. A file whose first block holds a record longer than Arrow's block
    is read record by record instead, within `record_bounds` (--max_record_bytes,
    --max_record_lines: a longer record is left out, as the pipeline dead-letters it)."""
    prof, seen = None, 0
    pending, gathered = [], 0  # consecutive small tables (many small files): as one

    def flush():
        nonlocal gathered
        if pending:
            add_table(prof, pending[0] if len(pending) == 1 else
                      pa.concat_tables(pending).combine_chunks())
            pending.clear()
        gathered = 0

    def add(header, tables) -> bool:
        """Adds a file's tables; True once --infer_scan_mb is reached."""
        nonlocal prof, seen, gathered
        if prof is None:
            prof = Profile(tuple(header),
                           {h: ColumnStats.for_delimiter(delimiter) for h in header})
        for table in tables:
            table, not_utf8 = utf8_rows(table)
            prof.not_utf8 += not_utf8
            table, too_large = bounded_rows(table, record_bounds[0])
            prof.too_large += too_large
            if pending and table.column_names != pending[0].column_names:
                flush()
            pending.append(table)
            gathered += table.num_rows
            if gathered >= GATHER_ROWS:
                flush()
            seen += table.nbytes
            if progress:
                progress(table.num_rows)
            if max_bytes is not None and seen >= max_bytes:
                flush()
                prof.complete = False
                prof.note = f"profiled the first {seen >> 20} MB (--infer_scan_mb)"
                return True
        return False

    for name, opener in streams:
        try:
            with opener() as f:
                try:
                    header, tables = read_csv_tables(f, delimiter,
                                                     max_header_bytes=record_bounds[0])
                except pa.ArrowInvalid as e:  # a record past Arrow's block in the first one
                    if "straddl" not in str(e):
                        raise
                    header = None
                except RowsPastHeader:  # rows ending in delimiters: record by record
                    header = None
                if header is not None and add(header, tables):
                    return prof
            if header is None:
                with opener() as f:
                    if add(*read_csv_records(f, delimiter, *record_bounds)):
                        return prof
        except Exception as e:  # a cut or odd file: the pipeline dead-letters its rows
            if prof is None:
                raise
            prof.complete = False
            prof.note = f"{name}: not profiled to its end ({str(e).splitlines()[0][:200]})"
    flush()
    if prof is None:
        raise SchemaError("no input to infer the schema from")
    return prof
