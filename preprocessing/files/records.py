"""Records of an open input file, one format each: CSV records (quoted fields may span lines),
JSON lines, TFRecords; and the format a file name says. Every reader of input files (whole
files, CSV blocks) splits records here, with the same bounds and the same reasons."""
from __future__ import annotations

from preprocessing.parsing.csv_records import (
    BOM,
    MAX_RECORD_BYTES,
    MAX_RECORD_LINES,
    RAW_HEAD,
    iter_csv_records,
)


def detect_format(path: str) -> str:
    """Input format from a file name: .csv, .json/.jsonl/.ndjson, .tfrecord(s) (+ .gz/.bz2)."""
    name = path.lower()
    for ext in (".gz", ".bz2"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    if name.endswith((".json", ".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith((".tfrecord", ".tfrecords", ".tfr")):
        return "tfrecord"
    return "csv"


def read_records(f, fmt: str, line_rejects: list, first_line: int = 1,
                 max_bytes: int = MAX_RECORD_BYTES, max_lines: int = MAX_RECORD_LINES):
    """(line or record number, record) from an open binary file: CSV records (quoted fields
    may span lines, within `max_lines` / `max_bytes`), non-empty JSON lines, or TFRecord
    records (numbered from 1). Lines that cannot be records are appended to `line_rejects` as
    (line number, raw, reason, detail) and skipped, their line numbers kept: not UTF-8
    (`bad_encoding`), longer than `max_bytes` (`record_too_large`), or opening a quote that
    does not close within the bounds (`unterminated_quote`; reading resumes on the next line)."""
    if fmt == "tfrecord":
        from apache_beam.io.tfrecordio import _TFRecordUtil
        index = 0
        while True:
            record = _TFRecordUtil.read_record(f)
            if record is None:
                return
            index += 1
            yield index, record

    def raw_lines():
        """Lines of at most max_bytes + 1 bytes: a longer one comes as its head and
        `None` for the rest, which is read past in bounded pieces, never held whole."""
        while True:
            raw = f.readline(max_bytes + 1)
            if not raw:
                return
            if len(raw) > max_bytes and not raw.endswith(b"\n"):
                while True:  # the rest of the line
                    more = f.readline(max_bytes + 1)
                    if not more or more.endswith(b"\n"):
                        break
                yield raw, None
            else:
                yield raw, raw

    def lines():
        for line_no, (head, raw) in enumerate(raw_lines(), first_line):
            if raw is None or len(raw.rstrip(b"\r\n")) > max_bytes:
                line_rejects.append((line_no, head[:RAW_HEAD].decode("utf-8", "replace"),
                                     "record_too_large", f"a line over --max_record_bytes "
                                     f"{max_bytes}"))
                yield "\n"  # keeps line numbers; the line is dead-lettered instead
                continue
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                line_rejects.append((line_no, raw, "bad_encoding", str(e)))
                yield "\n"

    if fmt == "csv":
        yield from iter_csv_records(lines(), first_line, line_rejects, max_bytes, max_lines)
    else:
        for line_no, text in enumerate(lines(), first_line):
            if line_no == 1 and text.startswith(BOM):  # a UTF-8 byte-order mark (Windows tools)
                text = text[len(BOM):]
            text = text.strip()
            if text:
                yield line_no, text
