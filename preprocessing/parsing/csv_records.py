"""CSV records and headers, as every job reads them: physical lines joined into records (a
quoted field may span lines, bounded by --max_record_bytes / --max_record_lines), records
split into fields, and a file's first record checked and read as its column names.
"""
from __future__ import annotations

import csv
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

MAX_RECORD_BYTES = 1 << 20  # defaults of --max_record_bytes / --max_record_lines
MAX_RECORD_LINES = 1000
# Python's csv module refuses a field over 128 kB (a malformed_csv reject, where Arrow's
# blocks read it). Records are bounded by --max_record_bytes before they are split, so a
# field is bounded by that, not by this process-wide limit.
csv.field_size_limit(2 ** 31 - 1)
RAW_HEAD = 2000  # characters of an oversized record kept in its dead letter


def iter_csv_records(lines: Iterable[str], first_line_no: int = 1,
                     rejects: Optional[list] = None, max_bytes: int = MAX_RECORD_BYTES,
                     max_lines: int = MAX_RECORD_LINES) -> Iterator[Tuple[int, str]]:
    """Joins physical lines into CSV records (a quoted field may span lines).

    Yields (line number where the record starts, record text without its line ending). A
    record may span at most `max_lines` lines and `max_bytes` characters: past that (an
    unterminated quote), its first line is rejected as `unterminated_quote` (appended to
    `rejects` as (line, raw, reason, detail)) and reading resumes at the line after it, so
    one stray quote costs one line, not the rest of the file. An unterminated quote at the
    end of the input is rejected the same way.
    """
    if rejects is None:
        rejects = []
    pending: List[Tuple[int, str]] = []  # lines to read again after a rejected record
    source = iter(enumerate(lines, first_line_no))
    buf: List[Tuple[int, str]] = []
    size = quotes = 0

    def next_line():
        return pending.pop(0) if pending else next(source, None)

    while True:
        item = next_line()
        if item is None:
            break
        line_no, line = item
        buf.append(item)
        size += len(line)
        quotes += line.count('"')
        if len(buf) == 1 and size > max_bytes:
            rejects.append((line_no, line.rstrip("\r\n")[:RAW_HEAD], "record_too_large",
                            f"a line of {size} characters, over --max_record_bytes {max_bytes}"))
            buf, size, quotes = [], 0, 0
        elif len(buf) > max_lines or size > max_bytes:
            first, rest = buf[0], buf[1:]
            rejects.append((first[0], first[1].rstrip("\r\n")[:RAW_HEAD], "unterminated_quote",
                            f"a quote opened on this line is not closed within {max_lines} "
                            f"lines / {max_bytes} bytes (--max_record_lines/bytes)"))
            pending[:0] = rest
            buf, size, quotes = [], 0, 0
        elif quotes % 2 == 0:
            text = "".join(t for _, t in buf).rstrip("\r\n")
            start = buf[0][0]
            buf, size, quotes = [], 0, 0
            if text:
                yield start, text
    if buf:  # the input ended inside a quoted field
        first, rest = buf[0], buf[1:]
        rejects.append((first[0], first[1].rstrip("\r\n")[:RAW_HEAD], "unterminated_quote",
                        "a quote opened on this line is not closed before the end of the file"))
        yield from iter_csv_records([t for _, t in rest], rest[0][0] if rest else 0, rejects,
                                    max_bytes, max_lines)


BOM = "\ufeff"


def check_first_line(first_line: str, source: str = "the file") -> None:
    """ValueError when a CSV file's first line shows the file cannot be read as rows of
    UTF-8 text: a bare CR (CR-only line ends, classic Mac: the file reads as one line, its
    rows silently its header), or a NUL (UTF-16 or UTF-32: every other byte of ASCII text
    is NUL, and the header would read as garbled names)."""
    if "\x00" in first_line:
        raise ValueError(f"{source} is not UTF-8 text: its first line holds NUL bytes (UTF-16 "
                         f"or UTF-32, as a spreadsheet's 'Unicode text' export is); save it as "
                         f"CSV UTF-8")
    if "\r" in first_line.rstrip("\r\n"):
        raise ValueError(f"{source} has CR-only line ends (classic Mac): convert them to LF "
                         f"or CRLF")


def header_names(fields: Sequence[str], source: str = "the file") -> Tuple[str, ...]:
    """A CSV header's column names: stripped, a UTF-8 byte-order mark dropped (spreadsheet
    exports start with one), an empty name as `column_<position>`, and no name twice
    (ValueError naming it: with two columns of one name, which one holds the data is a
    guess)."""
    names = [f.strip() for f in fields]
    if names and names[0].startswith(BOM):
        names[0] = names[0][len(BOM):].strip()
    # A column without a name (a pandas index, a spreadsheet's blank cell) is named by its
    # position, as pandas' `Unnamed: N` does; the name every reader of the file derives.
    names = [n or f"column_{i + 1}" for i, n in enumerate(names)]
    seen = set()
    for name in names:
        if name in seen:
            raise ValueError(f"column {name!r} appears twice in the header of {source}")
        seen.add(name)
    return tuple(names)


def parse_header(record: str, delimiter: str = ",", source: str = "the file") -> Tuple[str, ...]:
    """A CSV file's first record as its column names (check_first_line, header_names); a
    ValueError says what makes it unreadable. The pipeline's reader and inference's
    record-by-record reader read a header alike, as does its block reader
    (schema_inference/csv_tables.py)."""
    check_first_line(record, source)
    fields = split_fields([record], delimiter)[0]
    if fields is None:  # read as no column at all, each row would be `missing_column`
        raise ValueError(f"the header of {source} is not valid CSV (a quote inside a field "
                         f"not doubled, or text after a closing quote): {record[:RAW_HEAD]!r}")
    return header_names(fields, source)


def delimiter_hint(header: Sequence[str]) -> str:
    """For a header of one column holding another delimiter (a ';' file read at commas):
    ": one column, is the file ';'-delimited? add --delimiter ';'", else ""."""
    if len(header) != 1:
        return ""
    seen = [d for d in (";", "\t", "|", ",") if d in header[0]]
    if not seen:
        return ""
    flag = "tab" if seen[0] == "\t" else f"'{seen[0]}'"
    return f": one column, is the file {seen[0]!r}-delimited? add --delimiter {flag}"


def _loose(name: str) -> str:
    return "".join(ch for ch in name.casefold() if ch.isalnum())


def near_names_hint(missing: Sequence[str], header: Sequence[str],
                    holder: str = "the header") -> str:
    """For columns `missing` from `header` that it holds under another case or punctuation
    (`FARE`, `Trip Miles` for `trip_miles`, as databases and spreadsheets export them):
    " (the header has 'FARE' for 'fare': names must match exactly)", else ""."""
    loose = {}
    for h in header:
        loose.setdefault(_loose(h), h)
    loose.pop("", None)  # a name of punctuation alone is near nothing
    pairs = [(loose[_loose(m)], m) for m in missing if _loose(m) in loose]
    if not pairs:
        return ""
    shown = ", ".join(f"{h!r} for {m!r}" for h, m in pairs[:5])
    more = f" and {len(pairs) - 5} more" if len(pairs) > 5 else ""
    return f" ({holder} has {shown}{more}: names must match exactly)"


def header_below_hint(head: str, name: str, delimiter: str = ",", lines: int = 20) -> str:
    """For a column `name` not in a file's first line: "; line N holds it (...)", where one of
    the head's next `lines` lines names it (a title or notes above the header), else ""."""
    for n, line in enumerate(head.splitlines()[1:lines + 1], 2):
        fields = next(csv.reader([line], delimiter=delimiter), [])
        if name in (f.strip() for f in fields):
            return (f"; line {n} holds it ({line[:80]!r}): remove the {n - 1} line(s) above "
                    f"the header")
    return ""


def split_fields(records: Sequence[str], delimiter: str = ",") -> List[Optional[List[str]]]:
    """CSV-parses record texts in one call (fast path); None marks a malformed record."""
    try:
        out = list(csv.reader(records, delimiter=delimiter, strict=True))
        if len(out) == len(records):
            return out
    except csv.Error:
        pass
    result: List[Optional[List[str]]] = []
    for r in records:
        try:
            parsed = list(csv.reader([r], delimiter=delimiter, strict=True))
            result.append(parsed[0] if len(parsed) == 1 else None)
        except csv.Error:
            result.append(None)
    return result


def fit_width(fields: Sequence[str], width: int) -> Optional[Sequence[str]]:
    """A record's fields as a row of the header's `width`: themselves, or without the empty
    fields past the header's (a delimiter ending each row, as some spreadsheet and database
    exports write); None for any other count, which is a `wrong_column_count`."""
    if len(fields) == width:
        return fields
    if len(fields) > width and not any(f.strip() for f in fields[width:]):
        return fields[:width]
    return None
