"""fast_csv (the batch job's Arrow CSV path) against the row-by-row path it must equal, and
the Arrow-built JSON lines against json.dumps."""
import dataclasses
import json
import math
import random

import numpy as np
import pyarrow as pa
import pytest

from inference.inputs.rows import ServingParser
from inference.outputs.predictions import PredictionBlock
from preprocessing import TAXI_SPEC
from preprocessing.accounting import rejects
from preprocessing.contract.schema import Schema
from preprocessing.contract.values import looks_like_datetime
from preprocessing.parsing import columns, csv_records, fast_csv
from tools.datagen import generate_rows

SCHEMA = Schema.load(TAXI_SPEC)
HEADER = tuple(c.name for c in SCHEMA.columns)
PARSER = ServingParser(SCHEMA).parser(HEADER)  # label and key optional, as at serving
# Field values a mutation puts in: forms float()/int()/strip()/the datetime check read in
# ways Arrow alone would not (or would read differently), and plain good ones.
ODD_VALUES = [
    "", " ", " 1.5", "1.5 ", "\u00a01.5", "\u20031", "\x1c2", "nan", "inf", "-inf", "1e400",
    "nan(1)", "1_0", "0x10", "3.0", "+5", "007", "1e5", ".5", "5.", "+.5e-3", "\u0661\u0662",
    "99999999999999999999", "-0", "abc", '"q"', '"a""b"', '"a"b', "2025-02-29 10:00:00",
    "2024-02-29 10:00:00", "2025-13-01 00:00:00", "2025-01-01 24:00:00",
    "2025-01-01T10:00:00", "0000-01-01 00:00:00", "2025-01-01 00:00:60", "2025-1-01 00:00:00",
    " 2025-01-01 00:00:00 UTC ", "\u00e9", "x\u2028", "2025-01-01 00:00:00", "1,5", "12",
    "-3", "1.5e-320", "0.0001", "1.000000000000000000000000001", "\u0662025-01-01 00:00:00",
    # the edges of the number grammar and of float32 / int64 storage
    "1e-400", "-1e-50", "0e-400", "0.000e5", "1e39", "3.4e38", "-3.5e38", "1.5e-46", "1e-45",
    "1_000", "1_000.5", "9223372036854775807", "9223372036854775808", "2e3", "1e16", "0x1p3",
    "\uff11\uff12", "1e", "e5", "--1", "+-1", "1.2.3", "Infinity", "-nan",
]


def _mutated_lines(rng, n, odd_quotes, quotes=True, comma_column=None):
    """`comma_column`: a column whose numbers are mostly written with a decimal comma."""
    rows = [fields for fields, _ in generate_rows(n, seed=rng.randrange(10**6),
                                                  dirty_fraction=0.05)]
    values = ODD_VALUES + (['a"b'] if odd_quotes else [])
    if not quotes:  # blocks without a quote take Arrow's own field count check
        values = [v for v in values if '"' not in v]
    lines = []
    for fields in rows:
        fields = list(fields)
        if comma_column is not None and comma_column < len(fields) and rng.random() < 0.9:
            fields[comma_column] = fields[comma_column].replace(".", ",")
        if rng.random() < 0.3:
            fields[rng.randrange(len(fields))] = rng.choice(values)
            r = rng.random()
            if r < 0.04:
                fields.append("x")
            elif r < 0.08:
                fields.pop()
            elif r < 0.12:  # a delimiter ending the row (or two): the row is kept
                fields += [""] * (1 + (r < 0.10))
        text = []
        for f in fields:  # quote what needs it, and sometimes what does not
            if quotes and (('"' in f or "," in f) and not f.startswith('"')
                           or rng.random() < 0.05):
                text.append('"' + f.replace('"', '""') + '"' if rng.random() < 0.7 else f)
            else:
                text.append(f)
        lines.append(",".join(text))
    if rng.random() < 0.3:
        lines.insert(rng.randrange(len(lines)), "")
    if odd_quotes and rng.random() < 0.3:
        lines.insert(rng.randrange(len(lines)), '"spans,lines')
    if rng.random() < 0.2:
        lines = [line + "\r" for line in lines]
    return lines


def _row_by_row(data: bytes, parser=PARSER):
    """What the reader + split_fields + RowParser.parse give: the reference."""
    lines = [line + "\n" for line in data.decode("utf-8").split("\n")]
    if data.endswith(b"\n"):
        lines = lines[:-1]
    records = list(csv_records.iter_csv_records(lines))
    good, bad = {}, {}
    for (pos, raw), fields in zip(records, csv_records.split_fields([r for _, r in records])):
        try:
            good[pos] = parser.parse(fields)
        except rejects.Reject as e:
            bad[pos] = (e.reason, e.detail, raw)
    return good, bad, len(records)


def _fast(data: bytes, parser=PARSER):
    block = fast_csv.parse_block(parser, data)
    if block is None:
        return None
    cols = [c.to_pylist() if isinstance(c, pa.Array) else
            c.tolist() if isinstance(c, np.ndarray) else c for c in block.columns]
    good = {int(i) + 1: tuple(v) for i, v in zip(block.index.tolist(), zip(*cols))}
    bad = {i + 1: (e.reason, e.detail, block.lines[i].as_py()) for i, e in block.errors}
    return good, bad, block.record_count


@pytest.mark.parametrize("seed, quotes", [(s, q) for s in range(3) for q in (True, False)])
def test_block_parse_equals_the_row_by_row_path(seed, quotes):
    rng = random.Random(seed)
    for _ in range(40):
        lines = _mutated_lines(rng, 150, odd_quotes=False, quotes=quotes)
        data = ("\n".join(lines) + ("\n" if rng.random() < 0.7 else "")).encode("utf-8")
        got = _fast(data)
        assert got is not None  # no field spans lines: the fast path takes the block
        want = _row_by_row(data)
        assert got[2] == want[2]
        assert got[1] == want[1]
        assert got[0].keys() == want[0].keys()
        for pos, values in want[0].items():
            assert got[0][pos] == values, (pos, lines[pos - 1])


def test_block_parse_of_a_decimal_comma_column_equals_the_row_by_row_path():
    """A float column written 39,1 (ColumnSpec.decimal ","), quoted in a comma-delimited
    file, among the odd values: the block path reads what the row path reads."""
    comma = dataclasses.replace(SCHEMA, columns=tuple(
        dataclasses.replace(c, decimal=",") if c.name == "fare_amount" else c
        for c in SCHEMA.columns))
    parser = ServingParser(comma).parser(HEADER)
    rng = random.Random(11)
    read = 0
    for _ in range(20):
        lines = _mutated_lines(rng, 150, odd_quotes=False,
                               comma_column=HEADER.index("fare_amount"))
        data = ("\n".join(lines) + "\n").encode("utf-8")
        got, want = _fast(data, parser), _row_by_row(data, parser)
        assert got[:2] == want[:2]
        read += len(want[0])
    assert read > 1000  # the rows whose fare (written with a comma) was quoted are read


def test_blocks_with_fields_spanning_lines_or_bad_utf8_are_left_to_the_row_path():
    rng = random.Random(7)
    declined = 0
    for _ in range(40):
        data = "\n".join(_mutated_lines(rng, 100, odd_quotes=True)).encode("utf-8")
        got = _fast(data)
        if got is None:
            declined += 1
        else:  # even where odd-quote lines are absent or balanced, it is exact
            assert got == _row_by_row(data)
    assert declined > 0
    assert _fast(b"k1,2025-01-01 00:00:00,1,2,3,4,1,Cash,C,5\n\xff\xfe,x\n") is None
    assert _fast(b'k1,"2025-01-01\n00:00:00",1,2,3,4,1,Cash,C,5\n') is None


def test_numbers_arrow_reads_are_the_ones_python_reads():
    rng = random.Random(3)
    alphabet = "0123456789+-.eE_ xn"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 9)))
             for _ in range(3000)] + ODD_VALUES
    base = "k,2025-01-01 00:00:00,{f},2,3,4,{i},Cash,C,5"
    lines = [base.format(f=t, i=1) for t in texts if "," not in t and '"' not in t]
    lines += [base.format(f=1, i=t) for t in texts if "," not in t and '"' not in t]
    data = "\n".join(lines).encode("utf-8")
    got, want = _fast(data), _row_by_row(data)
    assert got == want
    assert len(want[0]) > 300 and len(want[1]) > 300  # both kinds well represented


def test_vectorised_datetime_check_is_looks_like_datetime():
    rng = random.Random(5)
    texts = []
    for _ in range(5000):
        y, mo, d = rng.randrange(0, 2500), rng.randrange(0, 14), rng.randrange(0, 33)
        h, mi, s = rng.randrange(0, 26), rng.randrange(0, 62), rng.randrange(0, 62)
        sep = rng.choice(" T ")
        # the date's separators: `-`, `/` or `.` twice; mixed or another are no date
        d1, d2 = rng.choice(["--", "--", "//", "..", "-/", "/.", "  ", "xx"])
        texts.append(f"{y:04d}{d1}{mo:02d}{d2}{d:02d}{sep}{h:02d}:{mi:02d}:{s:02d}"
                     + rng.choice(["", " UTC", "Z", ".5", "+05:30", "-0330", "+05", ".25-08:00",
                                   "+24:00", "+05:60", " PST", "x", "+5", ".Z"]))
        texts.append(f"{y:04d}{d1}{mo:02d}{d2}{d:02d}")  # a date alone
        texts.append(f"{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}"  # no seconds
                     + rng.choice(["", "", "Z", " UTC", "+05:30"]))
    texts += ["2024-02-29 00:00:00", "1900-02-29 00:00:00", "2000-02-29 00:00:00", "x", "",
              "2025-01-01", "\u0662025-01-01 00:00:00", "2024-02-29", "2023-02-29", "2025-1-01",
              "2025-01-01Z", "20250101000", "2016/01/01 00:47:36", "2016.02.29", "2016/1/01",
              "2018-01-01 02:22", "2018-01-01 2:22", "2018-01-01 02:2"]
    got = columns.datetime_ok(pa.array(texts)).tolist()
    assert got == [looks_like_datetime(t) for t in texts]
    assert sum(got) > 1000
    assert looks_like_datetime("2024-02-29") and not looks_like_datetime("2023-02-29")
    assert looks_like_datetime("2016/01/01 00:47:36") and looks_like_datetime("2016.02.29")
    assert not looks_like_datetime("2016/01-01") and not looks_like_datetime("2016/02/30")
    assert looks_like_datetime("2018-01-01 02:22") and not looks_like_datetime("2018-01-01 02:22Z")


def _records(block):
    return [json.dumps(r) for r in block.records()]


def test_arrow_json_lines_are_json_dumps():
    rng = np.random.default_rng(11)
    n = 4000
    preds = np.concatenate([
        rng.uniform(-60, 60, n), 10.0 ** rng.uniform(-8, 20, n) * rng.choice([-1, 1], n),
        np.round(rng.uniform(-100, 100, 200)), [0.0, -0.0, 1e-4, 1e16, 9.999e15, 1e-5,
                                                math.nan, math.inf, -math.inf]]).astype(np.float32)
    keys = [f"trip-{i:08d}" for i in range(len(preds))]
    plain = np.isfinite(preds) & (np.abs(preds) > 1e-4) & (preds != np.floor(preds))
    odd = [np.array(v, dtype=np.float32) for v in
           ([14.0, -3.0], [0.0], [2e-5, -1e-6], [1e17, -3e20], [math.nan], [math.inf])]
    for outputs in [{"predictions": preds[plain]}] + [  # all written by Arrow, then
            {"predictions": np.concatenate([preds[plain][:100], v])} for v in odd]:
        k = pa.array(keys[:len(outputs["predictions"])])
        block = PredictionBlock(k, outputs, "1795323218")
        assert block.json_lines().split("\n") == _records(block)
    odd_keys = pa.array(['a"b', "back\\slash", "\u00e9t\u00e9", "tab\there", "plain", ""])
    block = PredictionBlock(odd_keys, {"predictions": np.arange(6, dtype=np.float32) + 0.5},
                            "v1")
    assert block.json_lines().split("\n") == _records(block)
    # What the sink writes: the same text as bytes, also for keys sliced out of a column.
    for k in (odd_keys, odd_keys.slice(2, 3), pa.array(keys[:50]).slice(7, 20)):
        block = PredictionBlock(k, {"predictions": np.arange(len(k), dtype=np.float32) + .5},
                                "v1")
        assert block.json_bytes().decode("utf-8").split("\n") == _records(block)


def test_plain_keys_are_the_keys_json_dumps_writes_unchanged():
    """The vectorised check looks at exactly the keys' bytes, also for a slice of a column
    whose neighbours need escapes."""
    from inference.outputs.predictions import plain_keys
    keys = pa.array(['a"b', "plain key", "x\\y", "", "tab\there", "ok~!#", "\u00e9", "\x7f",
                     None, "z"])
    for start in range(len(keys)):
        for n in range(len(keys) - start + 1):
            part = keys.slice(start, n)
            values = part.to_pylist()
            want = None not in values and all(json.dumps(v) == f'"{v}"' and v.isprintable()
                                               for v in values)
            assert plain_keys(part) == want, values
            assert plain_keys(pa.array(values, pa.large_string())) == want, values


def test_block_keys_fall_back_to_file_and_line(tmp_path):
    from inference.model.model_handler import LineSources
    data = b"k1,2025-01-01 00:00:00,1,2,3,4,1,Cash,C,5\n,2025-01-01 00:00:00,1,2,3,4,1,Cash,C,5\n"
    block = fast_csv.parse_block(PARSER, data)
    sources = LineSources(block.lines, block.index, 10)
    key_col = block.columns[HEADER.index("key")]
    keys = sources.keys("gs://b/in/x.csv", key_col).to_pylist()
    assert sorted(keys) == ["k1", "x.csv:11"]
    assert sources.keys("x.csv").to_pylist() == [f"x.csv:{10 + i}" for i in block.index]
    assert sources[0] == (10 + int(block.index[0]), block.lines[int(block.index[0])].as_py())


def test_block_sources_read_again_from_the_file_give_the_same_lines(tmp_path):
    """A byte-range block's sources re-read its raw lines (dead letters of rows the model
    rejects) rather than carry them: the same text as the parsed block's lines."""
    import functools

    from inference.model.model_handler import LineSources
    from preprocessing.files.csv_blocks import block_lines
    rows = [b"k%d,2025-01-01 00:00:00,1,2,3,4,%d,Cash,C\xc3\xa9,5" % (i, i) for i in range(40)]
    data = b"\r\n".join(rows[:20]) + b"\n\n" + b"\n".join(rows[20:]) + b"\r\r\n"
    path = tmp_path / "x.csv"
    path.write_bytes(b"head\n" + data)
    block = fast_csv.parse_block(PARSER, data)
    assert len(block) == 40
    held = LineSources(block.lines, block.index, 2)
    again = LineSources(functools.partial(block_lines, str(path), 5, 5 + len(data)),
                        block.index, 2)
    assert [again[i] for i in range(40)] == [held[i] for i in range(40)]
    assert again[0:3][2] == held[2] and again[39][1].endswith("Cé,5")
    # a cp1252 file's range is read again as the UTF-8 its block was parsed from
    path.write_bytes(b"head\n" + data.decode("utf-8").encode("cp1252"))
    cp = LineSources(functools.partial(block_lines, str(path), 5, 5 + len(data) - 40, "cp1252"),
                     block.index, 2)
    assert [cp[i] for i in range(40)] == [held[i] for i in range(40)]


@pytest.mark.parametrize("order", ["mdy", "dmy"])
def test_vectorised_check_of_month_and_day_first_dates_is_looks_like_datetime(order):
    """The Arrow check of `1/3/2011`-style dates takes exactly what the row check takes:
    calendar dates in the column's order, two- and four-digit years, one separator, times,
    months by name (a space and a comma beside them only)."""
    rng = random.Random(7)
    texts = []
    for _ in range(6000):
        a, b = f"{rng.randrange(0, 33):0{rng.choice((1, 2))}d}", str(rng.randrange(0, 14))
        if rng.random() < 0.3:  # a month's name, or a word that is none
            b = rng.choice(["Aug", "august", "SEPT.", "Sep", "May", "Mayo", "Jnu", "Dec.", "Fe"])
        a, b = (a, b) if rng.random() < 0.5 else (b, a)
        year = rng.choice(["2011", "11", "99", "68", "69", "2024", "0000", "0004", "201", "2O11"])
        s1 = rng.choice("/.- ")
        s2 = s1 if rng.random() < 0.8 else rng.choice("/.-| ")
        comma = "," if rng.random() < 0.15 else ""
        clock = rng.choice(["", "", " 13:45", " 9:05:07", " 24:00", " 23:59:60", " 1:5",
                            "  1:05", "T10:00", " 12:30:5"])
        texts.append(f"{a}{s1}{b}{comma}{s2}{year}{clock}")
    texts += ["2/29/2024", "2/29/2023", "29.2.2024", "", "x", "\u0661/3/2011", "2011-01-03",
              "1/3/2011 ", "12/31/99", "31.12.1899"]
    got = columns.datetime_ok(pa.array(texts), order).tolist()
    assert got == [looks_like_datetime(t, order) for t in texts]
    assert sum(got) > 400 and len(texts) - sum(got) > 600
    assert looks_like_datetime("12/31/99", "mdy") and not looks_like_datetime("12/31/99", "dmy")


def test_vectorised_check_of_months_without_their_day_is_looks_like_datetime():
    """The Arrow check of `ym` values (`2018-03`, `Mar-18`, `1960 Jan`, `1998 Q1`) takes
    exactly what the row check takes: a month's number only beside a four-digit year and
    `-` or `/`, a two-digit year only after a month's name and `-` or `/`."""
    rng = random.Random(5)
    pieces = ["2018", "1960", "0000", "0001", "18", "75", "3", "03", "12", "13", "0", "Mar",
              "mar.", "Sept", "Sept.", "Mayo", "Jnu", "Q1", "q4", "Q5", "Q0", "December", ""]
    texts = [rng.choice(pieces) + rng.choice(["-", "/", " ", ".", "", "--"]) + rng.choice(pieces)
             for _ in range(6000)]
    texts += ["2018-03", "03/2018", "Oct-00", "1960 Jan", "1998 Q1", "Mar 15", "2018 3", "03/18",
              "2018-03-01", "٢018-03", " 2018-03"]
    got = columns.datetime_ok(pa.array(texts), "ym").tolist()
    assert got == [looks_like_datetime(t, "ym") for t in texts]
    assert got[-11:] == [True] * 5 + [False] * 6
    assert sum(got) > 300 and len(texts) - sum(got) > 3000
