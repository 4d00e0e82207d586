"""Gated model swaps (inference/model/gate.py): a newer version serves only after predicting the
golden set with no error or NaN and a metric no worse than the serving version's by more
than --max_metric_regression. Real exports: the `trained` model, one trained on the same
rows with the labels shuffled, and one whose weights are NaN."""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import time

import pytest

from beam_jobs import batch_predict
from beam_jobs.shared import errors
from inference.model import gate
from inference.model.gate import Gate, GoldenSetError, Score, decide, read_golden
from preprocessing import TAXI_SPEC
from preprocessing.contract.schema import Schema
from preprocessing.reference import golden
from tests.end_to_end.test_pubsub import _publish_steadily, _start_job, _stop, topics  # noqa: F401
from tests.helpers import read_jsonl


def _version(path):
    from inference.model.serving_model import _Version
    return _Version(path)


def test_decide_tolerance_is_relative_for_rmse_and_absolute_for_accuracy():
    assert decide(Score("rmse", 1.049), Score("rmse", 1.0), 0.05) == (True, "within_tolerance")
    assert decide(Score("rmse", 1.051), Score("rmse", 1.0), 0.05) == (False, "metric_regression")
    assert decide(Score("rmse", 0.5), Score("rmse", 1.0), 0.0)[0]
    assert decide(Score("accuracy", 0.85), Score("accuracy", 0.9), 0.05)[0]
    assert decide(Score("accuracy", 0.84), Score("accuracy", 0.9), 0.05) == (
        False, "metric_regression")
    assert decide(Score("rmse", error="non_finite_prediction"), Score("rmse", 1.0), 1.0) == (
        False, "non_finite_prediction")
    # The serving version cannot score the set (e.g. a column it lacks): nothing to compare.
    assert decide(Score("rmse", 9.0), Score("rmse", error="model_error"), 0.0) == (
        True, "no_baseline")


def test_preprocess_keeps_a_golden_sample_and_training_exports_it(preprocessed, trained):
    data_dir, summary = preprocessed
    path = os.path.join(data_dir, golden.GOLDEN_DIR, golden.GOLDEN_FILE)
    export = trained[2]["export_dir"]
    with open(path, "rb") as a, open(os.path.join(export, golden.EXPORT_GOLDEN), "rb") as b:
        assert a.read() == b.read()
    from inference.model.versions import load_raw_schema
    rows = read_golden(path, load_raw_schema(export))
    assert len(rows) == min(golden.DEFAULT_ROWS, summary["splits"]["eval"])
    assert all(0 < fare < 500 for fare in rows.labels)
    assert len(set(rows.examples)) == len(rows)


def test_the_gate_refuses_shuffled_labels_and_nan_and_takes_a_better_version(
        trained, shuffled_export, nan_export):
    good, bad, nan = (_version(p) for p in (trained[2]["export_dir"], shuffled_export,
                                            nan_export))
    refused = Gate().check(bad, good)
    assert not refused.accepted
    rec = refused.record
    assert rec["event"] == "version_refused" and rec["reason"] == "metric_regression"
    assert rec["candidate_metric"] > rec["current_metric"] * 1.05, rec
    assert rec["golden_set"].startswith(good.path)  # the serving version's own golden set
    rec = Gate().check(nan, good).record
    assert (rec["event"], rec["reason"]) == ("version_refused", "non_finite_prediction")
    assert "NaN" in rec["detail"] and rec["current_metric"] is not None
    # Serving the bad one, with the real golden set: the good version is taken.
    real = os.path.join(good.path, golden.EXPORT_GOLDEN)
    taken = Gate(real).check(good, bad)
    assert taken.accepted and taken.record["candidate_metric"] < taken.record["current_metric"]


def test_a_version_that_learned_the_golden_set_is_not_compared_on_it(
        trained, shuffled_export, nan_export, taxi_csv, tmp_path):
    """An export that says it learned its golden set (training's --refit_on_eval, under
    golden_score.NOISY_ROWS rows) is not compared by the metric there: the shuffled-label
    version refused above is taken. A version whose predictions are NaN is still refused,
    and on a golden set given that no version learned the metric decides as before."""
    def learned_copy(export, name):
        shutil.copytree(export, tmp_path / name)
        (tmp_path / name / golden.EXPORT_GOLDEN_LEARNED).write_text(
            json.dumps({"learned": True, "why": "a test"}))
        return _version(str(tmp_path / name))
    current = learned_copy(trained[2]["export_dir"], "current")
    bad, nan = _version(shuffled_export), _version(nan_export)
    rec = Gate().check(bad, current).record
    assert (rec["event"], rec["reason"]) == ("version_accepted", "golden_set_learned")
    assert rec["candidate_metric"] > rec["current_metric"] * 1.05 and \
        "the metric is not compared" in rec["detail"]
    assert Gate().check(nan, current).record["reason"] == "non_finite_prediction"
    assert Gate(taxi_csv[0]).check(bad, current).record["reason"] == "metric_regression"
    # A candidate that learned its own golden set: compared on the serving version's unless
    # that set holds the same bytes (the shuffled export's labels differ).
    served = _version(trained[2]["export_dir"])
    learner = learned_copy(shuffled_export, "candidate")
    assert Gate().check(learner, served).record["reason"] == "metric_regression"
    shutil.copy(os.path.join(served.path, golden.EXPORT_GOLDEN),
                tmp_path / "candidate" / golden.EXPORT_GOLDEN)
    assert Gate().check(learner, served).record["reason"] == "golden_set_learned"


def test_golden_sets_from_csv_and_their_bounds(trained, taxi_csv, tmp_path, monkeypatch):
    schema = _version(trained[2]["export_dir"]).schema
    rows = read_golden(taxi_csv[0], schema)  # a user's CSV: rows that parse, with a label
    assert 2500 < len(rows) <= 3000 and all(isinstance(v, float) for v in rows.labels)
    with pytest.raises(GoldenSetError, match="not a TFRecord"):
        (tmp_path / "junk.tfrecord").write_bytes(b"not records at all" * 10)
        read_golden(str(tmp_path / "junk.tfrecord"), schema)
    monkeypatch.setattr(golden, "MAX_BYTES", 4096)
    with pytest.raises(GoldenSetError, match="at most 4,096 are read"):
        read_golden(taxi_csv[0], schema)
    bomb = tmp_path / "bomb.tfrecord.gz"
    bomb.write_bytes(gzip.compress(b"\0" * (1 << 20)))
    assert bomb.stat().st_size < 4096
    with pytest.raises(GoldenSetError, match="decompresses past"):
        read_golden(str(bomb), schema)


def test_a_golden_csv_of_a_decimal_comma_model_reads_its_quoted_39_1(tmp_path):
    """A golden set's CSV is comma-delimited: a model whose numbers are written 39,1 reads
    them quoted, and refuses one written with points in one line saying why."""
    taxi = Schema.load(TAXI_SPEC)
    schema = dataclasses.replace(taxi, columns=tuple(
        dataclasses.replace(c, decimal=",") if c.type == "float" else c for c in taxi.columns))
    row = ["k1", "2025-03-04 05:06:07 UTC", "-73.9", "40.7", "-73.95", "40.75", "2", "Cash",
           "Flash Cab", "12.5"]
    comma, point = tmp_path / "comma.csv", tmp_path / "point.csv"
    comma.write_text(",".join(taxi.names) + "\n" + ",".join(
        f'"{v.replace(".", ",")}"' for v in row) + "\n")
    point.write_text(",".join(taxi.names) + "\n" + ",".join(row) + "\n")
    assert read_golden(str(comma), schema).labels == (12.5,)
    with pytest.raises(GoldenSetError, match="cannot read '-73.9' as float with a decimal ','"):
        read_golden(str(point), schema)


def test_golden_set_flags_fail_at_launch_with_one_line(trained, taxi_csv, tmp_path):
    args = ["--model_dir", trained[2]["export_dir"], "--input", taxi_csv[0],
            "--output", str(tmp_path / "out")]
    with pytest.raises(errors.JobError, match="--max_metric_regression must be >= 0"):
        batch_predict.run(args + ["--max_metric_regression", "-1"])
    with pytest.raises(errors.JobError, match="cannot read the golden set"):
        batch_predict.run(args + ["--golden_set", str(tmp_path / "missing.tfrecord")])


def test_golden_labels_far_outside_training_and_missing_columns_are_named_at_launch(
        trained, taxi_csv, tmp_path):
    """One outlier label (1e9) would make every RMSE ~1e8 and let a much worse version pass
    the relative tolerance: refused at launch. A golden set without the model's columns says
    so (it was reported as having no labelled row)."""
    import csv
    args = ["--model_dir", trained[2]["export_dir"], "--input", taxi_csv[0],
            "--output", str(tmp_path / "out")]
    with open(taxi_csv[0], newline="") as f:
        rows = list(csv.DictReader(f))
    fields = list(rows[0])
    outlier = tmp_path / "outlier.csv"
    with open(outlier, "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        w.writerows(rows[:50] + [dict(rows[50], fare_amount="1e9")])
    with pytest.raises(errors.JobError, match=r"1 label\(s\) far outside what the model was "
                                           r"trained on \(e.g. 1e\+09; train labels"):
        batch_predict.run(args + ["--golden_set", str(outlier)])
    narrow = tmp_path / "narrow.csv"
    with open(narrow, "w", newline="") as f:
        w = csv.DictWriter(f, ["key", "fare_amount"], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows[:50])
    with pytest.raises(errors.JobError, match="lacks the model's column.s. pickup_datetime, "
                                           "pickup_longitude"):
        batch_predict.run(args + ["--golden_set", str(narrow)])


def test_the_gate_compares_with_the_version_that_served_not_a_refused_one(
        trained, nan_export, shuffled_export, taxi_csv, tmp_path):
    """100 good, 200 NaN (refused), 300 much worse: 300 is compared with 100, the version
    serving when 200 was refused (compared with 200 it had `no_baseline` and served)."""
    base = _base(tmp_path, (100, trained[2]["export_dir"]), (200, nan_export),
                 (300, shuffled_export))
    summary = batch_predict.run(["--model_dir", str(base), "--input", taxi_csv[0],
                                 "--output", str(tmp_path / "out")])
    rec = summary["model_gate"]
    assert summary["model_version"] == "100", rec
    assert (rec["event"], rec["reason"]) == ("version_refused", "metric_regression")
    assert (rec["candidate_version"], rec["current_version"]) == ("300", "100")
    assert rec["candidate_metric"] > rec["current_metric"] * 1.05


def _base(tmp_path, *exports):
    base = tmp_path / "models"
    for version, export in exports:
        shutil.copytree(export, base / str(version))
    return base


def test_batch_keeps_the_previous_version_when_the_newest_is_refused(
        trained, shuffled_export, taxi_csv, tmp_path):
    base = _base(tmp_path, (100, trained[2]["export_dir"]), (200, shuffled_export))
    summary = batch_predict.run(["--model_dir", str(base), "--input", taxi_csv[0],
                                 "--output", str(tmp_path / "out"), "--output_format", "jsonl"])
    gate_rec = summary["model_gate"]
    assert gate_rec["event"] == "version_refused" and gate_rec["candidate_version"] == "200"
    assert gate_rec["current_metric"] < gate_rec["candidate_metric"]
    assert summary["model_version"] == "100"
    preds = read_jsonl(str(tmp_path / "out" / "predictions-*.jsonl"))
    assert preds and {p["model_version"] for p in preds} == {"100"}
    # --model_gate off: the newest serves, unchecked.
    summary = batch_predict.run(["--model_dir", str(base), "--input", taxi_csv[0],
                                 "--output", str(tmp_path / "out2"), "--model_gate", "off"])
    assert summary["model_version"] == "200" and "model_gate" not in summary


@pytest.mark.slow
def test_streaming_refuses_a_worse_version_while_messages_flow(
        topics, trained, shuffled_export, nan_export, tmp_path):  # noqa: F811
    model = _base(tmp_path, (100, trained[2]["export_dir"]))
    proc = _start_job(topics, model, "--model_refresh_secs", "1")
    publisher = _publish_steadily(topics, "m", 600, 0.05)
    outs, events = [], []

    def wait_for(event, version, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline and proc.poll() is None:
            outs.extend(topics.pull_once("out", 100, 2))
            for m in topics.pull_once("mon", 100, 1):
                rec = json.loads(m.message.data)
                if rec["event"] in ("version_accepted", "version_refused"):
                    events.append(rec)
            if any(e["event"] == event and e["candidate_version"] == version for e in events):
                return
        raise AssertionError(f"no {event} for {version}: {events}")

    try:
        outs.extend(topics.pull("out", 20, timeout=180, proc=proc))
        shutil.copytree(shuffled_export, model / "200")
        wait_for("version_refused", "200")
        shutil.copytree(nan_export, model / "300")
        wait_for("version_refused", "300")
        shutil.copytree(trained[2]["export_dir"], model / "400")
        wait_for("version_accepted", "400")
        publisher.stop.set()
        publisher.join(timeout=60)
        outs += topics.pull("out", len(publisher.sent) - len(outs), timeout=90, proc=proc)
    finally:
        publisher.stop.set()
        err = _stop(proc)
    ids = [m.message.attributes["id"] for m in outs]
    assert sorted(ids) == sorted(publisher.sent), (len(ids), len(publisher.sent), err[-2000:])
    versions = [m.message.attributes["model_version"] for m in outs]
    assert set(versions) == {"100", "400"}, set(versions)  # 200 and 300 never served
    by_version = {e["candidate_version"]: e for e in events}
    assert by_version["200"]["reason"] == "metric_regression"
    assert by_version["200"]["candidate_metric"] > by_version["200"]["current_metric"]
    assert by_version["300"]["reason"] == "non_finite_prediction"
    assert by_version["400"]["current_version"] == "100"
    assert "refused, still serving 100" in err
    assert gate.DEFAULT_MAX_METRIC_REGRESSION == by_version["200"]["max_metric_regression"]
    assert sorted(e["candidate_version"] for e in events) == ["200", "300", "400"]
