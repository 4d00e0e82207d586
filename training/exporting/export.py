"""Exports the trained model with the tf.transform graph embedded (TF Serving layout).

`<model_dir>/<version>/` holds a SavedModel whose signatures all take RAW features:
  serving_default  `examples`: serialized tf.Example strings        -> predictions
  predict_raw      one [batch] tensor per raw column (the shape `{"instances": [...]}` maps to)
  classify         (classification) TF Serving's Classify API: `inputs` serialized
                   tf.Examples -> `classes` [batch, n] strings, `scores` [batch, n]
  regress          (regression) TF Serving's Regress API: `inputs` -> `outputs` [batch]
The last two carry the method names TF Serving checks (tensorflow/serving/classify and
/regress), which `tf.saved_model.save` cannot set (it writes .../predict): they are set in the
saved graph's protobuf after saving, with the forests' loads chained one after another
(forest_loads.py), and the fingerprint is written again.
plus `assets.extra/raw_schema.json`, the raw schema that batch/stream jobs parse inputs with,
`model.json` (the family, the ops it needs beyond TensorFlow's and their package),
`README.md` (how to load and call it) and `tf_serving_warmup_requests` (warmup.py).

Outputs: regression -> `predictions` [batch]; classification -> `probabilities` [batch, n],
`class_ids` [batch], `classes` [batch] (label vocabulary strings).
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Optional

import tensorflow as tf

from preprocessing.contract.schema import RAW_SCHEMA_ASSET, Schema
from preprocessing.contract.values import DTYPE_TABLE
from preprocessing.features.image_transform import decode_batch
from preprocessing.reference.golden import (
    CALIBRATION_FILE,
    EXPORT_CALIBRATION,
    EXPORT_GOLDEN,
    EXPORT_GOLDEN_LEARNED,
    GOLDEN_DIR,
    GOLDEN_FILE,
)
from preprocessing.reference.statistics import EXPORT_STATISTICS, STATISTICS_FILE
from training.data import FeatureInfo
from training.exporting import forest_loads
from training.exporting.requests import CLASSIFY_METHOD, REGRESS_METHOD, example_spec
from training.holding import held, hold


class ServingModule(tf.Module):
    def __init__(self, model, tft_output, info: FeatureInfo, schema: Schema):
        super().__init__()
        hold(self, "model", model)
        self.tft_layer = tft_output.transform_features_layer()
        self._input_names = list(info.input_names)
        self._classification = info.task == "classification"
        self._scaler = info.label_scaler
        self.class_names = tf.constant(info.class_names or [""])
        cols = schema.serving_columns()
        self._example_spec = example_spec(schema)
        self._tf_names = {c.name: schema.tf_name(c.name) for c in cols}
        self.serve_examples = tf.function(
            self._serve_examples,
            input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        self.predict_raw = tf.function(
            self._predict_raw,
            input_signature=[{schema.tf_name(c.name): tf.TensorSpec(
                [None], tf.as_dtype(DTYPE_TABLE[c.type].tf), name=schema.tf_name(c.name))
                for c in cols}])

    def _predict(self, raw):
        transformed = self.tft_layer(dict(raw))
        out = held(self, "model")({k: transformed[k] for k in self._input_names}, training=False)
        if not self._classification:
            out = tf.squeeze(out, -1)
            if self._scaler is not None:  # back to the label's own scale
                out = self._scaler.inverse(out)
            return {"predictions": out}
        probs = tf.nn.softmax(out, axis=-1)
        ids = tf.argmax(probs, axis=-1)
        return {"probabilities": probs, "class_ids": ids,
                "classes": tf.gather(self.class_names, ids)}

    def _serve_examples(self, examples):
        parsed = tf.io.parse_example(examples, self._example_spec)
        return self._predict({self._tf_names[k]: v for k, v in parsed.items()})

    def api_signatures(self) -> dict:
        return serving_api_signatures(self, self._classification)

    def _predict_raw(self, features):
        return self._predict(features)


class ImageServingModule(tf.Module):
    """Serving for image models: raw encoded bytes in, decoded by preprocessing.features.image_transform (the
    same function training used). `predict_raw` takes `image_bytes`: TF Serving's REST API
    base64-decodes `{"b64": ...}` values for inputs whose names end in `_bytes`."""

    def __init__(self, model, info: FeatureInfo):
        super().__init__()
        hold(self, "model", model)
        self._image = info.image
        self.class_names = tf.constant(info.class_names or [""])
        self.serve_examples = tf.function(
            self._serve_examples,
            input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        self.predict_raw = tf.function(
            self._predict_raw,
            input_signature=[{"image_bytes": tf.TensorSpec([None], tf.string, name="image_bytes")}])

    def _predict(self, image_bytes):
        logits = held(self, "model")({self._image: decode_batch(image_bytes)}, training=False)
        probs = tf.nn.softmax(logits, axis=-1)
        ids = tf.argmax(probs, axis=-1)
        return {"probabilities": probs, "class_ids": ids, "classes": tf.gather(self.class_names, ids)}

    def _serve_examples(self, examples):
        parsed = tf.io.parse_example(
            examples, {self._image: tf.io.FixedLenFeature([], tf.string)})
        return self._predict(parsed[self._image])

    def api_signatures(self) -> dict:
        return serving_api_signatures(self, classification=True)

    def _predict_raw(self, features):
        return self._predict(features["image_bytes"])


def serving_api_signatures(module, classification: bool) -> dict:
    """TF Serving's Classify or Regress signature over the module's tf.Example path."""
    spec = [tf.TensorSpec([None], tf.string, name="inputs")]
    if classification:
        def classify(inputs):
            out = module._serve_examples(inputs)
            rows = tf.shape(out["probabilities"])[0]
            return {"classes": tf.tile(module.class_names[None, :], [rows, 1]),
                    "scores": out["probabilities"]}
        return {"classify": tf.function(classify, input_signature=spec)}

    def regress(inputs):
        return {"outputs": module._serve_examples(inputs)["predictions"]}
    return {"regress": tf.function(regress, input_signature=spec)}


def finish_saved_model(export_dir: str, methods: dict) -> None:
    """Rewrites saved_model.pb as `tf.saved_model.save` cannot write it (and the fingerprint
    that checksums it): the signatures' method names, and the forests' loads one after
    another (forest_loads.chain)."""
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.saved_model import fingerprinting_utils
    path = os.path.join(export_dir, "saved_model.pb")
    proto = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(path, "rb") as f:
        proto.ParseFromString(f.read())
    for graph in proto.meta_graphs:
        for name, method in methods.items():
            if name in graph.signature_def:
                graph.signature_def[name].method_name = method
        forest_loads.chain(graph.graph_def)
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(proto.SerializeToString())
    fingerprinting_utils.write_fingerprint(export_dir)


def copy_reference_files(data_dir: str, export_dir: str) -> list:
    """Preprocess's golden set (labelled raw eval rows) and train statistics go with the
    export, so the prediction jobs can check this version before it serves
    (inference/model/gate.py) and compare what they serve with training (inference/skew.py); the
    calibration set (train rows) is what training.optimize chooses int8 ranges on."""
    copied = []
    for source, target in ((os.path.join(GOLDEN_DIR, GOLDEN_FILE), EXPORT_GOLDEN),
                           (os.path.join(GOLDEN_DIR, CALIBRATION_FILE), EXPORT_CALIBRATION),
                           (STATISTICS_FILE, EXPORT_STATISTICS)):
        if tf.io.gfile.exists(os.path.join(data_dir, source)):
            tf.io.gfile.copy(os.path.join(data_dir, source), os.path.join(export_dir, target),
                             overwrite=True)
            copied.append(target)
    return copied


def next_version_dir(model_dir: str) -> str:
    """A new numeric version, newer than any present (TF Serving picks the highest)."""
    version = int(time.time())
    if tf.io.gfile.exists(model_dir):
        existing = [int(v) for v in tf.io.gfile.listdir(model_dir) if v.strip("/").isdigit()]
        if existing:
            version = max(version, max(existing) + 1)
    return os.path.join(model_dir, str(version))


MODEL_ASSET = "assets.extra/model.json"  # {"family": ..., what loading needs}
README_ASSET = "assets.extra/README.md"   # how to load and call this version


def model_family(export_dir: str) -> str:
    """The export's model family (exports older than the file hold a network)."""
    path = os.path.join(export_dir, MODEL_ASSET)
    if not tf.io.gfile.exists(path):
        return "network"
    with tf.io.gfile.GFile(path) as f:
        return json.load(f).get("family", "network")


def export_model(model, data_dir: str, info: FeatureInfo, export_dir: str,
                 family: str = "network", learned_golden: Optional[str] = None) -> str:
    """The SavedModel and its assets; `learned_golden` (why) when the model learned the
    golden set's rows (golden_rows.Added): the gate then compares no metric on them."""
    import tensorflow_transform as tft

    if info.image:
        module = ImageServingModule(model, info)
    else:
        module = ServingModule(model, tft.TFTransformOutput(data_dir), info, info.raw_schema)
    api = module.api_signatures()
    tf.saved_model.save(module, export_dir, signatures={
        "serving_default": module.serve_examples, "predict_raw": module.predict_raw, **api})
    finish_saved_model(export_dir, {"classify": CLASSIFY_METHOD, "regress": REGRESS_METHOD})
    tf.io.gfile.makedirs(os.path.join(export_dir, "assets.extra"))
    copied = copy_reference_files(data_dir, export_dir)
    if learned_golden and EXPORT_GOLDEN in copied:
        with tf.io.gfile.GFile(os.path.join(export_dir, EXPORT_GOLDEN_LEARNED), "w") as f:
            json.dump({"learned": True, "why": learned_golden}, f, indent=1)
    schema = info.raw_schema
    if schema.task != info.task:  # --label_key: the jobs serve the task that was trained
        schema = dataclasses.replace(schema, task=info.task)
    write_model_notes(export_dir, family, schema)
    # Written last: readers take a version as complete once this file exists
    # (inference.model.model_handler.is_complete).
    with tf.io.gfile.GFile(os.path.join(export_dir, RAW_SCHEMA_ASSET), "w") as f:
        f.write(schema.dumps())
    return export_dir


def write_model_notes(export_dir: str, family: str, schema: Schema) -> dict:
    """TF Serving's warmup records, `model.json` (the family and what loading needs: the op
    package and its version) and a README saying how to load and call the export."""

    from preprocessing.files import serving_ops
    from training.exporting.export_readme import readme_text
    from training.exporting.warmup import write_warmup
    notes = {"family": family, **serving_ops.needs(export_dir),
             "warmup_requests": write_warmup(export_dir, schema)}
    with tf.io.gfile.GFile(os.path.join(export_dir, MODEL_ASSET), "w") as f:
        json.dump(notes, f, indent=1)
    with tf.io.gfile.GFile(os.path.join(export_dir, README_ASSET), "w") as f:
        f.write(readme_text(notes, schema))
    return notes
