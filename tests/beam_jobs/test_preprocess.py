"""The preprocess job on small data: outputs vs the transform, reconciliation, determinism."""
import csv
import glob
import gzip
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from beam_jobs import preprocess
from preprocessing import TAXI_SPEC
from tests.helpers import ROOT, read_examples, read_jsonl
from tools.datagen import DIRTY_KINDS


def _tft(out):
    import tensorflow_transform as tft
    return tft.TFTransformOutput(out)


def test_outputs_match_the_transform(preprocessed):
    out, summary = preprocessed
    tft_out = _tft(out)
    train = read_examples(os.path.join(out, "train", "*.tfrecord.gz"),
                          tft_out.transformed_feature_spec())
    assert len(train["key"]) == summary["splits"]["train"]
    for col in ("pickup_longitude", "dropoff_latitude", "trip_km", "passenger_count"):
        v = np.array(train[col])
        assert abs(v.mean()) < 1e-3 and abs(v.std() - 1) < 1e-3, col
    # The vocabulary file lists the train split's payment types, most frequent first.
    vocab = [w.decode() if isinstance(w, bytes) else w
             for w in tft_out.vocabulary_by_name("payment_type")]
    assert vocab[0] == "Credit Card" and set(vocab) == {"Credit Card", "Cash", "Mobile",
                                                         "No Charge", "Dispute"}
    assert set(train["payment_type"]) <= set(range(len(vocab) + 1))
    assert set(train["pickup_datetime_weekday"]) == set(range(7))
    shards = sorted(glob.glob(os.path.join(out, "train", "*.tfrecord.gz")))
    assert len(shards) == 2  # --num_shards 2, and even: multi-worker training shards by file
    sizes = [len(read_examples(f, {"key": tft_out.transformed_feature_spec()["key"]})["key"])
             for f in shards]
    assert abs(sizes[0] - sizes[1]) <= 1 and sum(sizes) == summary["splits"]["train"]
    raw = json.load(open(os.path.join(out, "raw_schema.json")))
    assert raw["label"] == "fare_amount" and raw["key"] == "key"


def test_counts_reconcile_exactly_with_known_bad_rows(taxi_csv, preprocessed):
    path, stats = taxi_csv
    out, summary = preprocessed
    assert summary["rows_read"] == stats.rows
    assert summary["reconciled"]
    assert sum(summary["splits"].values()) == stats.clean_rows
    expected = {}
    for kind, n in stats.dirty_by_kind.items():
        expected[DIRTY_KINDS[kind]] = expected.get(DIRTY_KINDS[kind], 0) + n
    assert summary["rejected"]["by_reason"] == {k: v for k, v in expected.items() if v}
    on_disk = json.load(open(os.path.join(out, "summary.json")))
    assert on_disk["rows_read"] == stats.rows and on_disk["reconciled"] is True
    # Each dead letter carries its source, exact line, raw text and reason.
    rejects = read_jsonl(os.path.join(out, "rejects", "*.jsonl"))
    assert len(rejects) == summary["rejected"]["total"]
    lines = open(path).read().split("\n")
    for r in rejects:
        assert r["source"].endswith("taxi.csv") and r["reason"] in expected and r["detail"]
        assert lines[r["line"] - 1] == r["raw"]


def _keys_by_split(out):
    import tensorflow as tf
    spec = {"key": tf.io.FixedLenFeature([], tf.string)}
    return {s: sorted(read_examples(os.path.join(out, s, "*.tfrecord.gz"), spec)["key"])
            for s in ("train", "eval", "test")}


@pytest.mark.slow
def test_split_is_identical_across_runs_and_worker_counts(preprocessed,
                                                         preprocessed_by_two_workers):
    out, _ = preprocessed  # one run of one worker
    multi = preprocessed_by_two_workers  # another run, of two worker processes
    first = _keys_by_split(out)
    assert first == _keys_by_split(multi)
    assert all(first[s] for s in first)


@pytest.mark.slow
def test_inferred_schema_gz_input_and_quoted_multiline_fields(tmp_path):
    src = tmp_path / "in.csv.gz"
    rows = ['id,city,temp,label', '1,"Paris, FR",10.5,hot', '2,"New\nYork",-1.0,cold',
            '3,Rome,"bad",hot', '4,Oslo,2.0']
    rows += [f'{i},Lima,{i / 10},{"hot" if i % 2 else "cold"}' for i in range(5, 60)]
    with gzip.open(src, "wt") as f:
        f.write("\n".join(rows) + "\n")
    out = str(tmp_path / "out")
    s = preprocess.run(["--input", str(src), "--output", out, "--label_column", "label",
                        "--split", "0.5,0.5"])
    assert s["task"] == "classification" and s["key"] == "id"
    assert s["rows_read"] == 4 + 55 and s["reconciled"]
    # 'bad' in the temp column (1 of 58 values, a measure of 57 numbers) is a missing value
    # there, not a reason to reject its row: only the short row is rejected.
    assert s["rejected"]["by_reason"] == {"wrong_column_count": 1}
    temp = {r["column"]: r for r in s["inferred_columns"]}["temp"]
    assert temp["type"] == "float" and "['bad'], read as missing" in temp["why"]
    rej = {r["line"]: r for r in read_jsonl(os.path.join(out, "rejects", "*.jsonl"))}
    assert set(rej) == {6}  # line 3 starts the two-line record; line numbers stay exact
    import tensorflow as tf
    got = read_examples(os.path.join(out, "*", "*.tfrecord.gz"),
                        {"id": tf.io.FixedLenFeature([], tf.string)})
    assert b"2" in got["id"] and b"1" in got["id"]


@pytest.mark.slow
def test_module_file_preprocessing_fn(taxi_csv, tmp_path):
    module = tmp_path / "my_module.py"
    module.write_text(
        "import tensorflow as tf\nimport tensorflow_transform as tft\n"
        "def preprocessing_fn(inputs):\n"
        "    return {'dist': tft.scale_to_0_1(inputs['pickup_latitude'] - inputs['dropoff_latitude']),\n"
        "            'fare_amount': inputs['fare_amount']}\n")
    out = str(tmp_path / "out")
    s = preprocess.run(["--input", taxi_csv[0], "--output", out, "--schema_spec", TAXI_SPEC,
                        "--module_file", str(module)])
    spec = _tft(out).transformed_feature_spec()
    assert set(spec) == {"dist", "fare_amount"}
    d = np.array(read_examples(os.path.join(out, "train", "*"), spec)["dist"])
    assert d.min() == pytest.approx(0.0) and d.max() == pytest.approx(1.0)
    assert s["reconciled"]


@pytest.mark.parametrize("args, message", [
    (["--input", "/nonexistent/*.csv", "--output", "{tmp}/o", "--schema_spec", TAXI_SPEC],
     "no files match --input"),
    (["--input", "{csv}", "--output", "{tmp}/o", "--label_column", "tip"],
     "label column 'tip' is not in the header"),
    (["--input", "{csv}", "--output", "{tmp}/o", "--label_column", "Fare_Amount"],
     "(the header has 'fare_amount' for 'Fare_Amount': names must match exactly)"),
    (["--input", "{csv}", "--output", "/proc/forbidden/out", "--schema_spec", TAXI_SPEC],
     "is not writable"),
    (["--input", "{csv}", "--output", "{tmp}/o"], "give --schema_spec, or --label_column"),
    (["--input", "{csv}", "--output", "{tmp}/o", "--schema_spec", TAXI_SPEC, "--split", "0.7,0.7"],
     "--split needs"),
    (["--output", "{tmp}/o", "--schema_spec", TAXI_SPEC], "--input is required"),
    (["--input", "{csv}", "--output", "{tmp}/o", "--schema_spec", "{tmp}/missing.yaml"],
     "cannot read spec file"),
    (["--input", "{csv}", "--output", "{tmp}/o", "--schema_spec", TAXI_SPEC, "--task",
      "classification"], "--task classification differs from the spec's task regression"),
    (["--input", "{csv}", "--output", "{tmp}/o", "--label_column", "payment_type", "--task",
      "regression"], "--task regression: label 'payment_type' has no numeric value"),
])
def test_bad_arguments_fail_fast_with_one_line(taxi_csv, tmp_path, args, message):
    args = [a.format(tmp=tmp_path, csv=taxi_csv[0]) for a in args]
    with pytest.raises(SystemExit) as e:
        preprocess.run(args)
    text = str(e.value.code)
    assert message in text and text.startswith("preprocess: error:") and "\n" not in text
    assert not os.path.exists(tmp_path / "o" / "summary.json")


def test_a_file_of_another_delimiter_is_named_in_the_one_line_error(tmp_path):
    src = tmp_path / "eu.csv"
    src.write_text("price;" + "x" * 5000 + ";label\n1,5;a;2\n")  # a long header line
    with pytest.raises(SystemExit) as e:
        preprocess.run(["--input", str(src), "--output", str(tmp_path / "o"),
                        "--label_column", "label"])
    text = str(e.value.code)
    assert "is the file ';'-delimited? add --delimiter ';'" in text and len(text) < 300


def test_the_delimiter_the_error_advises_reads_every_row(tmp_path):
    """--delimiter reaches the pipeline's header too, not inference alone: a ';' file's rows
    all reach the splits (they were once all rejected, the header split at commas)."""
    src = tmp_path / "eu.csv"
    src.write_text("town;size;label\n" + "".join(f"t{i % 4};{i};{i % 3}\n" for i in range(60)))
    out = tmp_path / "o"
    preprocess.run(["--input", str(src), "--output", str(out), "--label_column", "label",
                    "--delimiter", ";"])
    summary = json.load(open(out / "summary.json"))
    assert summary["rejected"]["total"] == 0 and summary["rows_read"] == 60
    assert sum(summary["splits"].values()) == 60
    assert [c["column"] for c in summary["inferred_columns"]] == ["town", "size", "label"]


def test_a_decimal_comma_file_gives_the_records_of_its_decimal_point_twin(tmp_path):
    """A European spreadsheet's file (';' between fields, 39,1 for numbers) is read as the
    same table written with points: the same schema but for the mark, the same records."""
    rows = [(f"t{i % 4}", f"{i / 7:.3f}", f"{(i % 9) * 1.25 - 3:.2f}") for i in range(80)]
    outs = {}
    for mark, name in ((",", "comma"), (".", "point")):
        src = tmp_path / f"rows_{name}.csv"
        src.write_text("town;width;label\n" + "".join(
            f"{t};{w.replace('.', mark)};{y.replace('.', mark)}\n" for t, w, y in rows))
        outs[mark] = tmp_path / f"o_{name}"
        preprocess.run(["--input", str(src), "--output", str(outs[mark]), "--label_column",
                        "label", "--delimiter", ";", "--split", "1,0"])
    schemas = {m: json.load(open(o / "raw_schema.json")) for m, o in outs.items()}
    decimal = {c["name"]: c.get("decimal", ".") for c in schemas[","]["columns"]}
    assert decimal == {"town": ".", "width": ",", "label": ","}
    for c in schemas[","]["columns"]:
        c.pop("decimal", None)
    assert schemas[","] == schemas["."]
    records = {m: sorted(_features(r.numpy()) for r in tf.data.TFRecordDataset(
        sorted(glob.glob(str(o / "train" / "*"))), compression_type="GZIP"))
        for m, o in outs.items()}
    assert len(records[","]) == 80 and records[","] == records["."]



def test_a_month_first_date_file_gives_the_records_of_its_iso_twin(tmp_path):
    """A US spreadsheet's dates (`1/3/2011`, some with a missing value), and Excel's
    `3-Jan-11`, are read as the same dates written YYYY-MM-DD: the same schema but for the
    order, the same records."""
    import datetime
    days = [datetime.date(2010, 11, 20) + datetime.timedelta(days=3 * i) for i in range(90)]
    schemas, records = _twin_columns(tmp_path, _dated(days, {
        "us": lambda d: f"{d.month}/{d.day}/{d.year % 100:02d}",
        "excel": lambda d: f"{d.day}-{d.strftime('%b')}-{d.year % 100:02d}",
        "iso": lambda d: d.isoformat()}))
    us, excel, iso = (schemas[n]["when"] for n in ("us", "excel", "iso"))
    assert (us["transform"], us["date_order"], us["default"]) == ("datetime", "mdy", "1/1/1970")
    assert (excel["date_order"], excel["default"]) == ("dmy", "1/1/1970")  # 6-Aug-09
    assert iso["default"] == "1970-01-01" and "date_order" not in iso
    for col in (us, excel):
        col.pop("date_order")
        col["default"] = iso["default"]
    assert schemas["us"] == schemas["excel"] == schemas["iso"]
    assert len(records) == 90 and all(r["us"] == r["excel"] == r["iso"] for r in records)


def _dated(dates, formats) -> dict:
    """{"<format>_when": `dates` written by each of `formats` ({name: date -> text}), every
    17th missing}, for _twin_columns."""
    return {f"{name}_when": ["" if i % 17 == 3 else fmt(d) for i, d in enumerate(dates)]
            for name, fmt in formats.items()}


def _twin_columns(tmp_path, columns: dict) -> tuple:
    """One preprocess run (inference, every row in train) of a table of `columns`
    ({"<twin>_<column>": texts}), `x` and `label`: ({twin: {column: its raw_schema.json entry
    without its name}}, [{twin: a train record's features of its columns, named without the
    twin}]). Inference reads each column alone, so each twin is read as its own file would
    be, in one run."""
    names = list(columns)
    rows = len(columns[names[0]])
    src, out = tmp_path / "twins.csv", tmp_path / "o"
    with open(src, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(names + ["x", "label"])
        w.writerows([columns[n][i] for n in names] + [i % 5, (i * 7) % 3] for i in range(rows))
    preprocess.run(["--input", str(src), "--output", str(out), "--label_column", "label",
                    "--split", "1,0"])
    twins = {n.split("_", 1)[0]: {} for n in names}
    for c in json.load(open(out / "raw_schema.json"))["columns"]:
        twin, _, column = c.pop("name").partition("_")
        if twin in twins:
            twins[twin][column] = c
    records = [{t: sorted((k[len(t) + 1:], v) for k, v in _features(r.numpy())
                          if k.startswith(t + "_")) for t in twins}
               for r in tf.data.TFRecordDataset(sorted(glob.glob(str(out / "train" / "*"))),
                                                compression_type="GZIP")]
    assert all(r[t] for r in records for t in twins)  # every twin's features are there
    return twins, records


def test_months_written_three_ways_give_the_same_records(tmp_path):
    """A quarterly series written `1998-01`, `Jan-98` and `1998 Q1` (some missing) is read as
    the same months: the same schema, the same records (the other forms: the parser and
    graph tests)."""
    import calendar
    months = [(1990 + i // 4, i % 4 * 3 + 1) for i in range(90)]
    schemas, records = _twin_columns(tmp_path, _dated(months, {
        "iso": lambda ym: f"{ym[0]}-{ym[1]:02d}",
        "excel": lambda ym: f"{calendar.month_abbr[ym[1]]}-{ym[0] % 100:02d}",
        "quarter": lambda ym: f"{ym[0]} Q{(ym[1] + 2) // 3}"}))
    col = schemas["iso"]["when"]
    assert (col["transform"], col["date_order"], col["default"], col["parts"]) == \
        ("datetime", "ym", "1970-01", ["month", "days"])
    assert schemas["iso"] == schemas["excel"] == schemas["quarter"]
    assert len(records) == 90 and all(r["iso"] == r["excel"] == r["quarter"] for r in records)
    assert len({dict(r["iso"])["when_days"] for r in records}) == 85  # a value per quarter,
    # and the missing months' default


def test_a_clock_file_gives_the_records_of_its_seconds_twin(tmp_path):
    """Times written as a clock (`7:05 p.m.`, some missing) and a race's times as durations
    (`48:05` under an hour, `1:31:38` past it) are read as the same table written in
    seconds: the same schema but for `clock`, the same records."""
    rows = [(i * 137 % 43200 // 60 * 60, 1500 + i * 53 % 4000) for i in range(90)]

    def half_day(s):
        h, m = divmod(s // 60, 60)
        return f"{(h - 1) % 12 + 1}:{m:02d} {'p.m.' if h >= 12 else 'a.m.'}"

    def race_time(s):
        return f"{s // 60}:{s % 60:02d}" if s < 3600 else \
            f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"

    columns = {}
    for name, day, race in (("clock", half_day, race_time), ("seconds", str, str)):
        columns[f"{name}_slot"] = ["" if i % 17 == 3 else day(d) for i, (d, _) in enumerate(rows)]
        columns[f"{name}_race"] = [race(r) for _, r in rows]
    schemas, records = _twin_columns(tmp_path, columns)
    clock, seconds = schemas["clock"], schemas["seconds"]
    assert [clock[c].pop("clock", False) for c in ("slot", "race")] == [True, "duration"]
    assert [clock[c].pop("type") for c in ("slot", "race")] == ["float", "float"]
    # whole seconds in every row are integers there (a clock column is always a float)
    assert [seconds[c].pop("type") for c in ("slot", "race")] == ["float", "int"]
    assert clock == seconds
    assert len(records) == 90 and all(r["clock"] == r["seconds"] for r in records)


def _features(record: bytes) -> tuple:
    """A tf.Example's features, sorted (a map's serialized order is not fixed)."""
    example = tf.train.Example.FromString(record)
    return tuple(sorted((k, tuple(v.float_list.value) + tuple(v.int64_list.value)
                         + tuple(v.bytes_list.value))
                        for k, v in example.features.feature.items()))


def test_a_utf16_file_fails_at_launch_saying_so(tmp_path):
    src = tmp_path / "unicode.csv"
    src.write_bytes("a,label\n1,x\n2,y\n".encode("utf-16"))
    with pytest.raises(SystemExit) as e:
        preprocess.run(["--input", str(src), "--output", str(tmp_path / "o"),
                        "--label_column", "label"])
    text = str(e.value.code)
    assert "is not UTF-8 text" in text and "UTF-16" in text and "\n" not in text


def test_a_header_past_max_columns_is_refused_before_it_is_profiled(tmp_path):
    """A header of 2,500 columns (a wide table, or a hostile line of commas): the transform's
    graph and the launch's memory grow with the columns, so inferring over them is refused at
    launch, in one line naming the bound and the ways past it."""
    src = tmp_path / "wide.csv"
    names = [f"c{i}" for i in range(2500)]
    src.write_text(",".join(names) + "\n" + ",".join("1" for _ in names) + "\n")
    with pytest.raises(SystemExit) as e:
        preprocess.run(["--input", str(src), "--output", str(tmp_path / "o"),
                        "--label_column", "c0"])
    text = str(e.value.code)
    assert text.startswith("preprocess: error:") and "\n" not in text
    assert "has 2,500 columns, over --max_columns 2,000" in text and "--schema_spec" in text
    with pytest.raises(SystemExit, match="--max_columns must be >= 2"):
        preprocess.run(["--input", str(src), "--output", str(tmp_path / "o"),
                        "--label_column", "c0", "--max_columns", "1"])
    assert not os.path.exists(tmp_path / "o")


@pytest.mark.slow
def test_command_line_help_and_exit_status(tmp_path):
    import subprocess
    import sys
    root = ROOT
    r = subprocess.run([sys.executable, "-m", "beam_jobs.preprocess", "--input", "/nope/*.csv",
                        "--output", str(tmp_path), "--label_column", "x"],
                       cwd=root, capture_output=True, text=True)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1] == "preprocess: error: no files match --input /nope/*.csv"
    h = subprocess.run([sys.executable, "-m", "beam_jobs.preprocess", "--help"], cwd=root,
                       capture_output=True, text=True)
    assert h.returncode == 0 and "--schema_spec" in h.stdout and "--label_column" in h.stdout

