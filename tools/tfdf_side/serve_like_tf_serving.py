"""Runs in the side environment (tools/tfdf_side/requirements.txt: TensorFlow 2.12 and
TensorFlow Decision Forests 1.3.0, no ydf-tf, nothing of this project). Loads an export the
way TF Serving's model server does (the TF1 SavedModel loader: the `serve` meta graph into a
session, its init op run, which loads every forest with TF-DF's own
`SimpleMLLoadModelFromPathWithHandle`), then feeds it through the session:
  - the golden set's rows to `serving_default`;
  - every warmup record (assets.extra/tf_serving_warmup_requests), as TF Serving's warmup does.
Writes a JSON report to --out.

    python serve_like_tf_serving.py --export DIR --out report.json
"""
import argparse
import json
import os

import numpy as np
import tensorflow as tf
import tensorflow_decision_forests  # noqa: F401  (registers TF-DF 1.3.0's ops and kernels)
from tensorflow_serving.apis import prediction_log_pb2

MAX_GOLDEN_ROWS = 20000


def run_signature(sess, signature, feeds):
    """{output: array} of a signature, fed {input key: value}."""
    feed = {signature.inputs[k].name: v for k, v in feeds.items()}
    names = sorted(signature.outputs)
    values = sess.run([signature.outputs[k].name for k in names], feed_dict=feed)
    return dict(zip(names, values))


def replay(sess, signatures, log):
    kind = log.WhichOneof("log_type")
    request = getattr(log, kind).request
    name = request.model_spec.signature_name or "serving_default"
    sig = signatures[name]
    if kind == "predict_log":
        feeds = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
    elif kind in ("classify_log", "regress_log"):
        feeds = {"inputs": np.array([e.SerializeToString()
                                     for e in request.input.example_list.examples], object)}
    else:
        raise ValueError(f"a {kind} record: not one this project writes")
    out = run_signature(sess, sig, feeds)
    return {"kind": kind, "signature": name, "method": sig.method_name,
            "outputs": {k: list(v.shape) for k, v in out.items()}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--export", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    report = {"tensorflow": tf.__version__,
              "tensorflow_decision_forests": tensorflow_decision_forests.__version__}
    with tf.compat.v1.Session(graph=tf.Graph()) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], args.export)
        signatures = {k: v for k, v in meta.signature_def.items() if k != "__saved_model_init_op"}
        report["signatures"] = {k: v.method_name for k, v in signatures.items()}
        golden = os.path.join(args.export, "assets.extra", "golden.tfrecord")
        rows = []
        for record in tf.compat.v1.io.tf_record_iterator(golden):
            rows.append(record)
            if len(rows) >= MAX_GOLDEN_ROWS:
                break
        out = run_signature(sess, signatures["serving_default"],
                            {"examples": np.array(rows, object)})
        report["golden_rows"] = len(rows)
        report["serving_default"] = {k: v.tolist() for k, v in out.items()
                                     if v.dtype != object}
        warmup = os.path.join(args.export, "assets.extra", "tf_serving_warmup_requests")
        replayed = []
        if os.path.exists(warmup):
            for record in tf.compat.v1.io.tf_record_iterator(warmup):
                log = prediction_log_pb2.PredictionLog()
                log.ParseFromString(record)
                replayed.append(replay(sess, signatures, log))
        report["warmup"] = replayed
    with open(args.out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
