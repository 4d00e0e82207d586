"""Reading input files (CSV records, JSON lines, TFRecords) for preprocess and batch prediction:
whole files with exact line numbers, or CSV byte blocks parsed in parallel (see ReadChunks)."""
from __future__ import annotations

import logging
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from preprocessing.accounting.counting import COUNTS, Progress, Tally
from preprocessing.accounting.rejects import DeadLetters
from preprocessing.accounting.tagged import typed_outputs
from preprocessing.files import encodings, filesys
from preprocessing.files.csv_blocks import (
    CUT_ERRORS,
    PIECE_BYTES,
    CsvBlock,
    LineCounter,
    Pieces,
    block_cut,
    count_byte,
)
from preprocessing.files.records import detect_format, read_records
from preprocessing.parsing.csv_records import MAX_RECORD_BYTES, MAX_RECORD_LINES, RAW_HEAD, parse_header


def resolve_uri(base: str, uri: str) -> str:
    """A uri as listed in a file under `base`: relative ones resolve against that folder."""
    if uri and "://" not in uri and not uri.startswith("/"):
        return FileSystems.join(base, uri)
    return uri


class Chunk(NamedTuple):
    """What the reader hands on: records of one file. `records` is [(line or record number,
    record), ...], or a CsvBlock (batch prediction's CSV blocks); `header` is the CSV header
    (None for JSON lines and TFRecords)."""
    path: str
    fmt: str
    header: Optional[tuple]
    records: Union[List[Tuple[int, Union[str, bytes]]], CsvBlock]


class ReadFileChunks(beam.DoFn):
    """Reads one file into chunks of (line or record number, record), with the file's header.

    csv: records are CSV records (quoted fields may span lines), the first is the header;
    jsonl: one text line each; tfrecord: serialized records, numbered from 1. Reading a whole
    file in one DoFn gives exact positions for dead letters; a Reshuffle after it spreads the
    chunks over workers. With `block_bytes`, a CSV file's records after the header come as
    CsvBlocks of about that many bytes instead (counted as rows where they are parsed); for
    an uncompressed file these are byte ranges, so the file is only scanned here (for record
    boundaries and line numbers) and each parse step reads its own block.
    Rows and files read are tallied on the COUNTS output.
    """

    def __init__(self, job: str, chunk_rows: int, fmt: str = "csv",
                 block_bytes: Optional[int] = None, total_bytes: Optional[int] = None,
                 header: Optional[tuple] = None, max_bytes: int = MAX_RECORD_BYTES,
                 max_lines: int = MAX_RECORD_LINES, delimiter: str = ",",
                 encoding: str = encodings.UTF8):
        self.job = job
        self.delimiter = delimiter  # the header's; the parse step splits the rows
        self.encoding = encoding  # CSV's; records and blocks go on as UTF-8
        self.max_bytes, self.max_lines = max_bytes, max_lines
        self.fixed_header = tuple(header) if header else None  # headerless CSV: all is data
        self.chunk_rows = chunk_rows
        self.fmt = fmt
        self.block_bytes = block_bytes
        self.total_bytes = total_bytes
        self.tally = Tally(job)
        self.dead = DeadLetters(job)

    def process(self, readable: fileio.ReadableFile):
        try:
            yield from self._read(readable)
        except BadHeader as e:  # the file's other lines are not read: the run is partial
            yield from self._line_reject(readable.metadata.path, 1, "", "bad_header", str(e))

    def _read(self, readable: fileio.ReadableFile):
        path = readable.metadata.path
        fmt = detect_format(path) if self.fmt == "auto" else self.fmt
        yield self.tally("files_read")
        line_rejects = []
        header = self.fixed_header
        chunk, total = [], 0
        cut = None  # a compressed file that ends early or is corrupt
        compressed = (CompressionTypes.detect_compression_type(path)
                      != CompressionTypes.UNCOMPRESSED)
        try:
            opened = filesys.open_input(path)
        except filesys.UnreadableInput as e:  # one file-level dead letter; the run is partial
            yield from self._line_reject(path, None, "", "unreadable_file", str(e))
            return
        with opened as f:
            if fmt == "csv" and self.block_bytes:
                try:
                    yield from self._blocks(path, f)
                except CUT_ERRORS as e:
                    if not compressed:  # an I/O error: the runner retries
                        raise
                    yield from self._file_reject(path, e, None)
                return
            # Progress in MB of the inputs' size where that is what is read (uncompressed
            # text), else in rows.
            counted = None if fmt == "tfrecord" else LineCounter(f)
            plain = CompressionTypes.detect_compression_type(path) == CompressionTypes.UNCOMPRESSED
            progress = (Progress.of(self.job, "read", self.total_bytes, unit="bytes")
                        if counted is not None and plain else Progress.of(self.job, "read rows"))
            done = 0

            def advance(rows):
                nonlocal done
                if progress.unit == "bytes":
                    progress.add(counted.bytes - done)
                    done = counted.bytes
                else:
                    progress.add(rows)

            try:
                text = counted or f
                if fmt == "csv":
                    text = encodings.reader(text, self.encoding)
                for pos, record in read_records(text, fmt, line_rejects, 1,
                                                self.max_bytes, self.max_lines):
                    if fmt == "csv" and header is None and line_rejects:
                        raise BadHeader(_header_problem(path, line_rejects))
                    while line_rejects:
                        yield from self._line_reject(path, *line_rejects.pop())
                    if fmt == "csv" and header is None:
                        header = _header(record, path, self.delimiter)
                        continue
                    chunk.append((pos, record))
                    if len(chunk) >= self.chunk_rows:
                        total += len(chunk)
                        yield self.tally("rows_read", len(chunk))
                        yield Chunk(path, fmt, header, chunk)
                        advance(len(chunk))
                        chunk = []
            except CUT_ERRORS as e:
                if not compressed:
                    raise
                cut = e
        if fmt == "csv" and header is None and line_rejects:
            raise BadHeader(_header_problem(path, line_rejects))
        while line_rejects:
            yield from self._line_reject(path, *line_rejects.pop())
        if chunk:
            total += len(chunk)
            yield self.tally("rows_read", len(chunk))
            yield Chunk(path, fmt, header, chunk)
            advance(len(chunk))
        if cut is not None:  # the rows before the cut are kept; the file is reported
            yield from self._file_reject(path, cut, total)
        progress.show()
        if fmt == "csv" and header is None:
            logging.warning("%s: %s is empty (no header row)", self.job, path)
        logging.info("%s: finished %s: %d rows", self.job, path, total)

    def _blocks(self, path, f):
        """The header record, then CsvBlocks cut at record boundaries."""
        counted, line_rejects, header = LineCounter(f), [], None
        for _, record in read_records(encodings.reader(counted, self.encoding), "csv",
                                      line_rejects, 1, self.max_bytes, self.max_lines):
            header = _header(record, path, self.delimiter)
            break
        if line_rejects:
            raise BadHeader(_header_problem(path, line_rejects))
        if header is None:
            logging.warning("%s: %s is empty (no header row)", self.job, path)
            return
        # An uncompressed file is only scanned here: its blocks go on as byte ranges.
        ranges = CompressionTypes.detect_compression_type(path) == CompressionTypes.UNCOMPRESSED
        start = counted.bytes
        progress = Progress.of(self.job, "read", self.total_bytes, unit="bytes")
        progress.add(counted.bytes)

        def block(line, data, cut):
            if ranges:
                return CsvBlock(line, None, path, start, start + cut, self.encoding)
            return CsvBlock(line, data[:cut], encoding=self.encoding)

        line, carry, skipping = counted.lines + 1, b"", False
        limit = self.max_bytes + self.block_bytes
        pieces = Pieces(f, None if ranges else PIECE_BYTES)
        while True:
            try:
                data = pieces.read(self.block_bytes)
            except CUT_ERRORS:
                # What was read before the cut still counts, up to its last whole record
                # (a compressed file is read in pieces, so that is all but the last piece).
                data = carry + pieces.partial
                cut = block_cut(data)
                if cut:
                    yield Chunk(path, "csv", header, block(line, data, cut))
                raise
            if not data:
                break
            if skipping:  # the rest of a line over the bound: passed over, never held
                nl = data.find(b"\n")
                skipped = len(data) if nl < 0 else nl + 1
                start += skipped
                progress.add(skipped)
                if nl < 0:
                    continue
                data, line, skipping = data[skipped:], line + 1, False
                if not data:
                    continue
            data = carry + data if carry else data
            cut = block_cut(data)
            if cut == 0 and len(data) > limit:
                # A quote that never closes: cut at a line end all the same; parsing that
                # block rejects the quote's line (unterminated_quote) and goes on after it.
                cut = data.rfind(b"\n") + 1
                if cut == 0:  # one line over the bound: rejected here, its rest skipped
                    yield from self._line_reject(
                        path, line, data[:RAW_HEAD].decode("utf-8", "replace"),
                        "record_too_large", f"a line over --max_record_bytes {self.max_bytes}")
                    start += len(data)
                    progress.add(len(data))
                    carry, skipping = b"", True
                    continue
            if cut == 0:
                carry = data
                continue
            yield Chunk(path, "csv", header, block(line, data, cut))
            line += count_byte(data, b"\n", cut)
            carry = data[cut:]
            start += cut
            progress.add(cut)
        if carry:
            yield Chunk(path, "csv", header, block(line, carry, len(carry)))
            progress.add(len(carry))
        progress.show()
        logging.info("%s: finished reading %s: %d lines", self.job, path, line - 1)

    def _file_reject(self, path, error, rows):
        """A compressed file that ends early (truncated_file) or is not what its extension
        says (corrupt_file): one file-level dead letter; the run then does not end in plain
        success (beam_jobs/shared/finalize.py)."""
        reason = "truncated_file" if isinstance(error, EOFError) else "corrupt_file"
        before = "" if rows is None else f" after {rows} rows"
        yield from self._line_reject(path, None, "", reason,
                                     f"{type(error).__name__}: {error}{before}")

    def _line_reject(self, path, line_no, raw, reason, detail):
        yield self.tally("rows_read")
        yield self.dead(path, line_no, raw, reason, detail)


# What a cut or corrupt compressed input raises while it is read (gzip: EOFError, BadGzipFile,
# zlib.error; bz2: OSError "Invalid data stream").


class BadHeader(ValueError):
    """A file whose header row cannot be read: the file is one bad_header dead letter (the
    run is partial), not a failure of the whole job."""


def _header(record: str, path: str, delimiter: str = ",") -> tuple:
    try:
        return parse_header(record, delimiter, path)
    except ValueError as e:
        raise BadHeader(str(e)) from None


def _header_problem(path: str, line_rejects: list) -> str:
    line, _, reason, detail = line_rejects[0]
    return f"{path}: cannot read the header row (line {line}: {reason}: {detail})"


class ReadChunks(beam.PTransform):
    """Globs -> (chunks, rejects, counts): chunks are (path, format, header,
    [(position, record), ...]); counts are (name, n) tallies (see counting.Tally).

    Local paths and gs:// (or any Beam filesystem); .gz/.bz2 are decompressed by extension.
    `fmt` is csv, jsonl, tfrecord, or auto (by each file's extension). With `block_bytes`,
    CSV records come as CsvBlocks (see ReadFileChunks). `total_bytes` (the inputs' size, when
    known) gives the progress lines a percentage and an ETA. `header`: CSV files without a
    header row, whose columns are these (every record is data). `max_bytes` / `max_lines`:
    the bounds of one record (see read_records). `delimiter`: the CSV header's field
    delimiter (--delimiter; the rows are split where they are parsed). `encoding`: the CSV
    files' (encodings.py; their records go on as UTF-8).
    """

    def __init__(self, job: str, patterns: Sequence[str], chunk_rows: int = 2000,
                 fmt: str = "csv", block_bytes: Optional[int] = None,
                 total_bytes: Optional[int] = None, header: Optional[tuple] = None,
                 max_bytes: int = MAX_RECORD_BYTES, max_lines: int = MAX_RECORD_LINES,
                 delimiter: str = ",", encoding: str = encodings.UTF8):
        super().__init__()
        self.header, self.delimiter, self.encoding = header, delimiter, encoding
        self.bounds = (max_bytes, max_lines)
        self.job = job
        self.patterns = list(patterns)
        self.chunk_rows = chunk_rows
        self.fmt = fmt
        self.block_bytes = block_bytes
        self.total_bytes = total_bytes

    def expand(self, pbegin):
        read = (
            pbegin
            | "Patterns" >> beam.Create(self.patterns)
            | "Match" >> fileio.MatchAll()
            | "Open" >> fileio.ReadMatches()
            | "ReadChunks" >> typed_outputs(
                beam.ParDo(ReadFileChunks(self.job, self.chunk_rows, self.fmt, self.block_bytes,
                                          self.total_bytes, self.header, *self.bounds,
                                          self.delimiter, self.encoding)),
                Chunk, "rejects", COUNTS, main="chunks")
        )
        # Files are read whole; redistribute their chunks so parsing runs in parallel.
        chunks = read.chunks | "Redistribute" >> beam.Reshuffle()
        return chunks, read.rejects, read[COUNTS]
