"""One definition of the prediction columns and the BigQuery schema for both prediction jobs."""
import json

import pytest

from inference.outputs import bigquery_client, sinks


def test_classification_columns_keep_class_id_and_probabilities_in_both_jobs():
    batch = sinks.prediction_columns("classification", "key", ["region"], label=True)
    stream = sinks.prediction_columns("classification", "id", extra=("latency_ms", "event_time"))
    assert batch == ["key", "class", "class_id", "probabilities", "model_version", "region", "label"]
    assert stream == ["id", "class", "class_id", "probabilities", "model_version", "latency_ms",
                      "event_time"]
    fields = {f["name"]: f for f in sinks.bigquery_fields(stream)}
    assert fields["class_id"]["type"] == "INTEGER"
    assert fields["probabilities"] == {"name": "probabilities", "type": "FLOAT",
                                       "mode": "REPEATED"}
    assert fields["latency_ms"]["type"] == "FLOAT" and fields["id"]["type"] == "STRING"


def test_regression_columns_and_csv_lines():
    cols = sinks.prediction_columns("regression", "key", label=True)
    assert cols == ["key", "prediction", "model_version", "label"]
    assert [f["type"] for f in sinks.bigquery_fields(cols)] == ["STRING", "FLOAT", "STRING",
                                                               "STRING"]
    rec = {"key": 'a,"b"', "prediction": 1.5, "model_version": "7", "label": None}
    assert sinks.csv_line(rec, cols) == '"a,""b""",1.5,7,'
    assert sinks.csv_line({"probabilities": [0.25, 0.75]}, ["probabilities"]) == '"[0.25, 0.75]"'


def test_csv_lines_quote_every_field_rfc_4180_needs():
    import csv
    import io
    keys = ["plain", "a\nb", "c\rd", 'q"x', "x,y", " lead", "e\r\nf"]
    lines = [sinks.csv_line({"key": k, "prediction": 1.5}, ["key", "prediction"]) for k in keys]
    back = list(csv.reader(io.StringIO("\n".join(lines) + "\n", newline="")))
    assert [r[0] for r in back] == keys and all(r[1] == "1.5" for r in back)


def test_non_finite_predictions_are_rejections_not_outputs():
    import types

    import numpy as np

    from inference.model.model_handler import _finite
    model = types.SimpleNamespace(version="7")
    block = _finite(model, {"predictions": np.array([[1.0], [np.nan], [np.inf], [2.0]],
                                                    dtype=np.float32)}, 4)
    assert block.index == [0, 3] and block.outputs["predictions"].ravel().tolist() == [1.0, 2.0]
    assert [(i, r.reason) for i, r in block.rejections] == [
        (1, "non_finite_prediction"), (2, "non_finite_prediction")]
    probs = np.array([[0.5, 0.5], [np.nan, 0.1]])
    block = _finite(model, {"classes": np.array([b"a", b"b"]), "class_ids": np.array([0, 1]),
                            "probabilities": probs}, 2)
    assert block.index == [0] and "probabilities" in block.rejections[0][1].detail


def test_json_files_are_strict_json():
    import json

    import numpy as np

    from preprocessing.files.filesys import dumps_json
    text = dumps_json({"rmse": float("nan"), "n": [1.0, float("inf"), np.float32("-inf")],
                       "ok": np.float64(2.5)})
    assert json.loads(text, parse_constant=lambda c: 1 / 0) == {"rmse": None,
                                                                "n": [1.0, None, None], "ok": 2.5}


@pytest.mark.parametrize("spec,parsed", [
    ("my-proj:ds.t", ("my-proj", "ds", "t")), ("my-proj.ds.t", ("my-proj", "ds", "t")),
    ("ds.t", (None, "ds", "t")), ("example.com:my-proj:ds.t", ("example.com:my-proj", "ds", "t")),
])
def test_table_names_users_write(spec, parsed):
    assert bigquery_client.parse_table(spec) == parsed


@pytest.mark.parametrize("spec", ["t", "p:ds.t$20261124", "p:ds.", "p:d s.t", ""])
def test_table_names_bigquery_would_refuse_are_refused_early(spec):
    with pytest.raises(ValueError, match="not a BigQuery table"):
        bigquery_client.parse_table(spec)


def test_a_run_date_names_its_day_partition():
    assert bigquery_client.partition("p:ds.t", "2026-11-24") == "p:ds.t$20261124"


def test_the_emulator_client_is_made_only_when_its_variable_is_set(monkeypatch):
    from apache_beam.internal import pickler
    monkeypatch.delenv("BIGQUERY_EMULATOR_HOST", raising=False)
    assert bigquery_client.emulator_client("p-1:ds.t") is None
    monkeypatch.setenv("BIGQUERY_EMULATOR_HOST", "127.0.0.1:9050")
    client = bigquery_client.emulator_client("p-1:ds.t")
    assert (client.endpoint, client.project) == ("http://127.0.0.1:9050", "p-1")
    client.tables  # the apitools client is made: Beam's pickler must still take it
    again = pickler.loads(pickler.dumps(client))
    assert (again.endpoint, again.project) == (client.endpoint, client.project)
    assert again.tables.__class__.__name__ == "TablesService"


def test_rows_bigquery_refuses_become_dead_letters_with_its_error():
    fn = sinks.InsertFailures("stream_predict")
    fn.setup()
    row = {"id": "m1", "prediction": 3.5}
    [dead] = fn.process(("p:ds.t", row, [{"reason": "invalid", "message": "no such field"}]))
    dead = dead.to_dict()  # the DeadLetter, as its sink writes it
    assert dead["reason"] == "bigquery_insert_refused" and dead["id"] == "m1"
    assert json.loads(dead["raw"]) == row and "no such field" in dead["detail"]
