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
