"""CSV byte-range blocks: whole records of one file handed to the parse step as bytes, or as
where they lie (read there, never shuffled); where a block may be cut; and the piecewise,
line-counting reads the reader makes them with."""
from __future__ import annotations

import functools
import gzip
import io
import zlib
from typing import Optional

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from preprocessing.files import encodings
from preprocessing.files.records import read_records
from preprocessing.parsing.csv_records import MAX_RECORD_BYTES, MAX_RECORD_LINES

# A block this small (a one-row file) is parsed row by row: Arrow's per-call cost would
# dominate its parse.
SMALL_BLOCK_BYTES = 4 << 10

# What a cut or corrupt compressed file raises while it is read.
CUT_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile, OSError)


class CsvBlock:
    """Whole CSV records from one file, starting at line `first_line`: what the reader emits
    in block mode, so that splitting, decoding and parsing happen in the (parallel) parse
    step, column-wise (preprocessing.parsing.fast_csv). Either the raw bytes themselves (compressed
    files), or where they lie (`path`, byte `start` to `end` of an uncompressed file): the
    parse step then reads them itself and the data never goes through the shuffle. The bytes
    are in the file's `encoding` (encodings.py); `data` gives them as UTF-8."""

    __slots__ = ("first_line", "_data", "path", "start", "end", "encoding", "_utf8")

    def __init__(self, first_line: int, data: Optional[bytes] = None, path: Optional[str] = None,
                 start: int = 0, end: int = 0, encoding: str = encodings.UTF8):
        self.first_line, self._data = first_line, data
        self.path, self.start, self.end = path, start, end
        self.encoding, self._utf8 = encoding, None

    def __reduce__(self):
        return CsvBlock, (self.first_line, self._data, self.path, self.start, self.end,
                          self.encoding)

    @property
    def size(self) -> int:
        return len(self._data) if self.path is None else self.end - self.start

    @property
    def small(self) -> bool:
        return self.size < SMALL_BLOCK_BYTES

    @property
    def data(self) -> bytes:
        """The block's records as UTF-8 bytes."""
        if self._utf8 is None:
            raw = self._data if self._data is not None else read_range(self.path, self.start,
                                                                        self.end)
            self._utf8 = encodings.to_utf8(raw, self.encoding)
        return self._utf8

    def read_records(self, line_rejects: list, max_bytes: int = MAX_RECORD_BYTES,
                max_lines: int = MAX_RECORD_LINES):
        """The block's records the row-by-row way (as `read_records` reads a file)."""

        return list(read_records(io.BytesIO(self.data), "csv", line_rejects, self.first_line,
                                 max_bytes, max_lines))


def read_range(path: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of an uncompressed file (any Beam filesystem); an error, not a
    short block, if the file no longer holds them (it changed since it was scanned)."""
    parts, want = [], end - start
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.seek(start)
        while want:
            part = f.read(want)
            if not part:
                raise IOError(f"{path} changed while it was read: {end - start} bytes were "
                              f"expected at offset {start}, the file ends sooner")
            parts.append(part)
            want -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


# Not in a job module: the job may run as __main__, which workers cannot import from.
@functools.lru_cache(maxsize=2)  # a block's rejected rows ask one after another
def block_lines(path: str, start: int, end: int, encoding: str = encodings.UTF8) -> list:
    """A byte range's lines (UTF-8 bytes, split at newlines), read again from the file."""
    return encodings.to_utf8(read_range(path, start, end), encoding).split(b"\n")


def block_cut(data: bytes) -> int:
    """Length of the longest prefix of `data` (which starts at a record boundary) that ends
    at a record boundary: a newline after an even number of quotes; 0 if none is found.
    (Quotes are counted in bytes: only a line that is not UTF-8 and holds an odd number of
    quotes could make this differ from read_records, which reads such a line as empty.)"""
    end = data.rfind(b"\n")
    if end < 0:
        return 0
    quotes = count_byte(data, b'"', end)
    for _ in range(64):  # a quoted field spanning many lines: read on, the cut comes later
        if quotes % 2 == 0:
            return end + 1
        prev = data.rfind(b"\n", 0, end)
        if prev < 0:
            return 0
        quotes -= data.count(b'"', prev, end)
        end = prev
    return 0


def count_byte(data: bytes, byte: bytes, end: int) -> int:
    """data[:end].count(byte), vectorised (about 3x faster than bytes.count: the reader
    counts every byte of a file in one process before its blocks are parsed in parallel)."""
    return int(np.count_nonzero(np.frombuffer(data, np.uint8, count=end) == byte[0]))


class LineCounter:
    """A binary file's readline(size), counting the lines and bytes read."""

    def __init__(self, f):
        self.f, self.lines, self.bytes = f, 0, 0

    def readline(self, size: int = -1):
        line = self.f.readline(size)
        self.lines += line.endswith(b"\n") or (bool(line) and len(line) != size)
        self.bytes += len(line)
        return line


PIECE_BYTES = 8 << 10  # compressed input is decompressed this much at a time (as readline)


class Pieces:
    """f.read(n) done `piece` bytes at a time (None: at once). A read that fails (a cut or
    corrupt compressed file) leaves what its earlier pieces got in `partial`: gzip's read
    would lose all of it."""

    def __init__(self, f, piece: Optional[int]):
        self.f, self.piece, self.partial = f, piece, b""

    def read(self, n: int) -> bytes:
        self.partial = b""
        if self.piece is None or n <= self.piece:
            return self.f.read(n)
        got, want = [], n
        try:
            while want > 0:
                part = self.f.read(min(want, self.piece))
                if not part:
                    break
                got.append(part)
                want -= len(part)
        except CUT_ERRORS:
            self.partial = b"".join(got)
            raise
        return b"".join(got)
