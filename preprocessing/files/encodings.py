"""The CSV inputs' text encoding (--encoding): UTF-8, or one single-byte encoding whose
ASCII is ASCII (Windows-1252, Latin-1, ...), transcoded to UTF-8 bytes as files are read, so
that every reader after it (records, Arrow blocks, schema inference) sees UTF-8 only.

`auto` (the default) is resolved once at launch from the head of the first input file
(`sniff`): UTF-8, unless that head is not UTF-8 and holds no UTF-8 text outside ASCII; then
Windows-1252, the encoding of spreadsheet exports on Windows. Only single-byte encodings are
taken: a line end is then the byte 0x0A whatever the encoding, so files can be cut into
blocks and lines counted on their raw bytes. UTF-16 is refused by name (and its files stay a
`bad_header` dead letter: their header is not UTF-8)."""
from __future__ import annotations

import codecs
import logging
from typing import BinaryIO, Optional

AUTO = "auto"
UTF8 = "utf-8"
WINDOWS_1252 = "cp1252"
# Windows-1252 leaves 5 bytes (0x81, 0x8D, 0x8F, 0x90, 0x9D) undefined; as the WHATWG's
# windows-1252 (what browsers read) they decode to the C1 control of the same number, so a
# file in it is read whole, never a row lost to one stray byte.
C1_ERRORS = "tfdataflow-c1"


def _c1(error: UnicodeDecodeError):
    return error.object[error.start:error.end].decode("latin-1"), error.end


codecs.register_error(C1_ERRORS, _c1)


def check(name: str) -> str:
    """`name` as codecs spells it (or `auto`); a ValueError saying why it cannot be read."""
    if name.strip().lower() == AUTO:
        return AUTO
    try:
        info = codecs.lookup(name.strip())
    except LookupError:
        raise ValueError(f"unknown encoding {name!r} (Python codec names: utf-8, cp1252, "
                         f"latin-1, iso-8859-15, ...)") from None
    if info.name in (UTF8, "utf-8-sig", "ascii"):  # the BOM is read past; ASCII is UTF-8
        return UTF8
    try:
        ascii_same = bytes(range(128)).decode(info.name) == bytes(range(128)).decode("ascii")
        # one character per byte, also after a byte that would lead a multi-byte one
        single = all(len(bytes([b, t]).decode(info.name, C1_ERRORS)) == 2
                     for b in range(128, 256) for t in range(256))
    except (UnicodeDecodeError, TypeError):
        ascii_same = single = False
    if not (ascii_same and single):
        raise ValueError(f"encoding {name!r} is not read: only UTF-8 and single-byte encodings "
                         f"that keep ASCII (cp1252, latin-1, iso-8859-15, ...); save the file "
                         f"as UTF-8")
    return info.name


def readable(name: str) -> bool:
    """Whether `check` takes `name`."""
    try:
        check(name)
        return True
    except ValueError:
        return False


def to_utf8(data: bytes, encoding: str) -> bytes:
    """`data` in `encoding` as UTF-8 bytes (the same bytes when it is UTF-8 or all ASCII)."""
    if encoding == UTF8 or data.isascii():
        return data
    return data.decode(encoding, C1_ERRORS).encode(UTF8)


class Utf8Reader:
    """A binary file in a single-byte `encoding` read as UTF-8 bytes: `readline(n)` and
    `read(n)` read at most n bytes of the file (so the readers' bounds hold on what is
    read) and give them transcoded, which may be longer."""

    def __init__(self, f: BinaryIO, encoding: str):
        self.f, self.encoding = f, encoding

    def readline(self, size: int = -1) -> bytes:
        return to_utf8(self.f.readline(size), self.encoding)

    def read(self, size: int = -1) -> bytes:
        return to_utf8(self.f.read(size), self.encoding)

    def readable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return self.f.closed

    def close(self):
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def reader(f: BinaryIO, encoding: str):
    """`f` itself for UTF-8, else a Utf8Reader over it."""
    return f if encoding == UTF8 else Utf8Reader(f, encoding)


def sniff(head: bytes) -> str:
    """UTF-8 or Windows-1252 for a file's first bytes: Windows-1252 only where they are not
    UTF-8 and hold no UTF-8 sequence outside ASCII (a UTF-8 file with a few bad bytes stays
    UTF-8: its bad lines are dead-lettered), nor a NUL byte."""
    cut = head.rfind(b"\n")  # a multi-byte character cut at the end is not an error
    head = head[:cut + 1] if cut >= 0 else head
    if b"\x00" in head:  # UTF-16 or binary, not text in cp1252: the header check names it
        return UTF8
    try:
        head.decode(UTF8)
        return UTF8
    except UnicodeDecodeError:
        pass
    text = head.decode(UTF8, "replace")
    return UTF8 if any(ord(c) > 127 and c != "\ufffd" for c in text) else WINDOWS_1252


def resolve(name: str, head: bytes) -> str:
    """The encoding a job reads its CSV files in: `name` checked, `auto` by `sniff(head)`."""
    name = check(name)
    if name == AUTO:
        return sniff(head)
    if name != UTF8 and not head.isascii() and sniff(head) == UTF8:
        logging.warning("--encoding %s: the first file's head is UTF-8 text; read as %s as "
                        "asked, each of its letters outside ASCII becomes two or more", name,
                        name)
    return name


def describe(name: str, encoding: str) -> Optional[str]:
    """How CSV inputs are read (--encoding `name` resolved to `encoding`), for the launch's
    console; None for UTF-8."""
    if encoding == UTF8:
        return None
    why = (" (the first file's head is not UTF-8 and holds no UTF-8 text outside ASCII; "
           "--encoding names another)" if name.strip().lower() == AUTO else "")
    return f"CSV files read as {encoding}, transcoded to UTF-8{why}"
