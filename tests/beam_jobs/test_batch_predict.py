"""batch_predict: each input format, keys, dead letters, train/serve consistency, versions,
run-date re-runs, atomic publishing, and the model handler's row-by-row fallback."""
import csv
import glob
import json
import os
import shutil

import pytest
import tensorflow as tf

from beam_jobs import batch_predict
from preprocessing.contract.split import boundaries, split_index
from tests.helpers import ROOT, library_lines, read_jsonl
from tests.helpers import make_example as _example


def _run(model_dir, inp, out, *extra):
    return batch_predict.run(["--model_dir", model_dir, "--input", inp, "--output", out,
                              "--min_batch_size", "8", "--max_batch_size", "64", *extra])


def _csv_keys(path):
    with open(path, newline="") as f:
        return [r[0] for r in csv.reader(f)][1:]


@pytest.mark.slow
def test_csv_input_keys_and_reconciled_dead_letters(trained, taxi_csv, tmp_path):
    _, job_dir, m = trained
    path, stats = taxi_csv
    out = str(tmp_path / "out")
    s = _run(os.path.join(job_dir, "export"), path, out, "--run_date", "2026-01-05")
    # Missing labels are fine for prediction; every other kind of dirty row is rejected.
    expected_rejects = {"unparsable_number": stats.dirty_by_kind["unparsable_number"],
                        "wrong_column_count": stats.dirty_by_kind["wrong_column_count"],
                        "unparsable_datetime": stats.dirty_by_kind["bad_datetime"]}
    assert s["rejected"]["by_reason"] == {k: v for k, v in expected_rejects.items() if v}
    assert s["rows_read"] == stats.rows and s["reconciled"]
    assert s["rows_predicted"] == stats.clean_rows + stats.dirty_by_kind["missing_label"]
    preds = read_jsonl(os.path.join(out, "predictions-*.jsonl"))
    assert len(preds) == s["rows_predicted"]
    assert len({p["key"] for p in preds}) == len(preds)
    assert {p["key"] for p in preds} <= set(_csv_keys(path))
    assert all(p["model_version"] == os.path.basename(m["export_dir"]) for p in preds)
    rejects = read_jsonl(os.path.join(out, "rejects", "*.jsonl"))
    assert len(rejects) == s["rejected"]["total"]
    lines = open(path).read().split("\n")
    assert all(lines[r["line"] - 1] == r["raw"] for r in rejects)
    assert os.path.exists(os.path.join(out, "_SUCCESS"))
    assert not glob.glob(os.path.join(out, "_staging-*"))


@pytest.mark.slow
def test_eval_split_reproduces_the_trainers_metric(trained, taxi_csv, tmp_path):
    data_dir, job_dir, m = trained
    summary = json.load(open(os.path.join(data_dir, "summary.json")))
    bounds = boundaries(summary["split_fractions"])
    src = taxi_csv[0]
    eval_csv = tmp_path / "eval.csv"
    with open(src, newline="") as f, open(eval_csv, "w", newline="") as g:
        reader, writer = csv.reader(f), csv.writer(g)
        writer.writerow(next(reader))
        for row in reader:
            if split_index(row[0], bounds) == 1:  # the preprocess job's eval split
                writer.writerow(row)
    out = str(tmp_path / "out")
    s = _run(m["export_dir"], str(eval_csv), out, "--evaluate_label", "fare_amount",
             "--output_format", "both")
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    assert metrics["examples"] == m["eval"]["examples"]
    assert metrics["rmse"] == pytest.approx(m["eval"]["rmse"], rel=1e-5)
    assert metrics["mae"] == pytest.approx(m["eval"]["mae"], rel=1e-5)
    assert s["metrics"] == metrics
    with open(glob.glob(os.path.join(out, "predictions-*.csv"))[0]) as f:
        header = f.readline().strip().split(",")
    assert header == ["key", "prediction", "model_version", "label"]


@pytest.mark.slow
def test_tfrecord_of_raw_examples(trained, tmp_path):
    _, _, m = trained
    good = {"key": "t1", "pickup_datetime": "2025-06-02 08:15:00", "pickup_longitude": -73.95,
            "pickup_latitude": 40.75, "dropoff_longitude": -73.9, "dropoff_latitude": 40.8,
            "passenger_count": 2, "payment_type": "Cash", "company": "Sun Taxi"}
    no_pass = dict(good, key="t2")
    del no_pass["passenger_count"]  # optional: the spec's default (1) applies
    missing = dict(good, key="t3")
    del missing["pickup_latitude"]
    path = str(tmp_path / "in.tfrecord.gz")
    with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type="GZIP")) as w:
        for rec in (_example(good), _example(no_pass), _example(missing), b"garbage bytes"):
            w.write(rec)
    out = str(tmp_path / "out")
    s = _run(m["export_dir"], path, out)
    preds = {p["key"]: p for p in read_jsonl(os.path.join(out, "predictions-*.jsonl"))}
    assert set(preds) == {"t1", "t2"}
    assert s["rejected"]["by_reason"] == {"missing_value": 1, "bad_example": 1}
    assert s["rows_read"] == 4 and s["reconciled"]
    # Same raw values through the job and through the serving signature directly.
    sig = tf.saved_model.load(m["export_dir"]).signatures["serving_default"]
    direct = sig(examples=tf.constant([_example(good)]))["predictions"].numpy()[0]
    assert preds["t1"]["prediction"] == pytest.approx(float(direct), abs=1e-5)


@pytest.mark.slow
def test_newest_version_is_used(trained, taxi_csv, tmp_path):
    _, _, m = trained
    base = tmp_path / "models"
    for v in ("100", "200"):
        shutil.copytree(m["export_dir"], base / v)
    (base / "300").mkdir()  # an incomplete export: no saved_model.pb
    (base / "latest").mkdir()
    out = str(tmp_path / "out")
    s = _run(str(base), taxi_csv[0], out)
    assert s["model_version"] == "200" and s["model_path"].endswith("/200")
    assert {p["model_version"] for p in read_jsonl(os.path.join(out, "predictions-*"))} == {"200"}


@pytest.mark.slow
def test_run_date_rerun_replaces_and_failed_run_keeps_the_last_good_output(trained, tmp_path):
    _, _, m = trained
    src = tmp_path / "in" / "2026-03-04"
    src.mkdir(parents=True)
    good = ('key,pickup_datetime,pickup_longitude,pickup_latitude,dropoff_longitude,'
            'dropoff_latitude,passenger_count,payment_type,company\n')
    rows = [f"k{i},2025-06-02 08:15:00,-73.95,40.75,-73.9,40.8,1,Cash,Sun Taxi" for i in range(30)]
    (src / "a.csv").write_text(good + "\n".join(rows) + "\n")
    args = ["--run_date", "2026-03-04", "--min_batch_size", "2", "--max_batch_size", "4"]
    out_t = str(tmp_path / "out" / "{date}")
    inp_t = str(tmp_path / "in" / "{date}" / "*.csv")
    _run(m["export_dir"], inp_t, out_t, *args)
    out = tmp_path / "out" / "2026-03-04"
    first = read_jsonl(str(out / "predictions-*.jsonl"))
    assert len(first) == 30
    (src / "a.csv").write_text(good + "\n".join(rows[:10]) + "\n")
    s = _run(m["export_dir"], inp_t, out_t, *args)
    assert len(read_jsonl(str(out / "predictions-*.jsonl"))) == 10 == s["rows_predicted"]
    # A run that fails (a corrupt model) leaves the last good output in place, complete.
    bad = tmp_path / "bad"
    shutil.copytree(m["export_dir"], bad / "999")
    for f in glob.glob(str(bad / "999" / "variables" / "variables.data*")):
        open(f, "wb").close()
    # (The model fails to load on the workers: the pipeline fails in RunInference.)
    with pytest.raises(Exception, match="RunInference"):
        _run(str(bad), inp_t, out_t, *args)
    assert len(read_jsonl(str(out / "predictions-*.jsonl"))) == 10
    assert json.load(open(out / "summary.json"))["rows_predicted"] == 10
    assert (out / "_SUCCESS").exists()


def test_handler_isolates_a_row_the_model_rejects(trained):
    from inference.model.model_handler import SavedModelHandler
    from preprocessing.accounting.rejects import Reject
    _, _, m = trained
    handler = SavedModelHandler(m["export_dir"])
    model = handler.load_model()
    good = {"pickup_datetime": "2025-06-02 08:15:00", "pickup_longitude": -73.95,
            "pickup_latitude": 40.75, "dropoff_longitude": -73.9, "dropoff_latitude": 40.8,
            "passenger_count": 1, "payment_type": "Cash", "company": "Sun Taxi"}
    bad = dict(good, pickup_datetime=None)
    results = list(handler.run_inference([good, bad, good], model))
    assert [type(r.inference).__name__ for r in results] == ["dict", "Reject", "dict"]
    assert isinstance(results[1].inference, Reject)
    assert results[1].inference.reason == "model_rejected"
    assert results[0].inference == results[2].inference


@pytest.mark.parametrize("args, message", [
    (["--model_dir", "{tmp}/none", "--input", "{csv}", "--output", "{tmp}/o"], "has no SavedModel"),
    (["--model_dir", "{model}", "--input", "{tmp}/no/*.csv", "--output", "{tmp}/o"],
     "no files match"),
    (["--model_dir", "{model}", "--input", "{csv}", "--output", "{tmp}/o", "--run_date", "03/04"],
     "--run_date must be YYYY-MM-DD"),
    (["--model_dir", "{model}", "--input", "{csv}", "--output", "{tmp}/o",
      "--evaluate_label", "tip"], "--evaluate_label tip"),
    (["--input", "{csv}", "--output", "{tmp}/o"], "--model_dir is required"),
    (["--model_dir", "{model}", "--input", "{csv}", "--output", "{tmp}/o",
      "--model_threads", "-1"], "--model_threads must be >= 0"),
])
def test_bad_arguments_fail_fast(trained, taxi_csv, tmp_path, args, message):
    args = [a.format(tmp=tmp_path, csv=taxi_csv[0], model=trained[2]["export_dir"]) for a in args]
    with pytest.raises(SystemExit) as e:
        batch_predict.run(args)
    assert message in str(e.value.code) and str(e.value.code).startswith("batch_predict: error:")


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_prediction_block_json_lines_equal_json_dumps_of_each_record(kind):
    """The column-wise JSON writer gives byte for byte what json.dumps gives per record."""
    import numpy as np

    from inference.outputs.predictions import PredictionBlock
    keys = ["a", 'quo"te', "ünï", "k4"]
    if kind == "regression":
        outputs = {"predictions": np.array([1.5, -0.1, 3e-8, 1e20], dtype=np.float32)}
    else:
        outputs = {"classes": np.array([b"cat", b"d\xc3\xb6g", b"cat", b"x"]),
                   "class_ids": np.array([0, 1, 0, 2]),
                   "probabilities": np.array([[0.7, 0.2, 0.1]] * 4, dtype=np.float32)}
    for extras in (None, [{"city": "NY"}, {}, {"city": None}, {"n": "1,2"}],
                   [{"key": "override"}] * 4):
        for labels in (None, [1.0, None, "x", 2]):
            block = PredictionBlock(keys, outputs, "17", extras, labels)
            want = "\n".join(json.dumps(r) for r in block.records())
            assert block.json_lines() == want
    nan = PredictionBlock(["a", "b"], {"predictions": np.array([np.nan, 1.0])}, "1")
    assert nan.json_lines() == '{"key": "a", "prediction": NaN, "model_version": "1"}\n' \
                               '{"key": "b", "prediction": 1.0, "model_version": "1"}'


@pytest.mark.slow
def test_command_line_multi_process_run_gives_the_same_predictions(trained, taxi_csv, tmp_path):
    """As users run it: `python -m` (the job is __main__), two worker processes, so every
    element that crosses a process boundary must pickle; results equal the in-process run."""
    import subprocess
    import sys
    _, _, m = trained
    one = str(tmp_path / "one")
    s1 = _run(m["export_dir"], taxi_csv[0], one)
    two = str(tmp_path / "two")
    root = ROOT
    r = subprocess.run([sys.executable, "-m", "beam_jobs.batch_predict", "--model_dir",
                        m["export_dir"], "--input", taxi_csv[0], "--output", two,
                        "--max_batch_size", "50", "--direct_num_workers", "2",
                        "--direct_running_mode", "multi_processing"],
                       cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert library_lines(r.stdout + r.stderr) == []  # the job and its worker processes: quiet
    s2 = json.load(open(os.path.join(two, "summary.json")))
    assert s2["reconciled"] and s2["rejected"] == s1["rejected"]
    by_key = {p["key"]: p["prediction"] for p in read_jsonl(os.path.join(one, "predictions-*"))}
    assert {p["key"]: p["prediction"] for p in read_jsonl(os.path.join(two, "predictions-*"))} \
        == pytest.approx(by_key, rel=1e-6)


def test_block_cut_is_the_last_newline_after_an_even_number_of_quotes():
    import random

    from preprocessing.files import csv_blocks
    rng = random.Random(7)
    for _ in range(3000):
        data = bytes(rng.choice(b'ab",\n\n') for _ in range(rng.randint(0, 60)))
        cuts = [i + 1 for i, c in enumerate(data) if c == 10 and data[:i].count(b'"') % 2 == 0]
        assert csv_blocks.block_cut(data) == max(cuts, default=0), data


def test_uncompressed_csv_blocks_travel_as_byte_ranges(tmp_path):
    """The reader only scans an uncompressed file: its blocks carry (path, start, end), the
    parse step reads the bytes; together they are the file after the header, and a file that
    shrank since the scan is an error, not a short block."""
    import pickle

    from apache_beam.io import fileio
    from apache_beam.io.filesystem import FileMetadata

    from preprocessing.files import reading
    body = b"".join(b'k%d,"a\nb",%d\r\n' % (i, i) for i in range(300))
    path = tmp_path / "x.csv"
    head = b'key,"two\nline header",v\n'
    path.write_bytes(head + body)
    reader = reading.ReadFileChunks("t", 100, "csv", block_bytes=500)
    out = [o for o in reader.process(fileio.ReadableFile(FileMetadata(str(path), 0)))
           if isinstance(o, tuple)]  # not the tallies (TaggedOutput)
    blocks = [b for _, _, header, b in out]
    assert out[0][2] == ("key", "two\nline header", "v")
    assert len(blocks) > 5 and all(len(pickle.dumps(b)) < 200 for b in blocks)
    assert blocks[0].start == len(head) and blocks[-1].end == len(head) + len(body)
    assert [b.start for b in blocks[1:]] == [b.end for b in blocks[:-1]]
    data = [pickle.loads(pickle.dumps(b)).data for b in blocks]
    assert b"".join(data) == body and all(d.endswith(b"\r\n") for d in data)
    assert [b.first_line for b in blocks] == [3 + body[:b.start - len(head)].count(b"\n")
                                              for b in blocks]
    path.write_bytes(body[:100])
    with pytest.raises(IOError, match="changed while it was read"):
        pickle.loads(pickle.dumps(blocks[-1])).data


@pytest.mark.slow
def test_extreme_inputs_give_strict_json_and_csv_outputs(trained, tmp_path):
    """Inputs at float32's edge: each row is a prediction or a dead letter (a non-finite
    output is a non_finite_prediction one, see test_sinks), every output file stays strict
    JSON, and a key with a line break survives the CSV output."""
    _, _, m = trained
    from tests.helpers import GOOD
    header = ["key", *GOOD, "fare_amount"]
    rows = [dict(GOOD, key=f"ok{i}", fare_amount=9.5) for i in range(3)]
    for i, col in enumerate(("pickup_longitude", "pickup_latitude", "dropoff_longitude")):
        for sign in ("", "-"):
            rows.append(dict(GOOD, key=f"huge{i}{sign}", fare_amount=9.5,
                             **{col: f"{sign}3.0e38"}))
    rows.append(dict(GOOD, key="line\nbreak", fare_amount=9.5))
    src = tmp_path / "in.csv"
    with open(src, "w", newline="") as f:
        w = csv.DictWriter(f, header)
        w.writeheader()
        w.writerows(rows)
    out = str(tmp_path / "out")
    s = _run(m["export_dir"], str(src), out, "--output_format", "both",
             "--evaluate_label", "fare_amount")
    strict = dict(parse_constant=lambda c: pytest.fail(f"{c} in a JSON output"))
    preds = [json.loads(line, **strict) for p in glob.glob(os.path.join(out, "predictions-*.jsonl"))
             for line in open(p) if line.strip()]
    for name in ("summary.json", "metrics.json"):
        json.loads(open(os.path.join(out, name)).read(), **strict)
    rejects = read_jsonl(os.path.join(out, "rejects", "*.jsonl"))
    assert s["reconciled"] and len(preds) + len(rejects) == len(rows)
    assert {r["reason"] for r in rejects} <= {"non_finite_prediction", "number_out_of_range"}
    with open(glob.glob(os.path.join(out, "predictions-*.csv"))[0], newline="") as f:
        keys = [r[0] for r in csv.reader(f)][1:]
    assert "line\nbreak" in keys and sorted(keys) == sorted(p["key"] for p in preds)


@pytest.mark.slow
def test_a_header_without_a_column_the_model_reads_is_refused_or_dead_lettered(
        trained, taxi_csv, tmp_path):
    """A database export's upper-case header (or one renamed column with a default) would
    have every row predicted from the defaults: the first CSV's header is checked at launch,
    in one line; a later file's rows are `missing_column` dead letters, reconciled."""
    export = trained[2]["export_dir"]
    with open(taxi_csv[0]) as f:
        header, *rows = f.read().splitlines()[:41]
    good, upper, renamed, titled = (tmp_path / n for n in ("a.csv", "b.csv", "c.csv", "d.csv"))
    good.write_text("\n".join([header] + rows) + "\n")
    upper.write_text("\n".join([header.upper()] + rows) + "\n")
    titled.write_text("\n".join(["Trips of the week", header] + rows) + "\n")
    renamed.write_text("\n".join([header.replace("passenger_count", "Passengers")] + rows) + "\n")
    for inp, extra, told in (
            (upper, (), "(the header has 'PICKUP_DATETIME' for 'pickup_datetime',"),
            (good, ("--passthrough_columns", "Company"), "asked for 'Company' (the header has "
                                                         "'company' for 'Company'"),
            (titled, (), "; line 2 holds it ('key,pickup_datetime,")):
        with pytest.raises(SystemExit) as e:
            _run(export, str(inp), str(tmp_path / "o"), *extra)
        text = str(e.value.code)
        assert text.startswith(f"batch_predict: error: the header of {inp} lacks column(s) ")
        assert told in text and "\n" not in text
    assert not os.path.exists(tmp_path / "o")  # refused before any pipeline
    s = _run(export, str(tmp_path / "[ac].csv"), str(tmp_path / "out"))
    assert s["rows_read"] == 80 and s["reconciled"]
    assert s["rejected"]["by_reason"].get("missing_column") == 40
    dead = [r for r in read_jsonl(str(tmp_path / "out" / "rejects" / "*.jsonl"))
            if r["reason"] == "missing_column"]
    assert len(dead) == 40 and {os.path.basename(r["source"]) for r in dead} == {"c.csv"}
    assert "lacks column(s) ['passenger_count']" in dead[0]["detail"]


@pytest.mark.slow
def test_a_run_that_rejects_every_row_keeps_the_previous_output(trained, taxi_csv, tmp_path):
    """Nothing good is replaced by nothing: a run whose every row is a dead letter fails like
    one that reads no rows (the earlier predictions and _SUCCESS stay, its summary and dead
    letters go to _FAILED_RUN/); --allow_empty_output publishes it when that is wanted."""
    export = trained[2]["export_dir"]
    out = str(tmp_path / "out")
    first = _run(export, taxi_csv[0], out)
    before = sorted(os.listdir(out))
    kept = open(glob.glob(os.path.join(out, "predictions-*.jsonl"))[0]).read()
    bad = tmp_path / "bad.csv"
    with open(taxi_csv[0]) as f:
        header = f.readline()
    bad.write_text(header + "".join(f"k{i},not-a-date,1,2,3,4,5,Cash,Sun,7\n" for i in range(40)))
    with pytest.raises(Exception, match="no rows reached rows_predicted"):
        _run(export, str(bad), out)
    assert sorted(p for p in os.listdir(out) if p != "_FAILED_RUN") == before
    assert open(glob.glob(os.path.join(out, "predictions-*.jsonl"))[0]).read() == kept
    failed = json.load(open(os.path.join(out, "_FAILED_RUN", "summary.json")))
    assert failed["rows_read"] == 40 and failed["rows_predicted"] == 0
    assert len(read_jsonl(os.path.join(out, "_FAILED_RUN", "rejects", "*.jsonl"))) == 40
    assert first["rows_predicted"] > 0
    s = _run(export, str(bad), out, "--allow_empty_output", "on")
    assert s["rows_predicted"] == 0 and s["rejected"]["total"] == 40
    assert os.path.exists(os.path.join(out, "_SUCCESS"))


@pytest.mark.slow
def test_launch_reads_the_train_labels_range_for_a_regression_evaluation(trained, taxi_csv,
                                                                         tmp_path):
    """The range EvalMetrics splits the error by (rows whose label lies outside it) comes
    from the export's train statistics, and only when a regression label is evaluated."""
    from apache_beam.options.pipeline_options import PipelineOptions
    export = trained[2]["export_dir"]
    args = ["--model_dir", export, "--input", taxi_csv[0], "--output", str(tmp_path / "o")]
    def launch(argv):
        return batch_predict.launch(batch_predict.parse_args(argv), PipelineOptions(argv))
    cfg = launch(args + ["--evaluate_label", "fare_amount"])
    with open(taxi_csv[0], newline="") as f:
        fares = [float(r["fare_amount"]) for r in csv.DictReader(f)
                 if (r.get("fare_amount") or "").replace(".", "", 1).isdigit()]
    low, high = cfg.reports.label_range
    assert min(fares) <= low < high <= max(fares)  # the train split's, within the file's
    assert "fare_amount" not in cfg.reports.train_statistics["features"]  # not a served feature
    assert launch(args).reports.label_range is None
