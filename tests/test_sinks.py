"""One definition of the prediction columns and the BigQuery schema for both prediction jobs."""
from inference import sinks


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

    from inference.model_handler import _finite
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

    from preprocessing.filesys import dumps_json
    text = dumps_json({"rmse": float("nan"), "n": [1.0, float("inf"), np.float32("-inf")],
                       "ok": np.float64(2.5)})
    assert json.loads(text, parse_constant=lambda c: 1 / 0) == {"rmse": None,
                                                                "n": [1.0, None, None], "ok": 2.5}
