"""preprocessing/files/encodings.py: which encodings --encoding takes, what `auto` reads a
file's head as, and that transcoding loses no byte."""
import io

import pyarrow.csv as pacsv
import pytest

from preprocessing.files import encodings


@pytest.mark.parametrize("name,expected", [
    ("auto", "auto"), ("UTF8", "utf-8"), ("utf-8-sig", "utf-8"), ("ascii", "utf-8"),
    ("cp1252", "cp1252"), ("latin-1", "iso8859-1"), ("ISO-8859-15", "iso8859-15"),
    ("cp1250", "cp1250")])
def test_utf8_and_single_byte_encodings_that_keep_ascii_are_taken(name, expected):
    assert encodings.check(name) == expected
    assert encodings.readable(name)


@pytest.mark.parametrize("name,why", [
    ("utf-16", "only UTF-8 and single-byte"), ("shift_jis", "only UTF-8 and single-byte"),
    ("cp037", "only UTF-8 and single-byte"), ("klingon", "unknown encoding")])
def test_multi_byte_and_ebcdic_encodings_are_refused_saying_why(name, why):
    with pytest.raises(ValueError, match=why):
        encodings.check(name)
    assert not encodings.readable(name)


@pytest.mark.parametrize("head,expected", [
    (b"a,b\nx,1\n", "utf-8"),                                    # ASCII
    ("a,b\ncaf\u00e9,1\n".encode("utf-8"), "utf-8"),
    ("a,b\ncaf\u00e9,1\n".encode("cp1252"), "cp1252"),
    ("\u00eele,b\n\u20ac,1\n".encode("cp1252"), "cp1252"),     # the header too
    # UTF-8 text with one bad byte: UTF-8 (the bad line is a dead letter)
    ("a,b\ncaf\u00e9,1\n".encode("utf-8") + b"x\xe9,2\n", "utf-8"),
    # a character cut at the head's end is not a reason to leave UTF-8
    ("a,b\ncaf\u00e9,1\n".encode("utf-8") + "\u00e9".encode("utf-8")[:1], "utf-8"),
    # UTF-16 is not cp1252 text: left to the header check, which names it
    ("a,b\ncaf\u00e9,1\n".encode("utf-16"), "utf-8"),
])
def test_auto_reads_a_head_as_utf8_unless_it_holds_no_utf8_outside_ascii(head, expected):
    assert encodings.sniff(head) == expected
    assert encodings.resolve("auto", head) == expected
    assert encodings.resolve("latin-1", head) == "iso8859-1"  # a name given is kept


def test_every_byte_is_transcoded_none_lost():
    every = bytes(range(256))
    text = encodings.to_utf8(every, "cp1252").decode("utf-8")
    assert len(text) == 256 and text[0x80] == "\u20ac" and text[0xe9] == "\u00e9"
    assert text[0x81] == "\x81"  # undefined in cp1252: its C1 control, as browsers read it
    assert encodings.to_utf8(b"plain,ascii\n", "cp1252") == b"plain,ascii\n"
    assert encodings.to_utf8(b"\xe9", encodings.UTF8) == b"\xe9"  # UTF-8: untouched


def test_a_reader_gives_arrow_utf8_and_reads_at_most_what_it_is_asked():
    raw = "a,b\ncaf\u00e9,1\n\u20ac,2\n".encode("cp1252")
    table = pacsv.open_csv(encodings.Utf8Reader(io.BytesIO(raw), "cp1252")).read_all()
    assert table.to_pylist() == [{"a": "caf\u00e9", "b": 1}, {"a": "\u20ac", "b": 2}]
    f = io.BytesIO(raw)
    r = encodings.reader(f, "cp1252")
    assert r.readline(6) == b"a,b\n" and r.readline(6) == "caf\u00e9,1".encode("utf-8")
    assert f.tell() == 10  # 6 bytes of the file's second line, 7 once transcoded
    assert encodings.reader(f, encodings.UTF8) is f


def test_naming_a_single_byte_encoding_for_a_utf8_file_warns(caplog):
    head = "a,b\ncaf\u00e9,1\n".encode("utf-8")
    assert encodings.resolve("latin-1", head) == "iso8859-1"  # as asked
    assert "head is UTF-8 text" in caplog.text
    caplog.clear()
    assert encodings.resolve("latin-1", "caf\u00e9\n".encode("latin-1")) == "iso8859-1"
    assert caplog.text == ""
