"""CSV record assembly, row validation with reasons, split, and Arrow packing."""
import dataclasses
import json

import pyarrow as pa
import pytest

from preprocessing import TAXI_SPEC
from preprocessing.accounting import rejects
from preprocessing.contract.schema import Schema
from preprocessing.contract.split import boundaries, parse_fractions, split_index, split_indices
from preprocessing.contract.values import DATE_ORDER_FORMS, NumberError, coerce_value, parse_json
from preprocessing.parsing import csv_records, record_batches, row_parser

SCHEMA = Schema.load(TAXI_SPEC)
HEADER = list(SCHEMA.names)
GOOD = ["k1", "2025-03-04 05:06:07 UTC", "-73.9", "40.7", "-73.95", "40.75", "2", "Cash",
        "Flash Cab", "12.5"]


def test_records_join_quoted_newlines_and_keep_start_line_numbers():
    lines = ['a,b\n', '1,"two\n', 'lines"\n', '\n', '3,"x, y"\r\n', '4,"unterminated\n']
    rejects = []
    recs = list(csv_records.iter_csv_records(lines, 1, rejects))
    assert recs == [(1, "a,b"), (2, '1,"two\nlines"'), (5, '3,"x, y"')]
    fields = csv_records.split_fields([r for _, r in recs])
    assert fields[1] == ["1", "two\nlines"] and fields[2] == ["3", "x, y"]
    # A quote still open at the end: its line is rejected, not joined with what follows.
    assert [(r[0], r[1], r[2]) for r in rejects] == [(6, '4,"unterminated', "unterminated_quote")]
    # A malformed record is flagged (None) rather than failing the whole batch.
    assert csv_records.split_fields(['1,"x', "2,y"]) == [None, ["2", "y"]]


def test_a_field_over_pythons_128kb_csv_limit_splits_as_arrows_blocks_read_it():
    """Within --max_record_bytes a field of any size is a field (Python's csv module once
    rejected one over 128 kB as malformed_csv where the column-wise blocks read it)."""
    text = "w" * 300_000
    assert csv_records.split_fields([f"1,{text},p", f'2,"{text}",q']) == [
        ["1", text, "p"], ["2", text, "q"]]


def test_a_stray_quote_costs_one_line_not_the_rest_of_the_file():
    body = ["h,v\n", '1,"stray\n'] + [f"{i},ok\n" for i in range(2, 2002)]
    rejects = []
    recs = list(csv_records.iter_csv_records(body, 1, rejects, max_lines=50))
    assert rejects[0][:3] == (2, '1,"stray', "unterminated_quote") and len(rejects) == 1
    assert [n for n, _ in recs] == [1] + list(range(3, 2003))  # every other line, in order
    # Bytes bound too, and a single line over it is record_too_large.
    rejects = []
    recs = list(csv_records.iter_csv_records(["h\n", "x" * 100 + "\n", '"a\n', "b" * 60 + "\n",
                                          'c"\n', "2\n"], 1, rejects, max_bytes=50))
    assert [(r[0], r[2]) for r in rejects] == [(2, "record_too_large"),
                                               (3, "unterminated_quote"),
                                               (4, "record_too_large"),
                                               (5, "unterminated_quote")]
    assert recs == [(1, "h"), (6, "2")]


def test_good_row_parses_to_typed_values_in_schema_order():
    p = row_parser.RowParser(SCHEMA, HEADER)
    v = p.parse(GOOD)
    assert v[SCHEMA.names.index("passenger_count")] == 2
    assert v[SCHEMA.names.index("fare_amount")] == 12.5
    # Columns may come in any order: the header decides.
    p2 = row_parser.RowParser(SCHEMA, list(reversed(HEADER)))
    assert p2.parse(list(reversed(GOOD))) == v


def test_default_fills_empty_optional_column():
    row = list(GOOD)
    row[HEADER.index("passenger_count")] = ""
    assert row_parser.RowParser(SCHEMA, HEADER).parse(row)[HEADER.index("passenger_count")] == 1


@pytest.mark.parametrize("column, value, reason", [
    ("fare_amount", "", "missing_value"),
    ("pickup_longitude", "n/a", "unparsable_number"),
    ("pickup_longitude", "inf", "non_finite_number"),
    ("passenger_count", "2.5", "unparsable_number"),
    # the number grammar (values.NUMBER_PATTERN) and float32 / int64 storage
    ("pickup_longitude", "1_000", "unparsable_number"),
    ("pickup_longitude", "0x10", "unparsable_number"),
    ("pickup_longitude", "\u0661\u0662", "unparsable_number"),
    ("pickup_longitude", "-Infinity", "non_finite_number"),
    ("pickup_longitude", "1e-400", "number_out_of_range"),
    ("pickup_longitude", "1e-50", "number_out_of_range"),
    ("pickup_longitude", "1e39", "number_out_of_range"),
    ("pickup_longitude", "1e400", "number_out_of_range"),
    ("passenger_count", "1_000", "unparsable_number"),
    ("passenger_count", "9223372036854775808", "number_out_of_range"),
    ("passenger_count", "1e300", "number_out_of_range"),
    ("pickup_datetime", "2025-13-45 99:00:00", "unparsable_datetime"),
    ("pickup_datetime", "yesterday", "unparsable_datetime"),
    ("pickup_datetime", "2025-01-01 00:00:00 garbage", "unparsable_datetime"),
    ("pickup_datetime", "2025-01-01 00:00:00+25:00", "unparsable_datetime"),
    ("pickup_datetime", "2025-01-01 00:00:00 PST", "unparsable_datetime"),
])
def test_bad_values_get_their_reason(column, value, reason):
    row = list(GOOD)
    row[HEADER.index(column)] = value
    with pytest.raises(rejects.Reject) as e:
        row_parser.RowParser(SCHEMA, HEADER).parse(row)
    assert e.value.reason == reason and column in e.value.detail


@pytest.mark.parametrize("column, value, parsed", [
    ("pickup_longitude", " +.5e1 ", 5.0), ("pickup_longitude", "5.", 5.0),
    ("pickup_longitude", "0e-400", 0.0), ("pickup_longitude", "-3.4e38", -3.4e38),
    ("passenger_count", "007", 7), ("passenger_count", "3.0", 3), ("passenger_count", "2e3", 2000),
    ("passenger_count", "-9223372036854775808", -(1 << 63)),
])
def test_numbers_the_grammar_accepts(column, value, parsed):
    row = list(GOOD)
    row[HEADER.index(column)] = value
    assert row_parser.RowParser(SCHEMA, HEADER).parse(row)[HEADER.index(column)] == parsed


def test_structural_errors():
    p = row_parser.RowParser(SCHEMA, HEADER)
    with pytest.raises(rejects.Reject, match="wrong_column_count"):
        p.parse(GOOD[:-1])
    # empty fields past the header's (a delimiter ending each row) are no data: kept
    assert p.parse(list(GOOD) + [""]) == p.parse(list(GOOD) + ["", " "]) == p.parse(GOOD)
    with pytest.raises(rejects.Reject, match="expected 10 fields, found 11"):
        p.parse(list(GOOD) + ["5"])
    with pytest.raises(rejects.Reject, match="wrong_column_count"):
        p.parse(list(GOOD) + ["", "5"])
    with pytest.raises(rejects.Reject, match="malformed_csv"):
        p.parse(None)
    short = row_parser.RowParser(SCHEMA, [h for h in HEADER if h != "fare_amount"])
    with pytest.raises(rejects.Reject, match="missing_column"):
        short.parse(GOOD[:-1])


def test_record_batch_layout_matches_tensor_adapter():
    p = row_parser.RowParser(SCHEMA, HEADER)
    rows = [p.parse(GOOD), p.parse(["k2"] + GOOD[1:])]
    rb = record_batches.rows_to_record_batch(rows, SCHEMA)
    assert rb.num_rows == 2
    assert rb.schema == record_batches.arrow_schema(SCHEMA)
    assert rb.column(SCHEMA.names.index("key")).to_pylist() == [[b"k1"], [b"k2"]]
    assert rb.column(SCHEMA.names.index("fare_amount")).type == pa.large_list(pa.float32())
    from tfx_bsl.tfxio import tensor_adapter
    adapter = tensor_adapter.TensorAdapter(record_batches.tensor_adapter_config(SCHEMA))
    tensors = adapter.ToBatchTensors(rb)
    assert tensors["passenger_count"].shape == (2,)
    assert tensors["key"].numpy().tolist() == [b"k1", b"k2"]


def test_split_is_deterministic_and_follows_fractions():
    b = boundaries(parse_fractions("0.8,0.1,0.1"))
    keys = [f"trip-{i}" for i in range(20000)]
    first = [split_index(k, b) for k in keys]
    assert first == [split_index(k, b) for k in keys]
    # The vectorised form (Arrow blocks) assigns every key, number keys too, the same split.
    assert split_indices(keys + [7, 2.5], b).tolist() == first + [split_index(7, b),
                                                                   split_index(2.5, b)]
    assert split_index(7, b) == split_index("7", b)
    for fractions in ("0.9,0.1", "0.5,0.5,0", "1,0,0", "0.2,0,0.8"):
        fb = boundaries(parse_fractions(fractions))
        assert split_indices(keys, fb).tolist() == [split_index(k, fb) for k in keys], fractions
    shares = [first.count(i) / len(keys) for i in range(3)]
    assert abs(shares[0] - 0.8) < 0.02 and abs(shares[1] - 0.1) < 0.01
    assert parse_fractions("0.9,0.1") == (0.9, 0.1, 0.0)
    for bad in ("0.5,0.6", "a,b", "0,0.5,0.5", "1"):
        with pytest.raises(ValueError):
            parse_fractions(bad)


def _row_by_row(parser, fields_list):
    out = {}
    for i, f in enumerate(fields_list):
        try:
            out[i] = parser.parse(f)
        except rejects.Reject as e:
            out[i] = (e.reason, e.detail)
    return out


@pytest.mark.parametrize("optional", [(), ("fare_amount",)])
def test_column_wise_parse_matches_row_by_row(optional):
    """parse_many (the batch job's fast path) gives exactly parse's values and reasons."""
    import random
    rng = random.Random(5)
    pc, fare, dt = (HEADER.index(c) for c in ("passenger_count", "fare_amount",
                                               "pickup_datetime"))
    mutations = [
        (pc, ""), (pc, "3.0"), (pc, "3.5"), (pc, " 4 "), (pc, "99999999999999999999"),
        (pc, "x"), (fare, "nan"), (fare, "-inf"), (fare, "1e400"), (fare, ""), (fare, " 7.25 "),
        (fare, "1_0"), (fare, "1e-400"), (fare, "1e39"), (fare, "0e-9"), (pc, "1_0"),
        (pc, "\u0663"), (pc, "9223372036854775808"), (pc, "2e3"),
        (dt, "2025-13-01 00:00:00"), (dt, "yesterday"), (dt, ""),
        (0, ""), (HEADER.index("company"), "  "), (HEADER.index("company"), "\ud800"),
    ]
    fields_list = []
    for i in range(3000):
        row = list(GOOD)
        row[0] = f"k{i}"
        row[fare] = f"{rng.uniform(2, 80):.2f}"
        r = rng.random()
        if r < 0.3:
            col, value = rng.choice(mutations)
            row[col] = value
        elif r < 0.33:
            row = row[:-1]
        elif r < 0.35:
            row = None
        elif r < 0.37:
            row = row + [""] if r < 0.36 else row + ["", "x"]
        fields_list.append(row)
    parser = row_parser.RowParser(SCHEMA, HEADER, optional)
    block = parser.parse_many(fields_list)
    got = dict(zip(block.index, block.rows()))
    got.update({i: (e.reason, e.detail) for i, e in block.errors})
    assert got == _row_by_row(parser, fields_list)
    assert sorted(block.index + [i for i, _ in block.errors]) == list(range(len(fields_list)))
    # Numeric columns without gaps come back as numpy arrays (what the model call wants).
    assert hasattr(block.columns[HEADER.index("pickup_longitude")], "dtype")


def test_a_decimal_comma_column_reads_39_1_alike_row_by_row_and_column_wise():
    """A float column whose numbers are written 39,1 (ColumnSpec.decimal ","): both parsers
    read the comma as a point, and refuse a point there (1.234 is a thousand and more in
    such a file), each reject with the text as written."""
    comma = dataclasses.replace(SCHEMA, columns=tuple(
        dataclasses.replace(c, decimal=",") if c.name == "fare_amount" else c
        for c in SCHEMA.columns))
    fare = HEADER.index("fare_amount")
    read = {"39,1": 39.1, "-0,5": -0.5, "7": 7.0, " 12,25 ": 12.25, "1,5e3": 1500.0}
    refused = {"1.234": "unparsable_number", "1,2,3": "unparsable_number",
               "1,5x": "unparsable_number", "nan": "non_finite_number",
               "1e39": "number_out_of_range"}
    parser = row_parser.RowParser(comma, HEADER)
    rows = _read_alike(parser, fare, read, refused)
    assert "as float with a decimal ','" in _reject_of(parser, rows[len(read)]).detail
    # JSON: a number is a number (its point read as the mark); a text follows the mark.
    record = dict(zip(HEADER, GOOD))
    for value, want in (("39.5", 39.5), ('"39,5"', 39.5), ("4", 4.0), ("-2e-3", -0.002)):
        obj = parse_json(json.dumps({**record, "fare_amount": "x"}).replace('"x"', value))
        assert parser.parse_dict(obj)[fare] == want
    with pytest.raises(rejects.Reject, match="'39.5' as float with a decimal ','"):
        parser.parse_dict({**record, "fare_amount": "39.5"})
    # The same texts in a column of the default mark: a comma is no number there.
    assert _reject_of(row_parser.RowParser(SCHEMA, HEADER), rows[0]).reason == \
        "unparsable_number"


@pytest.mark.parametrize("column, form, read, refused, named", [
    ("fare_amount", {"grouping": ","},
     {"1,234,567.5": 1234567.5, "-12,000": -12000.0, "999.25": 999.25, "+1,000": 1000.0,
      "7": 7.0, " 2,500.75 ": 2500.75, "(1,234.50)": -1234.5, "(7)": -7.0},
     ["12,34", "1,2345", ",123", "1,,234", "1,234e5", "1,234.5.6", "1,234,56", "(12,34)",
      "(-5)", "((5))", "(5", "5)", "()"],
     "grouped in threes by ','"),
    ("fare_amount", {"decimal": ",", "grouping": "."},
     {"1.234.567,5": 1234567.5, "39,1": 39.1, "1.000": 1000.0}, ["1.23,4", "1,234.5", "12.34"],
     "grouped in threes by '.'"),
    ("passenger_count", {"grouping": ","}, {"1,234": 1234, "-5,000,000": -5000000, "3": 3},
     ["1,234.5", "12,3"], "grouped in threes by ','"),
    ("fare_amount", {"grouping": ",", "unit": "$"},
     {"$1,234.50": 1234.5, "-$5": -5.0, "$ 7": 7.0, "$-2": -2.0, "8.25": 8.25, "5$": 5.0,
      "-1,000 $": -1000.0, "($1,234.50)": -1234.5},
     ["$5$", "$$5", "5$$", "$12,34", "US$5", "$"], "written with '$'"),
    ("fare_amount", {"decimal": ",", "grouping": ".", "unit": "€"},
     {"1.234,50 €": 1234.5, "-5 €": -5.0, "€ 7,5": 7.5, "8": 8.0, "(1.234,50 €)": -1234.5},
     ["5 € €", "€5€", "5 EUR", "€"], "written with '€'"),
    ("fare_amount", {"unit": "%"}, {"13.5%": 13.5, "13.5 %": 13.5, "-2%": -2.0, "7": 7.0},
     ["%5", "12%%", "13.5 pct", "%"], "written with '%'"),
    ("fare_amount", {"unit": "kmpl"}, {"23.4 kmpl": 23.4, "23.4kmpl": 23.4, "19": 19.0,
                                       "-1.5 kmpl": -1.5},
     ["26.6 km/kg", "23.4 kmpl kmpl", "23.4 kmplx", "kmpl", "23.4 KMPL"], "written with 'kmpl'"),
    ("passenger_count", {"grouping": ".", "decimal": ",", "unit": "CC"},
     {"1.248 CC": 1248, "915 CC": 915, "1.315": 1315},
     ["1,5 CC", "12.34 CC", "1248 cc"], "written with 'CC'"),
    ("fare_amount", {"unit": "°C"}, {"25 °C": 25.0, "-3.5°C": -3.5}, ["25 °F", "25 C"],
     "written with '°C'"),
    # a word's plural is the same unit; a one-letter unit has none (`ms` is no `m`)
    ("passenger_count", {"unit": "year"}, {"1 year": 1, "2 years": 2, "3years": 3},
     ["2 yearss", "2 yrs", "2 Years"], "written with 'year'"),
    ("fare_amount", {"unit": "m"}, {"2.5 m": 2.5}, ["3 ms"], "written with 'm'"),
    ("fare_amount", {"grouping": ",", "unit": "USD"},
     {"USD 1,200.5": 1200.5, "USD5": 5.0, "-USD 5": -5.0, "7 USD": 7.0},
     ["EUR 5", "USD USD 5", "US 5"], "written with 'USD'"),
])
def test_a_number_column_written_with_separators_or_signs_reads_alike_row_by_row_and_column_wise(
        column, form, read, refused, named):
    """A number column written with thousands separators (ColumnSpec.grouping; "." beside
    a decimal comma) or a unit sign (ColumnSpec.unit: `$5`, `13.5%`): both parsers drop the
    mark where it belongs (the integer part grouped in threes, a currency before the
    digits or after the number, a percent after it) and refuse it elsewhere (`12,34` is no thousand), each
    reject naming the form; there an accountant's `(1,234.50)` is -1,234.50."""
    written = dataclasses.replace(SCHEMA, columns=tuple(
        dataclasses.replace(c, **form) if c.name == column else c for c in SCHEMA.columns))
    written.validate()
    parser = row_parser.RowParser(written, HEADER)
    rows = _read_alike(parser, HEADER.index(column), read,
                       {text: "unparsable_number" for text in refused})
    assert all(named in _reject_of(parser, row).detail for row in rows[len(read):])


def test_a_plain_number_column_refuses_an_accountants_parentheses():
    """`(5)` is -5 only where the column is written as a spreadsheet exports accounts (a
    separator, a sign, a decimal comma); in a plain number column it is no number."""
    with pytest.raises(NumberError, match="not a decimal number"):
        coerce_value("(5)", "float")
    assert coerce_value("(5)", "float", unit="%") == -5.0


def _read_alike(parser, pos, read: dict, refused: dict) -> list:
    """The rows of GOOD with field `pos` each text of `read` ({text: value}) and `refused`
    ({text: reason}): the row parser reads or rejects each so (the reject quoting the
    text), and the Arrow path (parse_many) gives the same values and rejects."""
    rows = []
    for text in list(read) + list(refused):
        row = list(GOOD)
        row[pos] = text
        rows.append(row)
        if text in read:
            assert parser.parse(row)[pos] == read[text]
        else:
            reject = _reject_of(parser, row)
            assert reject.reason == refused[text] and repr(text.strip()) in reject.detail
    block = parser.parse_many(rows * 20)  # past FEW_ROWS: the Arrow path
    got = dict(zip(block.index, block.rows()))
    got.update({i: (e.reason, e.detail) for i, e in block.errors})
    assert got == _row_by_row(parser, rows * 20) and len(block.errors) == 20 * len(refused)
    return rows



@pytest.mark.parametrize("order, read, refused", [
    ("mdy", ["1/3/2011", "12/31/99 23:59", "2.29.2024", "1-3-11 9:05:07", "Aug 6, 2009",
             "june 22 2018 10:30", "SEPT. 9 01"],
     ["31/12/2011", "2/29/2023", "1/3-2011", "2011-01-03 00:00:00", "6-Aug-09", "1 3 2011",
      "Aug 6,2009", "Jnu 6 2009", "1/3/2011 24:00"]),
    ("dmy", ["03.01.2011", "31/12/99 23:59", "29.2.2024", "1-3-11 9:05:07", "6-Aug-09",
             "06 August 2009 10:30"],
     ["12/31/2011", "29.2.2023", "1.3/2011", "2011-01-03", "Aug 6, 2009", "31-Feb-09",
      "6, Aug 2009", "1.3.2011 9:60"]),
    ("ym", ["2018-03", "3/2018", "Mar-18", "1960 Jan", "Sept. 2001", "1998 Q1", "q4-2020"],
     ["2018-13", "03/18", "Mar 15", "2018 3", "2018-03-01", "Q5 1998", "1998Q1", "Mayo 2018"]),
])
def test_a_month_or_day_first_datetime_column_is_read_alike_row_by_row_and_column_wise(
        order, read, refused):
    """A datetime column written `1/3/2011` (ColumnSpec.date_order mdy), `03.01.2011`
    (dmy) or as a month alone (ym: `Mar-18`, `1998 Q1`): both parsers keep the text its
    transform reads, and reject what is no date in that order, saying which form the column
    takes."""
    dated = dataclasses.replace(SCHEMA, columns=tuple(
        dataclasses.replace(c, date_order=order) if c.name == "pickup_datetime" else c
        for c in SCHEMA.columns))
    at = HEADER.index("pickup_datetime")
    parser = row_parser.RowParser(dated, HEADER)
    rows = []
    for text in read + refused:
        row = list(GOOD)
        row[at] = text
        rows.append(row)
        if text in read:
            assert parser.parse(row)[at] == text
        else:
            e = _reject_of(parser, row)
            assert e.reason == "unparsable_datetime" and repr(text) in e.detail
    assert DATE_ORDER_FORMS[order] in _reject_of(parser, rows[-1]).detail
    block = parser.parse_many(rows * 10)  # past FEW_ROWS: the Arrow path
    got = dict(zip(block.index, block.rows()))
    got.update({i: (e.reason, e.detail) for i, e in block.errors})
    assert got == _row_by_row(parser, rows * 10) and len(block.index) == 10 * len(read)
    # The ISO column of the same schema refuses them all.
    assert _reject_of(row_parser.RowParser(SCHEMA, HEADER), rows[0]).reason == \
        "unparsable_datetime"

def _reject_of(parser, fields):
    with pytest.raises(rejects.Reject) as e:
        parser.parse(fields)
    return e.value


def test_column_wise_parse_of_a_header_missing_a_required_column():
    parser = row_parser.RowParser(SCHEMA, HEADER[:-2])
    block = parser.parse_many([GOOD[:-2]] * 3)
    assert len(block) == 0 and {e.reason for _, e in block.errors} == {"missing_column"}
    assert "delimited" not in block.errors[0][1].detail


def test_a_header_read_as_one_column_names_the_delimiter_it_holds():
    """A ';' file read at commas (batch_predict without --delimiter): every row's dead
    letter says which flag reads it."""
    for header, flag in ((";".join(HEADER), "';'"), ("\t".join(HEADER), "tab")):
        parser = row_parser.RowParser(SCHEMA, [header])
        reject = _reject_of(parser, [header])
        assert reject.reason == "missing_column" and reject.detail.endswith(
            f"-delimited? add --delimiter {flag}")


def test_a_column_with_a_default_must_be_in_the_header_where_whole_columns_are_asked():
    """An empty field takes the column's default; a column absent from the header is no
    empty field at serving (every row would read the default): with `whole_columns` it is
    a `missing_column`, named with the header's name for it in another case."""
    header = [h.upper() if h == "passenger_count" else h for h in HEADER]
    at = SCHEMA.names.index("passenger_count")
    assert row_parser.RowParser(SCHEMA, header).parse(GOOD)[at] == 1  # preprocess: the default
    parser = row_parser.RowParser(SCHEMA, header, whole_columns=True)
    assert parser.missing_columns == ["passenger_count"]
    reject = _reject_of(parser, GOOD)
    assert reject.reason == "missing_column"
    assert "the header has 'PASSENGER_COUNT' for 'passenger_count'" in reject.detail
    block = parser.parse_many([GOOD] * 10)
    assert len(block) == 0 and {e.reason for _, e in block.errors} == {"missing_column"}


@pytest.mark.parametrize("missing, header, hint", [
    (["fare"], ["FARE", "x"], "the header has 'FARE' for 'fare'"),
    (["trip_miles"], ["Trip Miles"], "the header has 'Trip Miles' for 'trip_miles'"),
    (["pickup-time"], ["PickupTime"], "the header has 'PickupTime' for 'pickup-time'"),
    (["fare"], ["tip", "fares"], ""),
    (["?"], ["_", "x"], ""),
])
def test_a_missing_columns_near_names_in_the_header_are_named(missing, header, hint):
    got = csv_records.near_names_hint(missing, header)
    assert (hint in got and got.endswith("names must match exactly)")) if hint else got == ""


def test_one_registry_of_reject_reasons():
    # Every reason a job can write is registered with a description; an unknown one is a
    # programming error, caught where the reject is made.
    assert all(isinstance(v, str) and v for v in rejects.REASONS.values())
    with pytest.raises(ValueError, match="unknown reject reason"):
        rejects.Reject("no_such_reason", "x")
    with pytest.raises(ValueError, match="unknown reject reason"):
        rejects.dead_letter_record("job", "f.csv", 1, "raw", "no_such_reason", "x")
    letter = rejects.dead_letter_record("job", "f.csv", 3, b"a,b", "wrong_column_count", "d",
                                        id="m1")
    assert (letter.reason, letter.raw, letter.get("id")) == ("wrong_column_count", "a,b", "m1")
    assert json.loads(letter.to_json()) == {"job": "job", "source": "f.csv", "line": 3,
                                            "raw": "a,b", "reason": "wrong_column_count",
                                            "detail": "d", "id": "m1"}


def test_json_nested_100000_deep_is_a_reject_not_a_crash():
    with pytest.raises(rejects.Reject) as e:
        parse_json("[" * 100_000 + "]" * 100_000)
    assert e.value.reason == "invalid_json" and "nested too deeply" in e.value.detail
    with pytest.raises(rejects.Reject, match="not JSON"):
        parse_json("{broken")


@pytest.mark.parametrize("text, reason", [
    ("1e-400", "number_out_of_range"), ("1e400", "number_out_of_range"),
    ("NaN", "non_finite_number"), ('"1_000"', "unparsable_number"), ("1.5", None),
])
def test_json_numbers_follow_the_csv_number_grammar(text, reason):
    obj = dict(zip(HEADER, GOOD))
    doc = json.dumps(obj).replace(json.dumps(obj["pickup_longitude"]), text, 1)
    parser = row_parser.RowParser(SCHEMA, HEADER)
    if reason is None:
        assert parser.parse_dict(parse_json(doc))[HEADER.index("pickup_longitude")] == 1.5
        return
    with pytest.raises(rejects.Reject) as e:
        parser.parse_dict(parse_json(doc))
    assert e.value.reason == reason


def test_a_reject_survives_pickling_between_pipeline_stages():
    import pickle
    back = pickle.loads(pickle.dumps(rejects.Reject("model_rejected", "bad input")))
    assert (type(back), back.reason, back.detail) == (rejects.Reject, "model_rejected",
                                                      "bad input")


def test_record_batches_cross_stages_in_arrows_format_and_are_sized_without_encoding(
        monkeypatch):
    """Beam sizes the elements it samples by encoding them unless the coder knows better:
    pickling a 1,000-column batch for that cost seconds a job (docs/performance.md)."""
    import apache_beam as beam
    p = row_parser.RowParser(SCHEMA, HEADER)
    rb = record_batches.rows_to_record_batch(
        [p.parse(GOOD), p.parse(["k2"] + GOOD[1:])], SCHEMA)
    coder = beam.coders.registry.get_coder(pa.RecordBatch)
    assert isinstance(coder, record_batches.RecordBatchCoder)
    impl = coder.get_impl()
    back = impl.decode(impl.encode(rb))
    assert back.equals(rb) and back.schema == rb.schema
    monkeypatch.setattr(record_batches.RecordBatchCoder, "encode",
                        lambda self, b: pytest.fail("encoded to be sized"))
    assert record_batches.RecordBatchCoder().get_impl().estimate_size(rb) >= rb.nbytes


def test_a_header_below_a_title_is_named_by_its_line():
    head = 'Trips, exported 2025\n\n"id";"fare"\nk1;3.5\n'
    assert csv_records.header_below_hint(head, "fare", ";") == (
        "; line 3 holds it ('\"id\";\"fare\"'): remove the 2 line(s) above the header")
    assert csv_records.header_below_hint(head, "tip", ";") == ""
    assert csv_records.header_below_hint("a,b\n" + "x\n" * 30 + "fare\n", "fare") == ""
