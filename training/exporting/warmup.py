"""TF Serving's warmup records: `assets.extra/tf_serving_warmup_requests` in every export.

TF Serving replays these requests when it loads a version, before the version takes traffic,
so the first real requests after a version swap do not pay the model's lazy initialisation
(TFX's InfraValidator writes the same file). Each record is a `PredictionLog` (protos of
`tensorflow-serving-api`) for one signature the server serves: a Predict request for
`serving_default` (serialized tf.Examples) and `predict_raw` (one tensor per raw column), a
Classify or Regress request for `classify` / `regress`. The rows are the golden set's (raw
eval rows the export already carries), each signature asked once with one row and once with
up to WARMUP_ROWS, within WARMUP_REQUEST_BYTES of examples per request (warmup_rows).
"""
from __future__ import annotations

import os
from typing import Dict, List

from preprocessing.contract.schema import Schema
from preprocessing.reference.golden import EXPORT_GOLDEN, read_examples
from training.exporting.requests import (
    CLASSIFY_METHOD,
    PREDICT_METHOD,
    REGRESS_METHOD,
    predict_raw_parsing,
)

WARMUP_ASSET = os.path.join("assets.extra", "tf_serving_warmup_requests")
WARMUP_ROWS = 64
WARMUP_REQUEST_BYTES = 512 << 10


def warmup_rows(examples: List[bytes]) -> List[bytes]:
    """The rows the largest request asks: the first WARMUP_ROWS that fit WARMUP_REQUEST_BYTES
    together (a row larger than that alone is passed over: a warmup file stays small)."""
    rows, total = [], 0
    for e in examples:
        if len(rows) == WARMUP_ROWS:
            break
        if total + len(e) <= WARMUP_REQUEST_BYTES:
            rows.append(e)
            total += len(e)
    return rows


def request_sizes(rows: List[bytes]) -> List[int]:
    """Rows per request: one, and all of `rows`."""
    return sorted({1, len(rows)}) if rows else []


def signature_methods(export_dir: str) -> Dict[str, str]:
    """{signature: method name} as saved (what TF Serving dispatches on)."""
    from preprocessing.files.serving_ops import meta_graph
    return {name: sig.method_name for name, sig in meta_graph(export_dir).signature_def.items()}


def _predict_raw_inputs(examples: List[bytes], schema: Schema) -> dict:
    """predict_raw's tensors for these rows: parsed as serving_default parses them."""
    import tensorflow as tf
    spec, names = predict_raw_parsing(schema)
    parsed = tf.io.parse_example(tf.constant(examples), spec)
    return {names[k]: tf.make_tensor_proto(v.numpy()) for k, v in parsed.items()}


def warmup_logs(examples: List[bytes], schema: Schema, methods: Dict[str, str]) -> list:
    """The PredictionLog records for these rows and the export's signatures."""
    import tensorflow as tf
    from tensorflow_serving.apis import (
        classification_pb2,
        predict_pb2,
        prediction_log_pb2,
        regression_pb2,
    )
    logs, chosen = [], warmup_rows(examples)
    for rows in request_sizes(chosen):
        batch = chosen[:rows]
        for name in sorted(methods):
            method = methods[name]
            if method == PREDICT_METHOD and name in ("serving_default", "predict_raw"):
                request = predict_pb2.PredictRequest()
                request.model_spec.signature_name = name
                if name == "serving_default":
                    request.inputs["examples"].CopyFrom(
                        tf.make_tensor_proto(batch, dtype=tf.string))
                else:
                    for key, proto in _predict_raw_inputs(batch, schema).items():
                        request.inputs[key].CopyFrom(proto)
                logs.append(prediction_log_pb2.PredictionLog(
                    predict_log=prediction_log_pb2.PredictLog(request=request)))
            elif method in (CLASSIFY_METHOD, REGRESS_METHOD):
                cls = classification_pb2.ClassificationRequest if method == CLASSIFY_METHOD \
                    else regression_pb2.RegressionRequest
                request = cls()
                request.model_spec.signature_name = name
                for e in batch:
                    request.input.example_list.examples.add().ParseFromString(e)
                log = prediction_log_pb2.PredictionLog()
                if method == CLASSIFY_METHOD:
                    log.classify_log.request.CopyFrom(request)
                else:
                    log.regress_log.request.CopyFrom(request)
                logs.append(log)
    return logs


def write_warmup(export_dir: str, schema: Schema) -> int:
    """Writes the warmup file from the export's golden set; returns how many records (0, and
    no file, when the export carries no golden set)."""
    import tensorflow as tf
    golden = os.path.join(export_dir, EXPORT_GOLDEN)
    if not tf.io.gfile.exists(golden):
        return 0
    logs = warmup_logs(read_examples(golden), schema, signature_methods(export_dir))
    if not logs:
        return 0
    with tf.io.TFRecordWriter(os.path.join(export_dir, WARMUP_ASSET)) as w:
        for log in logs:
            w.write(log.SerializeToString())
    return len(logs)


def read_warmup(path: str) -> list:
    """The PredictionLog records of a warmup file."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2
    out = []
    for record in tf.data.TFRecordDataset(path):
        log = prediction_log_pb2.PredictionLog()
        log.ParseFromString(record.numpy())
        out.append(log)
    return out
