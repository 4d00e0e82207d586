"""The BigQuery sinks on a real local BigQuery (bqemulator, tools/bigquery_emulator.py), reached
through BIGQUERY_EMULATOR_HOST: rows read back with google-cloud-bigquery and compared field by
field with the job's JSON outputs.

Batch writes are Beam's file loads: files staged in Cloud Storage (the GCS emulator), then a
load job that reads them (the BigQuery emulator reads the GCS emulator's storage folder). The
emulator refuses partition decorators (`table$20261124`: "Invalid table id"), so here the batch
sink truncates the whole table (`partitioned=False`); that a date replaces only its own
partition is BigQuery's rule for the decorator, which this emulator cannot show."""
import glob
import json
import os
import shutil
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_jobs import batch_predict
from inference.outputs import sinks
from tests.end_to_end.test_pubsub import GOOD, _start_job, _stop, topics  # noqa: F401 (fixture)
from tests.helpers import read_jsonl
from tools.bigquery_emulator import PROJECT
from tools.shapes import CLASSES

DATASET = "predictions_ds"


def _table(emulator, name: str) -> str:
    emulator.client().create_dataset(DATASET, exists_ok=True)
    return f"{PROJECT}:{DATASET}.{name}"


def _rows(emulator, table: str) -> list:
    ref = table.replace(":", ".")
    return [dict(r.items()) for r in emulator.client().list_rows(ref)]


def _expected(record: dict, columns) -> dict:
    """A JSON-lines record as the table holds it: the sink's columns, strings for STRING."""
    types = {f["name"]: f["type"] for f in sinks.bigquery_fields(columns)}
    return {c: (None if record.get(c) is None else
                str(record[c]) if types[c] == "STRING" else record[c]) for c in columns}


def _same(got: list, want: list, key: str) -> None:
    assert len(got) == len(want)
    got_by, want_by = {r[key]: r for r in got}, {r[key]: r for r in want}
    assert set(got_by) == set(want_by)
    for k, w in want_by.items():
        g = got_by[k]
        assert set(g) == set(w), k
        for c, v in w.items():
            if isinstance(v, float):
                assert isinstance(g[c], float) and g[c] == pytest.approx(v, rel=1e-12), (k, c)
            elif isinstance(v, list):
                assert [type(x) for x in g[c]] == [float] * len(v), (k, c)
                assert g[c] == pytest.approx(v, rel=1e-12), (k, c)
            else:
                assert g[c] == v and type(g[c]) is type(v), (k, c, g[c], v)


def _load(records, table, columns, run_date):
    """The published records, as the Predictions the job hands its BigQuery sink."""
    from inference.outputs.predictions import Prediction
    predictions = [Prediction(r["key"], {}, r["model_version"], extras={
        k: v for k, v in r.items() if k not in ("key", "model_version")}) for r in records]
    opts = PipelineOptions(["--temp_location", "gs://test-bucket/bq-tmp", "--project", PROJECT])
    with beam.Pipeline(options=opts) as p:
        _ = (p | beam.Create(predictions)
             | sinks.WriteBigQuery(table, columns, run_date, partitioned=False))


def _classification_run(trained_images, out):
    shapes, _, m = trained_images
    src = out.parent / "images"
    for c in CLASSES:
        for f in sorted(glob.glob(os.path.join(shapes, c, "*.jpg")))[:4]:
            (src / c).mkdir(parents=True, exist_ok=True)
            shutil.copy(f, src / c)
    batch_predict.run(["--model_dir", m["export_dir"], "--input", f"{src}/*/*.jpg",
                       "--output", str(out), "--evaluate_label", "label",
                       "--output_format", "jsonl"])
    return "classification", (), "label"


def _regression_run(trained, taxi_csv, out):
    batch_predict.run(["--model_dir", trained[2]["export_dir"], "--input", taxi_csv[0],
                       "--output", str(out), "--evaluate_label", "fare_amount",
                       "--passthrough_columns", "company,passenger_count",
                       "--output_format", "jsonl"])
    return "regression", ("company", "passenger_count"), "fare_amount"


@pytest.mark.parametrize("kind", ["classification", "regression"])
def test_batch_sink_loads_through_cloud_storage_and_a_rerun_replaces(
        kind, bigquery_emulator, request, tmp_path):
    out = tmp_path / "out"
    if kind == "classification":
        task, passthrough, label = _classification_run(request.getfixturevalue("trained_images"),
                                                       out)
    else:
        task, passthrough, label = _regression_run(request.getfixturevalue("trained"),
                                                   request.getfixturevalue("taxi_csv"), out)
    records = read_jsonl(str(out / "predictions-*.jsonl"))
    assert len(records) > 8
    columns = sinks.prediction_columns(task, "key", passthrough, bool(label))
    table = _table(bigquery_emulator, f"batch_{kind}")
    _load(records, table, columns, "2026-11-24")
    _same(_rows(bigquery_emulator, table), [_expected(r, columns) for r in records], "key")
    schema = {f.name: (f.field_type, f.mode) for f in
              bigquery_emulator.client().get_table(table.replace(":", ".")).schema}
    assert schema["model_version"] == ("STRING", "NULLABLE")
    if task == "classification":
        assert schema["class_id"] == ("INTEGER", "NULLABLE")
        assert schema["probabilities"] == ("FLOAT", "REPEATED")
    else:
        assert schema["prediction"] == ("FLOAT", "NULLABLE")
        assert schema["passenger_count"] == ("STRING", "NULLABLE")
    # The date run again (on fewer rows): the table holds that run only, no duplicates.
    again = records[: len(records) // 2]
    _load(again, table, columns, "2026-11-24")
    _same(_rows(bigquery_emulator, table), [_expected(r, columns) for r in again], "key")


@pytest.mark.slow
def test_streaming_sink_appends_each_prediction_once(topics, trained, bigquery_emulator,  # noqa: F811
                                                     tmp_path):
    model = tmp_path / "m"
    shutil.copytree(trained[2]["export_dir"], model / "100")
    table = _table(bigquery_emulator, "stream_regression")
    columns = sinks.prediction_columns("regression", "id", extra=("latency_ms", "event_time"))
    first = [f"a{i}" for i in range(10)]
    for mid in first:
        topics.publish("in", json.dumps(GOOD).encode(), id=mid)
    topics.publish("in", b"{broken", id="bad1")
    proc = _start_job(topics, model, "--output_table", table)
    try:
        outs = topics.pull("out", len(first), timeout=180, proc=proc)
        rows = _wait_rows(bigquery_emulator, table, len(first), proc)
        second = [f"b{i}" for i in range(6)]
        for mid in second:
            topics.publish("in", json.dumps(dict(GOOD, passenger_count=2)).encode(), id=mid)
        outs += topics.pull("out", len(second), timeout=120, proc=proc)
        rows = _wait_rows(bigquery_emulator, table, len(first) + len(second), proc)
        dead = topics.pull("dead", 1, timeout=30, proc=proc)
    finally:
        err = _stop(proc)
    records = [json.loads(m.message.data) for m in outs]
    assert sorted(r["id"] for r in records) == sorted(first + second), err[-3000:]
    _same(rows, [_expected(r, columns) for r in records], "id")
    assert [json.loads(m.message.data)["reason"] for m in dead] == ["invalid_json"]


def _wait_rows(emulator, table, want, proc, timeout=90.0):
    """The table's rows once it holds `want` (streaming inserts arrive as bundles finish)."""
    deadline, rows = time.time() + timeout, []
    while time.time() < deadline and proc.poll() is None:
        try:
            rows = _rows(emulator, table)
        except Exception:  # the job creates the table with its first insert
            rows = []
        if len(rows) >= want:
            return rows
        time.sleep(1)
    return rows
