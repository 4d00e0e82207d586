"""Float columns written as a clock (ColumnSpec.clock: a time of day `13:30`, `5:00 a.m.`, a
race's `2:31:38`; `duration`: `58:12` under an hour beside `1:02:03`, a swimmer's `1:02.35`):
read as seconds alike by the row, column and CSV block parsers, declared and checked in a
spec, and inferred from the data."""
import dataclasses
import datetime
import io
import random

import numpy as np
import pyarrow as pa
import pytest

from preprocessing import TAXI_SPEC
from preprocessing.accounting.rejects import Reject
from preprocessing.contract.kinds import SchemaError
from preprocessing.contract.schema import Schema
from preprocessing.contract.values import clock_seconds
from preprocessing.parsing import columns, fast_csv
from preprocessing.parsing.row_parser import RowParser
from preprocessing.schema_inference.infer import infer_from_profile
from preprocessing.schema_inference.profile import profile_csv, profile_rows

TAXI = Schema.load(TAXI_SPEC)


def _clocked(clock):
    return dataclasses.replace(TAXI, columns=tuple(
        dataclasses.replace(c, clock=clock) if c.name == "fare_amount" else c
        for c in TAXI.columns))


CLOCKED, TIMED = _clocked(True), _clocked("duration")
HEADER = list(TAXI.names)
GOOD = ["k1", "2025-03-04 05:06:07 UTC", "-73.9", "40.7", "-73.95", "40.75", "2", "Cash",
        "Flash Cab", "12:30"]
AT = HEADER.index("fare_amount")
READ = ["13:30", "0:00", "7:05:09", " 2:31:38 ", "38:31:00", "1234:00:00", "0:00:00.25",
        "5:00 a.m.", "12:30 am", "12:05 PM", "11:59pm", "1:07 P.M."]
REFUSED = ["13:30 pm", "0:15 am", "9:60", "7:5", "1:02:60", "12345:00", "13:30:00 UTC",
           "2025-03-04 05:06:07", "1:02:03:04", "-1:00", "a.m.", "1,5", "nan"]
# A duration's two parts are minutes and seconds; it has no am/pm.
DURATIONS = ["58:12", "0:07", " 1:02.35 ", "9999:59.999", "1:02:03", "38:31:00",
             "0:00:00.25", "24:00"]
NO_DURATIONS = ["5:00 a.m.", "12:30 am", "1:02.35 pm", "58:60", "1:02:60", "1:02.",
                "1:02.1234567890", "12345:00", "-1:00", "1:02.35:00", "1:2.35"]
# A number is seconds (a tf.Example or JSON carries the seconds the model gets).
SECONDS = {"4500": 4500.0, "48600.0": 48600.0, "1.5": 1.5, "-2": -2.0}


def _seconds(text: str) -> float:
    """What a clock text means, by the standard library: a 12-hour time through strptime, a
    duration through timedelta."""
    text = text.strip()
    if text[-1] in "mM.":
        clock, half = text.rstrip(".").rsplit(" ", 1) if " " in text else (text[:-2], text[-2:])
        t = datetime.datetime.strptime(f"{clock} {half.replace('.', '')}", "%I:%M %p")
        return datetime.timedelta(hours=t.hour, minutes=t.minute).total_seconds()
    h, m, *s = text.split(":")
    return datetime.timedelta(hours=int(h), minutes=int(m),
                              seconds=float(s[0]) if s else 0).total_seconds()


def _duration(text: str) -> float:
    """What a duration text means, by the standard library: M:SS[.ff] or H:MM:SS[.ff]."""
    *h, m, sec = text.strip().split(":")
    return datetime.timedelta(hours=int(h[0]) if h else 0, minutes=int(m),
                              seconds=float(sec)).total_seconds()


def _row(text):
    row = list(GOOD)
    row[AT] = text
    return row


def test_clock_texts_read_as_their_seconds_and_other_texts_are_dead_letters():
    parser = RowParser(CLOCKED, HEADER)
    for text in READ:
        assert parser.parse(_row(text))[AT] == _seconds(text), text
    for text, seconds in SECONDS.items():
        assert parser.parse(_row(text))[AT] == seconds
    for text in REFUSED:
        with pytest.raises(Reject) as e:
            parser.parse(_row(text))
        assert e.value.reason in ("unparsable_number", "non_finite_number"), text
        assert "as float as a clock" in e.value.detail and clock_seconds(text) is None
    # The same texts in a column that is no clock: no number.
    with pytest.raises(Reject, match="unparsable_number"):
        RowParser(TAXI, HEADER).parse(_row("13:30"))
    with pytest.raises(Reject, match="as a clock"):  # a fraction of a minute: a duration's
        parser.parse(_row("1:02.35"))


def test_durations_read_two_parts_as_minutes_and_seconds_and_refuse_am_pm():
    parser = RowParser(TIMED, HEADER)
    for text in DURATIONS:
        assert parser.parse(_row(text))[AT] == _duration(text), text
    for text, seconds in SECONDS.items():
        assert parser.parse(_row(text))[AT] == seconds
    for text in NO_DURATIONS:
        with pytest.raises(Reject, match="as float as a duration"):
            parser.parse(_row(text))
        assert clock_seconds(text.strip(), duration=True) is None, text


@pytest.mark.parametrize("schema, texts", [
    (CLOCKED, READ + REFUSED + ["1:02.35"]), (TIMED, DURATIONS + NO_DURATIONS + READ)])
def test_the_column_and_block_parsers_read_a_clock_column_as_the_row_parser_does(schema, texts):
    parser = RowParser(schema, HEADER)
    rng = random.Random(3)
    rows = [_row(rng.choice(texts + list(SECONDS) + ["", "NA"])) for _ in range(400)]
    want = {}
    for i, r in enumerate(rows):
        try:
            want[i] = parser.parse(r)
        except Reject as e:
            want[i] = (e.reason, e.detail)
    block = parser.parse_many(rows)
    got = dict(zip(block.index, block.rows()))
    got.update({i: (e.reason, e.detail) for i, e in block.errors})
    assert got == want
    data = "".join(",".join(f'"{f}"' for f in r) + "\n" for r in rows).encode()
    fast = fast_csv.parse_block(parser, data)
    assert fast is not None and len(fast.index) == sum(isinstance(v, tuple) and
                                                       len(v) == len(HEADER) for v in want.values())
    fares = np.asarray(fast.columns[AT])
    assert fares.tolist() == [want[int(i)][AT] for i in fast.index.tolist()]
    duration = schema is TIMED
    texts = [r[AT].strip() for r in rows]
    seconds, ok = columns.clock_seconds(pa.array(texts), duration)
    assert ok.tolist() == [clock_seconds(t, duration) is not None for t in texts]
    assert [v for v, k in zip(seconds.tolist(), ok) if k] == \
        [clock_seconds(t, duration) for t, k in zip(texts, ok) if k]


@pytest.mark.parametrize("column, message", [
    ({"name": "t", "type": "int", "clock": True}, "clock True must be false, or true"),
    ({"name": "t", "type": "string", "clock": True}, "for a float column"),
    ({"name": "t", "type": "float", "clock": True, "decimal": ","}, "written with decimal points"),
    ({"name": "t", "type": "float", "clock": "yes"}, "clock 'yes' must be"),
    ({"name": "t", "type": "float", "clock": "Duration"}, "or 'duration' for a float"),
    ({"name": "t", "type": "int", "clock": "duration"}, "clock 'duration' must be"),
    ({"name": "t", "type": "float", "clock": True, "default": "9:75"}, "default .9:75."),
    ({"name": "t", "type": "float", "clock": True, "default": "1:02.35"}, "H:MM.:SS. .am/pm"),
    ({"name": "t", "type": "float", "clock": "duration", "default": "5:00 pm"}, "M:SS"),
])
def test_a_spec_declares_a_clock_on_a_float_column_with_a_clock_default(column, message):
    with pytest.raises(SchemaError, match=message):
        Schema.from_dict({"label": "y", "columns": [column, {"name": "y", "type": "float"}]})
    good = Schema.from_dict({"label": "y", "columns": [
        {"name": "t", "type": "float", "clock": True, "default": "0:30", "transform": "zscore"},
        {"name": "y", "type": "float"}]})
    assert good.column("t").typed_default() == 1800.0
    assert Schema.loads(good.dumps(), "x.json") == good
    timed = Schema.from_dict({"label": "y", "columns": [
        {"name": "t", "type": "float", "clock": "duration", "default": "1:02.35"},
        {"name": "y", "type": "float"}]})
    assert timed.column("t").typed_default() == 62.35
    assert Schema.loads(timed.dumps(), "x.json") == timed
    assert "clock" not in good.to_dict()["columns"][1]  # a schema of before reads the same


def _infer(names, rows, label="y"):
    return infer_from_profile(profile_rows(names, rows), label)


def test_times_of_day_and_durations_are_inferred_as_seconds_features_and_labels():
    rng = random.Random(5)
    rows = []
    for i in range(600):
        day = f"{rng.randrange(6, 20)}:{rng.randrange(60):02d}"
        half = f"{rng.randrange(1, 13)}:{rng.choice(['00', '30'])} {rng.choice(['a.m.', 'p.m.'])}"
        race = f"{rng.randrange(2, 5)}:{rng.randrange(60):02d}:{rng.randrange(60):02d}"
        rows.append([day if i % 50 else "", half, race if i % 97 else "NA", str(i % 3)])
    names = ["captured", "slot", "race", "y"]
    schema, decisions = _infer(names, rows)
    for name in ("captured", "slot"):
        c = schema.column(name)
        assert (c.type, c.clock, c.transform) == ("float", True, "numeric"), decisions[name].why
    assert "clock times (H:MM) read as seconds" in decisions["captured"].why
    assert schema.column("captured").default == "mean"
    parser = RowParser(schema, names)
    assert parser.parse(rows[1])[:2] == (_seconds(rows[1][0]), _seconds(rows[1][1]))
    assert np.isnan(parser.parse(rows[0])[0])  # missing: the train mean, later
    # A race's time as the label: a regression on seconds, its NA rows rejected.
    schema, decisions = _infer(names, rows, label="race")
    race = schema.column("race")
    assert (schema.task, race.type, race.clock) == ("regression", "float", True)
    with pytest.raises(Reject, match="missing_value"):
        RowParser(schema, names).parse(rows[0])


def test_a_stray_text_among_clock_times_is_missing_and_mixed_or_other_texts_stay_text():
    """`9.12` among capture times (Stat2Data's Hawks) reads as missing, as a number column's
    stray texts do; `13:12` beside `1:02:03` (minutes or hours?), scores, datetimes, numbers
    with a colon now and then, and a few times (slots) are no clocks."""
    rows = []
    for i in range(1000):
        rows.append([f"{8 + i % 9}:{i % 60:02d}" if i != 500 else "9.12",
                     f"{i % 24}:{i % 60:02d}" if i % 2 else f"1:{i % 60:02d}:{i % 59:02d}",
                     f"{i % 7}:{i % 5}", f"2025-01-{1 + i % 28:02d} 10:{i % 60:02d}:00",
                     str(i % 40) if i % 300 else "10:30", ["5:00 a.m.", "8:00 a.m.", "12:00 p.m."][i % 3],
                     str(i % 2)])
    names = ["capture", "mixed", "score", "when", "count", "slot", "y"]
    schema, decisions = _infer(names, rows)
    capture = schema.column("capture")
    assert capture.clock and "9.12" in capture.missing
    assert "1 text value(s) ['9.12'] no clock time" in decisions["capture"].why
    assert np.isnan(RowParser(schema, names).parse(rows[500])[0])
    assert [schema.column(n).clock for n in names[1:]] == [False] * 6
    assert schema.column("slot").transform == "vocabulary"  # 3 times: slots (clock_stats.CLOCK_SLOTS)
    assert schema.column("when").transform == "datetime"
    count = schema.column("count")  # numbers with a stray time: those read as missing
    assert (count.type, "10:30" in count.missing) == ("float", True)


def test_durations_are_inferred_where_two_parts_can_only_be_minutes_and_seconds():
    """A race's times, M:SS under an hour (its minutes past 23) beside H:MM:SS, and a
    swimmer's M:SS.ff are durations; `58:12` alone stays a clock (H:MM: one reading, the
    same order either way), and a fraction beside am/pm is no clock."""
    rng = random.Random(11)
    rows = []
    for i in range(800):
        race = rng.randrange(1200, 9000)
        swim = rng.randrange(2500, 13000) / 100
        rows.append([_race(race) if i % 150 else "DNF", _swim(swim), f"{rng.randrange(24, 60)}:"
                     f"{rng.randrange(60):02d}", _swim(swim) if i % 2 else "5:00 p.m.",
                     str(race * 0.1 + swim)])
    names = ["race", "swim", "laps", "odd", "y"]
    schema, decisions = _infer(names, rows)
    assert [schema.column(n).clock for n in names[:4]] == ["duration", "duration", True, False]
    assert "durations (M:SS under an hour, H:MM:SS past it) read as seconds" in \
        decisions["race"].why and "DNF" in schema.column("race").missing
    parser = RowParser(schema, names)
    for row in rows[1:6]:
        assert parser.parse(row)[:2] == (_duration(row[0]), _duration(row[1])), row
    assert np.isnan(parser.parse(rows[0])[0])  # DNF: missing


def _race(seconds: int) -> str:
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds < 3600 else \
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _swim(seconds: float) -> str:
    return f"{int(seconds // 60)}:{seconds % 60:05.2f}"


def test_a_clock_column_met_after_empty_blocks_is_read_over_every_row():
    """Empty values for 70,000 rows (a statistics pass), then clock times in the next file:
    the seconds' statistics cover every row."""
    head = ("t,y\n" + "".join(f",{i % 2}\n" for i in range(70_000))).encode()
    tail = ("t,y\n" + "".join(f"{i % 24}:{i % 60:02d},{i % 2}\n" for i in range(300))).encode()
    prof = profile_csv([("a.csv", lambda: io.BytesIO(head)), ("b.csv", lambda: io.BytesIO(tail))])
    view, strays = prof.columns["t"].clock_numbers()
    assert view is not None and strays == () and view.rows == 70_300 and view.present == 300
