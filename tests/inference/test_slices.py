"""Evaluation by slice and the gate per slice (preprocessing/reference/slices.py,
inference/model/gate.py): the sums by hand, and real exports judged on a golden set whose one
slice favours the serving version while the candidate is better overall."""
from __future__ import annotations

import csv
import json
import os
import shutil
import statistics

import numpy as np
import pytest

from beam_jobs import batch_predict
from beam_jobs.shared import errors
from inference.model.gate import Gate
from preprocessing.contract.schema import Schema
from preprocessing.reference import slices
from preprocessing.reference.evaluation import EvalSums
from preprocessing.reference.golden_score import is_worse

SCHEMA = Schema.from_dict({"label": "y", "columns": [
    {"name": "x", "type": "float", "transform": "zscore"},
    {"name": "kind", "type": "string", "transform": "vocabulary"},
    {"name": "y", "type": "float"}]})
STATS = {"features": {"x": {"type": "number", "quantiles": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]},
                      "kind": {"type": "string", "values_complete": True,
                               "top_values": [["a", 0.5], ["b", 0.5]]}}}


def test_slices_are_named_by_value_and_by_train_quintile():
    slicer = slices.Slicer.of(slices.parse_slice_by(["kind,x", "kind"]), SCHEMA, STATS)
    assert slicer.columns == ("kind", "x") and slicer.edges["x"] == (2.0, 4.0, 6.0, 8.0)
    assert slicer.keys("x", [1.5, 2.0, 7.9, 8.0, None, float("nan")]) == [
        "< 2", "[2, 4)", "[6, 8)", ">= 8", slices.MISSING, slices.MISSING]
    assert slicer.keys("kind", [b"a", "b", ""]) == ["a", "b", slices.MISSING]


@pytest.mark.parametrize("columns, stats, message", [
    (["nope"], STATS, "not a column of the model's schema"),
    (["y"], STATS, "is the label"),
    (["x"], {"features": {"x": {"type": "number"}}}, "no quantiles"),
    (["x"], None, "do not cover"),
])
def test_a_slice_by_the_model_cannot_slice_is_named(columns, stats, message):
    with pytest.raises(slices.SliceError, match=message):
        slices.Slicer.of(columns, SCHEMA, stats)


def test_each_slice_has_the_metrics_of_its_rows_and_sums_merge():
    rng = np.random.default_rng(0)
    pred, labels = rng.normal(size=200), rng.normal(size=200).tolist()
    kinds = ["a" if i % 4 else "b" for i in range(200)]
    one = slices.SliceSums().add_outputs("regression", {"predictions": pred}, labels,
                                         {"kind": kinds}).metrics("regression")
    rows_b = [i for i, k in enumerate(kinds) if k == "b"]
    want = EvalSums().add_outputs("regression", {"predictions": pred[rows_b]},
                                  [labels[i] for i in rows_b]).metrics("regression")
    assert one["kind"]["b"]["rmse"] == pytest.approx(want["rmse"])
    assert one["kind"]["b"]["examples"] == 50 and not one["kind"]["b"]["small"]
    halves = [slices.SliceSums().add_outputs("regression", {"predictions": pred[s]},
                                             labels[s], {"kind": kinds[s]})
              for s in (slice(0, 77), slice(77, 200))]
    merged = halves[0].merge(halves[1]).metrics("regression")
    for k in ("a", "b"):
        assert merged["kind"][k]["examples"] == one["kind"][k]["examples"]
        assert merged["kind"][k]["rmse"] == pytest.approx(one["kind"][k]["rmse"])
    few = slices.SliceSums().add_outputs("regression", {"predictions": pred[:10]},
                                         labels[:10], {"kind": kinds[:10]}).metrics("regression")
    assert few["kind"]["a"]["small"]  # marked, not hidden


def test_a_column_of_more_values_than_bounded_groups_the_rest():
    keys = [f"v{i}" for i in range(slices.MAX_SLICES + 50)]
    out = slices.SliceSums().add_outputs("regression", {"predictions": np.zeros(len(keys))},
                                         [1.0] * len(keys), {"id": keys}).metrics("regression")
    assert len(out["id"]) == slices.MAX_SLICES + 1 and out["id"][slices.OTHER]["examples"] == 50


def test_only_slices_with_enough_rows_can_regress():
    cand = {"k": {"a": {"examples": 40, "rmse": 2.0, "small": False},
                  "b": {"examples": 5, "rmse": 9.0, "small": True}}}
    cur = {"k": {"a": {"examples": 40, "rmse": 1.0, "small": False},
                 "b": {"examples": 5, "rmse": 1.0, "small": True}}}
    assert [r["slice"] for r in slices.regressed(cand, cur, "rmse", 0.05, is_worse)] == ["k=a"]
    assert slices.regressed(cand, cur, "rmse", 1.5, is_worse) == []


def _slice_favouring_golden_set(taxi_csv, path):
    """The taxi rows, with the labels of the least frequent payment type of at least 40
    rows set to the mean fare: a model predicting near the mean (the shuffled-label export)
    is better there; the real model stays better over all rows."""
    with open(taxi_csv, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    pay, fare = header.index("payment_type"), header.index("fare_amount")
    body = [r for r in body if r[fare]]
    counts = {}
    for r in body:
        counts[r[pay]] = counts.get(r[pay], 0) + 1
    chosen = min((k for k, n in counts.items() if n >= 40), key=counts.get)
    mean = statistics.mean(float(r[fare]) for r in body)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(r[:fare] + [f"{mean:.2f}"] + r[fare + 1:] if r[pay] == chosen else r
                    for r in body)
    return chosen


def test_the_gate_refuses_a_version_better_overall_and_worse_on_a_slice(
        trained, shuffled_export, taxi_csv, tmp_path):
    from inference.model.serving_model import _Version
    good, bad = _Version(trained[2]["export_dir"]), _Version(shuffled_export)
    golden = str(tmp_path / "golden.csv")
    chosen = _slice_favouring_golden_set(taxi_csv[0], golden)
    overall = Gate(golden, 0.05).check(good, bad)
    assert overall.accepted and overall.record["reason"] == "within_tolerance"
    assert overall.record["candidate_metric"] < overall.record["current_metric"]
    verdict = Gate(golden, 0.05, ("payment_type", "passenger_count"), 0.05).check(good, bad)
    rec = verdict.record
    assert not verdict.accepted and rec["reason"] == "slice_regression", rec
    assert rec["candidate_metric"] < rec["current_metric"]  # better over all rows
    assert rec["slices_regressed"][0]["slice"] == f"payment_type={chosen}"
    assert rec["detail"].startswith(f"payment_type={chosen}: rmse ")
    worst = rec["slices_regressed"][0]
    assert worst["candidate"] > worst["current"] * 1.05 and worst["examples"] >= 40


def test_batch_predict_slices_its_metrics_and_gates_by_slice(
        trained, shuffled_export, taxi_csv, tmp_path):
    golden = str(tmp_path / "golden.csv")
    chosen = _slice_favouring_golden_set(taxi_csv[0], golden)
    base = tmp_path / "models"
    shutil.copytree(shuffled_export, base / "100")
    shutil.copytree(trained[2]["export_dir"], base / "200")
    args = ["--model_dir", str(base), "--input", taxi_csv[0], "--golden_set", golden,
            "--evaluate_label", "fare_amount", "--slice_by", "payment_type",
            "--slice_by", "passenger_count"]
    summary = batch_predict.run(args + ["--output", str(tmp_path / "a"),
                                        "--max_slice_regression", "0.05"])
    assert summary["model_version"] == "100"
    assert summary["model_gate"]["reason"] == "slice_regression"
    assert summary["model_gate"]["detail"].startswith(f"payment_type={chosen}")
    summary = batch_predict.run(args + ["--output", str(tmp_path / "b")])  # no slice gate
    assert summary["model_version"] == "200"
    with open(tmp_path / "b" / "metrics.json") as f:
        metrics = json.load(f)
    by_slice = metrics["slices"]
    assert set(by_slice) == {"payment_type", "passenger_count"}
    for column in by_slice.values():  # every labelled row is in one slice of each column
        assert sum(m["examples"] for m in column.values()) == metrics["examples"]
    assert by_slice["payment_type"][chosen]["examples"] >= 40


@pytest.mark.parametrize("extra, message", [
    (["--max_slice_regression", "0.1"], "needs --slice_by"),
    (["--slice_by", "payment_type"], "needs --evaluate_label"),
    (["--slice_by", "nope", "--evaluate_label", "fare_amount"], "not a column"),
    (["--slice_by", "x", "--max_slice_regression", "-1"], "must be >= 0"),
])
def test_slice_flags_a_job_cannot_use_fail_at_launch_with_one_line(
        trained, taxi_csv, tmp_path, extra, message):
    with pytest.raises(errors.JobError, match=message):
        batch_predict.run(["--model_dir", trained[2]["export_dir"], "--input", taxi_csv[0],
                           "--output", str(tmp_path / "out")] + extra)
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("job, extra, message", [
    ("beam_jobs.stream_predict", ["--slice_by", "nope"], "not a column"),
    ("beam_jobs.redrive", ["--slice_by", "payment_type"], "do not apply"),
])
def test_slices_a_job_cannot_make_are_refused_in_one_line(trained, tmp_path, job, extra,
                                                            message):
    import importlib
    mod = importlib.import_module(job)
    args = ["--model_dir", trained[2]["export_dir"], "--output", str(tmp_path / "out")]
    if job.endswith("stream_predict"):
        (tmp_path / "events.jsonl").write_text("{}\n")
        args = ["--model_dir", trained[2]["export_dir"], "--replay",
                str(tmp_path / "events.jsonl"), "--output_dir", str(tmp_path / "out"),
                "--streaming"]
    with pytest.raises(errors.JobError, match=message):
        mod.run(args + extra)


def test_the_tuners_gate_refuses_by_slice_with_the_same_rule(trained, shuffled_export,
                                                              taxi_csv, tmp_path):
    """training.tune's publish gate (training/tuning/results.py) judges its best trial by the
    rule the prediction jobs swap versions with: on the serving version's own golden set,
    here one whose payment-type slice favours it."""
    import tensorflow as tf

    from preprocessing.contract.schema import RAW_SCHEMA_ASSET
    from preprocessing.reference.golden import EXPORT_GOLDEN
    from preprocessing.reference.golden_score import read_golden
    from training.tuning import results
    good = trained[2]["export_dir"]
    serving = str(tmp_path / "serving")
    shutil.copytree(shuffled_export, serving)
    golden_csv = str(tmp_path / "golden.csv")
    chosen = _slice_favouring_golden_set(taxi_csv[0], golden_csv)
    rows = read_golden(golden_csv, Schema.loads(open(os.path.join(good, RAW_SCHEMA_ASSET)).read()))
    with tf.io.TFRecordWriter(os.path.join(serving, EXPORT_GOLDEN)) as w:
        for example in rows.examples:
            w.write(example)
    overall = results.gate_check(good, serving, 0.05)
    assert overall["accepted"] and overall["reason"] == "within_tolerance"
    verdict = results.gate_check(good, serving, 0.05, ("payment_type",), 0.05)
    assert not verdict["accepted"] and verdict["reason"] == "slice_regression", verdict
    assert verdict["slices_regressed"][0]["slice"] == f"payment_type={chosen}"
    assert verdict["candidate_metric"] < verdict["current_metric"]  # better over all rows
