"""Train/serve skew and drift (preprocessing/reference/statistics.py, inference/skew.py): statistics of
the train split kept by preprocess and carried by each export, compared with what the
prediction jobs serve."""
from __future__ import annotations

import csv
import json
import random
import shutil

import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline

from beam_jobs import batch_predict, stream_predict
from beam_jobs.shared.local_runner import LocalRunner
from inference.skew import js_divergence, skew_line, skew_report
from preprocessing.reference import statistics
from preprocessing.reference.statistics import ColumnAcc, TableAcc
from tests.helpers import GOOD, read_jsonl

KINDS = {"x": "number", "c": "string"}


def _table(x, c) -> TableAcc:
    return TableAcc(KINDS).add(len(x), {"x": x, "c": c})


def _train(rng) -> dict:
    return _table(rng.normal(0, 1, 5000), rng.choice(["a", "b", "c"], 5000).tolist()).summary()


def test_statistics_count_missing_values_and_merge_like_one_pass():
    a = ColumnAcc("number")
    a.add(np.array([1.0, np.nan, 3.0]))
    b = ColumnAcc("number")
    b.add([None, 5.0])
    merged = a.merge(b).summary()
    assert merged["count"] == 5 and merged["missing_rate"] == 0.4
    assert merged["mean"] == 3.0 and merged["min"] == 1.0 and merged["max"] == 5.0
    s = ColumnAcc("string")
    s.add(["x", "", None, "y", "x"])
    out = s.summary()
    assert out["missing_rate"] == 0.4 and out["top_values"] == [["x", 2 / 3], ["y", 1 / 3]]
    assert out["values_complete"] is True
    big = ColumnAcc("number")
    for _ in range(5):
        big.add(np.arange(10_000, dtype=float))
    assert len(big.values) == statistics.SAMPLE and big.n == 50_000  # the sample is bounded


def test_js_divergence_bounds():
    assert js_divergence([0.5, 0.5], [0.5, 0.5]) == 0.0
    assert js_divergence([1.0, 0.0], [0.0, 1.0]) == pytest.approx(1.0)


def test_skew_report_flags_a_shift_a_new_category_and_a_missing_column_by_name():
    rng = np.random.default_rng(0)
    train = _train(rng)
    same = skew_report(train, _table(rng.normal(0, 1, 2000),
                                     rng.choice(["a", "b", "c"], 2000).tolist()))
    assert same["flagged"] == [], same["features"]
    shifted = skew_report(train, _table(rng.normal(1.0, 1, 2000),
                                        rng.choice(["a", "b", "c"], 2000).tolist()))
    assert shifted["flagged"] == ["x"] and shifted["features"]["x"]["flags"] == ["distance"]
    new = skew_report(train, _table(rng.normal(0, 1, 2000),
                                    rng.choice(["a", "b", "c", "zzz"], 2000).tolist()))
    assert new["flagged"] == ["c"] and "unseen_values" in new["features"]["c"]["flags"]
    gone = skew_report(train, _table([None] * 2000, rng.choice(["a", "b", "c"], 2000).tolist()))
    assert gone["flagged"] == ["x"] and gone["features"]["x"]["flags"] == ["missing_rate"]
    assert "x (missing 100.0% (+100.0%))" in skew_line(gone)
    few = skew_report(train, _table(rng.normal(5, 1, 50), ["zzz"] * 50))
    assert few["flagged"] == [] and "fewer than 100 rows" in few["note"]


def _shifted_csv(src: str, dst: str) -> None:
    """The same rows with dropoff_latitude moved north, a new payment type in 30% of rows,
    and passenger_count gone (every row takes its default)."""
    rng = random.Random(4)
    with open(src, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(dst, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            try:
                r["dropoff_latitude"] = str(float(r["dropoff_latitude"]) + 0.1)
            except (TypeError, ValueError):
                pass  # the dirty rows stay dirty
            if rng.random() < 0.3:
                r["payment_type"] = "Crypto"
            r["passenger_count"] = ""
            w.writerow(r)


def test_preprocess_keeps_train_statistics_and_the_export_carries_them(preprocessed, trained):
    data_dir, summary = preprocessed
    with open(f"{data_dir}/statistics.json") as f:
        stats = json.load(f)
    assert stats["rows"] == summary["splits"]["train"]
    assert set(stats["features"]) == {"pickup_longitude", "pickup_latitude", "dropoff_longitude",
                                      "dropoff_latitude", "passenger_count", "payment_type",
                                      "company", "fare_amount"}  # no key, no datetime
    pay = stats["features"]["payment_type"]
    assert sum(f for _, f in pay["top_values"]) == pytest.approx(1.0)
    with open(f"{trained[2]['export_dir']}/assets.extra/train_statistics.json") as f:
        assert json.load(f) == stats


def _train_statistics(schema, csv_path: str, tmp_path) -> dict:
    """statistics.json as the preprocess job computes it (TableStatistics over the train
    split ReadCsvSplits gives), without tf.transform."""
    import apache_beam as beam

    from beam_jobs.preprocess_steps import ReadCsvSplits
    from preprocessing.reference.statistics import TableStatistics
    out = tmp_path / "statistics.json"
    with BeamTestPipeline(runner=LocalRunner()) as p:
        raw = p | ReadCsvSplits(schema, [csv_path], (0.8, 0.1, 0.1))
        _ = (raw.train | beam.CombineGlobally(TableStatistics(schema))
             | beam.Map(lambda stats: out.write_text(json.dumps(stats))))
    return json.loads(out.read_text())


def _skew_of(schema, stats, inputs: dict, folder, passthrough=()) -> dict:
    """{name: the skew report of that CSV's rows} through ReadInputs and SkewOfBatches."""
    import apache_beam as beam

    from inference.batch import ReadInputs
    from inference.skew import SkewOfBatches, feature_statistics
    # what the job's launch keeps of them: the model's features (no label, key, passthrough)
    stats = feature_statistics(stats, schema, passthrough)
    with BeamTestPipeline(runner=LocalRunner()) as p:
        for name, path in inputs.items():
            batches = (p | f"Read_{name}" >> ReadInputs("batch_predict", schema, [path],
                                                         schema.key, passthrough)).batches
            _ = (batches | f"Skew_{name}" >> SkewOfBatches(stats)
                 | f"Keep_{name}" >> beam.Map(
                     lambda r, n=name: (folder / f"{n}.json").write_text(json.dumps(r))))
    return {name: json.loads((folder / f"{name}.json").read_text()) for name in inputs}


def test_skew_of_served_rows_flags_only_the_shifted_columns(taxi_csv, tmp_path):
    from preprocessing import TAXI_SPEC
    from preprocessing.contract.schema import Schema
    schema = Schema.load(TAXI_SPEC)
    stats = _train_statistics(schema, taxi_csv[0], tmp_path)
    _shifted_csv(taxi_csv[0], str(tmp_path / "shifted.csv"))
    with open(taxi_csv[0], newline="") as f:  # rows to predict: no label, a passthrough column
        rows = list(csv.DictReader(f))
    fields = [n for n in rows[0] if n != "fare_amount"] + ["note"]
    with open(tmp_path / "unlabelled.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(dict(r, note="n/a"))
    reports = _skew_of(schema, stats, {"same": taxi_csv[0],
                                       "shifted": str(tmp_path / "shifted.csv")}, tmp_path)
    reports.update(_skew_of(schema, stats, {"unlabelled": str(tmp_path / "unlabelled.csv")},
                            tmp_path, passthrough=("note",)))
    assert reports["same"]["flagged"] == [], reports["same"]["features"]
    shifted = reports["shifted"]
    assert set(shifted["flagged"]) == {"dropoff_latitude", "payment_type", "passenger_count"}
    assert shifted["features"]["payment_type"]["unseen_share"] == pytest.approx(0.3, abs=0.05)
    # The model's features only: not the label, the key or a passthrough column.
    unlabelled = reports["unlabelled"]
    assert unlabelled["flagged"] == [], unlabelled["features"]
    assert not {"fare_amount", "key", "note"} & set(unlabelled["features"])
    assert "payment_type" in unlabelled["features"]


def test_batch_summary_carries_the_skew_report_unless_it_is_off(trained, taxi_csv, tmp_path):
    export = trained[2]["export_dir"]
    _shifted_csv(taxi_csv[0], str(tmp_path / "shifted.csv"))
    summary = batch_predict.run(["--model_dir", export, "--input", str(tmp_path / "shifted.csv"),
                                 "--output", str(tmp_path / "shifted")])
    assert "payment_type" in summary["skew"]["flagged"]
    assert json.load(open(tmp_path / "shifted" / "skew.json")) == summary["skew"]
    summary = batch_predict.run(["--model_dir", export, "--input", str(tmp_path / "shifted.csv"),
                                 "--output", str(tmp_path / "off"), "--skew_report", "off"])
    assert "skew" not in summary and not (tmp_path / "off" / "skew.json").exists()


def test_streaming_writes_a_skew_record_per_window(trained, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(trained[2]["export_dir"], model / "100")
    rng = random.Random(1)
    lines = [json.dumps({"id": f"e{i}", "event_time": 1_700_000_000 + i * 0.02,
                         "data": dict(GOOD, payment_type=rng.choice(["Cash", "Crypto"]),
                                      dropoff_latitude=40.8 + rng.random() / 10)})
             for i in range(300)]
    src = tmp_path / "events.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    stream_predict.run(["--streaming", "--model_dir", str(model), "--replay", str(src),
                        "--replay_rate", "1000", "--output_dir", str(out), "--window_secs", "10"])
    monitoring = read_jsonl(str(out / "monitoring" / "*.jsonl"))
    skew = [m for m in monitoring if m.get("event") == "skew" and m["pane"] == "ON_TIME"]
    assert len(skew) == 1 and skew[0]["rows"] == 300
    assert "payment_type" in skew[0]["flagged"]
    assert skew[0]["features"]["payment_type"]["unseen_share"] == pytest.approx(0.5, abs=0.1)
    assert "dropoff_latitude" in skew[0]["flagged"]
