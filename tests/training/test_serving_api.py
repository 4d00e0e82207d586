"""TF Serving's Classify and Regress APIs (issue 30, item 1): every export carries a signature
those endpoints accept. Checked as TF Serving checks it (method name, an `inputs` string
tensor, `classes`/`scores` or `outputs`), with real ClassificationRequest /
RegressionRequest messages from tensorflow-serving-api, against the batch job's predictions."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from beam_jobs import batch_predict
from inference.model.versions import load_raw_schema
from preprocessing.reference import golden
from tests.helpers import read_jsonl


def _signature_def(export_dir: str, name: str):
    from tensorflow.core.protobuf import saved_model_pb2
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    return proto.meta_graphs[0].signature_def[name]


def _check_like_tf_serving(sig, method: str, outputs: dict) -> None:
    """What TF Serving's classifier / regressor require of a signature before running it."""
    assert sig.method_name == method
    assert set(sig.inputs) == {"inputs"} and sig.inputs["inputs"].dtype == tf.string.as_datatype_enum
    for name, dtype in outputs.items():
        assert sig.outputs[name].dtype == dtype.as_datatype_enum, name


def _saved_model_cli(export_dir: str) -> str:
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    r = subprocess.run([cli, "show", "--dir", export_dir, "--all"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _serve(export_dir: str, name: str, examples) -> dict:
    """Feeds the request's examples as TF Serving does: serialized, one string tensor."""
    fn = tf.saved_model.load(export_dir).signatures[name]
    out = fn(inputs=tf.constant([e.SerializeToString() for e in examples]))
    return {k: v.numpy() for k, v in out.items()}


def test_regress_signature_answers_a_regression_request(trained, taxi_csv, tmp_path):
    from tensorflow_serving.apis import regression_pb2
    export = trained[2]["export_dir"]
    shown = _saved_model_cli(export)
    assert "signature_def['regress']" in shown and "tensorflow/serving/regress" in shown
    _check_like_tf_serving(_signature_def(export, "regress"), "tensorflow/serving/regress",
                           {"outputs": tf.float32})
    # Rows as the batch job scores them, and the same rows as a RegressionRequest.
    summary = batch_predict.run(["--model_dir", export, "--input", taxi_csv[0],
                                 "--output", str(tmp_path / "out")])
    preds = {p["key"]: p["prediction"] for p in
             read_jsonl(str(tmp_path / "out" / "predictions-*.jsonl"))}
    assert summary["rows_predicted"] == len(preds)
    schema = load_raw_schema(export)
    request = regression_pb2.RegressionRequest()
    request.model_spec.name, request.model_spec.signature_name = "taxi", "regress"
    keys = []
    with open(taxi_csv[0]) as f:
        header = f.readline().strip().split(",")
        from preprocessing.parsing.row_parser import RowParser
        parser = RowParser(schema, header)
        for line in f:
            try:
                values = parser.parse(line.rstrip("\n").split(","))
            except Exception:
                continue
            key = values[schema.names.index("key")]
            if key in preds and len(keys) < 64:
                keys.append(key)
                request.input.example_list.examples.add().ParseFromString(
                    golden.example_bytes(schema, values))
    out = _serve(export, "regress", request.input.example_list.examples)
    assert out["outputs"].shape == (len(keys),)  # [batch]: what the regressor reads
    response = regression_pb2.RegressionResponse()
    for v in out["outputs"]:
        response.result.regressions.add().value = float(v)
    got = [r.value for r in response.result.regressions]
    assert got == pytest.approx([preds[k] for k in keys], rel=1e-5, abs=1e-5)


def test_classify_signature_answers_a_classification_request(trained_images, tmp_path):
    from tensorflow_serving.apis import classification_pb2
    folder, _, m = trained_images
    export = m["export_dir"]
    assert "tensorflow/serving/classify" in _saved_model_cli(export)
    _check_like_tf_serving(_signature_def(export, "classify"), "tensorflow/serving/classify",
                           {"classes": tf.string, "scores": tf.float32})
    assert "regress" not in tf.saved_model.load(export).signatures
    images = sorted(glob.glob(os.path.join(folder, "*", "*.jpg")))[:12]
    out_dir = tmp_path / "out"
    batch_predict.run(["--model_dir", export, "--input", os.path.join(folder, "*", "*.jpg"),
                       "--output", str(out_dir)])
    by_file = {}
    for p in read_jsonl(str(out_dir / "predictions-*.jsonl")):
        by_file[os.path.basename(p["key"]).split(":")[0]] = p
    schema = load_raw_schema(export)
    image_col = next(c.name for c in schema.columns if c.transform == "image")
    request = classification_pb2.ClassificationRequest()
    request.model_spec.signature_name = "classify"
    from preprocessing.images.checks import ImageLimits, normalize_image
    for path in images:
        with open(path, "rb") as f:
            data = normalize_image(f.read(), path, ImageLimits(), keep_conforming=True).jpeg
        ex = request.input.example_list.examples.add()
        ex.features.feature[image_col].bytes_list.value.append(data)
    out = _serve(export, "classify", request.input.example_list.examples)
    n_classes = out["scores"].shape[1]
    assert out["classes"].shape == out["scores"].shape == (len(images), n_classes)
    response = classification_pb2.ClassificationResponse()
    for labels, scores in zip(out["classes"], out["scores"]):
        row = response.result.classifications.add()
        for label, score in zip(labels, scores):
            row.classes.add(label=label.decode(), score=float(score))
    for path, row in zip(images, response.result.classifications):
        best = max(row.classes, key=lambda c: c.score)
        want = by_file[os.path.basename(path)]  # the batch job's answer for the same image
        assert best.label == want["class"], (path, best.label, want)
        assert best.score == pytest.approx(max(want["probabilities"]), abs=1e-5)
        assert np.isclose(sum(c.score for c in row.classes), 1.0, atol=1e-4)
