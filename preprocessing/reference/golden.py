"""The golden set: labelled raw rows, as serialized raw tf.Examples (the user's column names,
label included), that a new model version must predict before it serves (inference/model/gate.py).

Preprocess writes a sample of the eval split to OUTPUT/golden/golden.tfrecord; training
copies it next to each export (EXPORT/assets.extra/golden.tfrecord). A tf.Example is the
form every export's `serving_default` signature parses, tabular and image models alike, and
a signature ignores features it does not use (the label, a column a newer schema added).
"""
from __future__ import annotations

import gzip
import io
import math
import os
import tempfile
from typing import List, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from preprocessing.contract.schema import Schema
from preprocessing.contract.values import DTYPE_TABLE

GOLDEN_DIR = "golden"
GOLDEN_FILE = "golden.tfrecord"
EXPORT_GOLDEN = os.path.join("assets.extra", GOLDEN_FILE)
# The same kind of sample from the train split: representative rows that training.optimize
# chooses int8 quantisation ranges on (never the golden set, which judges the result).
CALIBRATION_FILE = "calibration.tfrecord"
EXPORT_CALIBRATION = os.path.join("assets.extra", CALIBRATION_FILE)
DEFAULT_ROWS = 500
# Written into an export whose model learned its own golden set (training's --refit_on_eval
# on a golden set under golden_score.NOISY_ROWS): the gate then compares no metric on it.
EXPORT_GOLDEN_LEARNED = os.path.join("assets.extra", "golden_learned.json")
# What a golden set may hold: it is read whole, on every worker, before each model swap.
MAX_ROWS = 20_000
MAX_BYTES = 64 << 20


class GoldenSetError(ValueError):
    """A golden set that cannot be read, or is too large: one line saying which."""


def read_bounded(path: str) -> bytes:
    """A golden or calibration file's bytes, at most MAX_BYTES."""
    try:
        size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    except Exception as e:
        raise GoldenSetError(f"cannot read the golden set {path}: "
                             f"{str(e).splitlines()[0][:200]}") from None
    if size > MAX_BYTES:
        raise GoldenSetError(f"the golden set {path} has {size:,} bytes; at most "
                             f"{MAX_BYTES:,} are read")
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return f.read(MAX_BYTES + 1)


def tfrecord_examples(data: bytes, path: str) -> list:
    """The records of a TFRecord file's bytes (gzip or not; at most MAX_ROWS + 1)."""

    import tensorflow as tf
    if data[:2] == b"\x1f\x8b":  # gzip, whatever the name says; decompressed size bounded
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as g:
            data = g.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise GoldenSetError(f"the golden set {path} decompresses past "
                                 f"{MAX_BYTES:,} bytes")
    with tempfile.NamedTemporaryFile(suffix=".tfrecord") as tmp:
        tmp.write(data)
        tmp.flush()
        try:
            return [r.numpy() for r in
                    tf.data.TFRecordDataset(tmp.name).take(MAX_ROWS + 1)]
        except Exception as e:
            raise GoldenSetError(f"the golden set {path} is not a TFRecord file of "
                                 f"tf.Examples: {str(e).splitlines()[0][:200]}") from None


def read_examples(path: str) -> list:
    """A TFRecord file of serialized tf.Examples, read within MAX_BYTES and MAX_ROWS."""
    examples = tfrecord_examples(read_bounded(path), path)
    if len(examples) > MAX_ROWS:
        raise GoldenSetError(f"{path} has more than {MAX_ROWS:,} rows")
    return examples


def example_bytes(schema: Schema, values: Sequence) -> bytes:
    """One row of typed raw values (schema.columns order; None: absent) as a tf.Example."""
    import tensorflow as tf
    feats = {}
    for c, v in zip(schema.columns, values):
        if v is None:
            continue
        kind = DTYPE_TABLE[c.type].tf
        if kind == "string":
            feats[c.name] = tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[v if isinstance(v, bytes) else str(v).encode("utf-8")]))
        elif kind == "int64":
            feats[c.name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v)]))
        else:
            feats[c.name] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(v)]))
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()


def record_batch_examples(rb: pa.RecordBatch, schema: Schema, rows: Sequence[int]) -> List[bytes]:
    """Rows `rows` of a raw RecordBatch (record_batches' layout: one-value lists under
    TensorFlow names) as tf.Examples."""
    picked = rb.take(pa.array(list(rows), pa.int64()))
    columns = [picked.column(schema.tf_name(c.name)).flatten().to_pylist()
               for c in schema.columns]
    return [example_bytes(schema, values) for values in zip(*columns)]


def spread(n: int, k: int) -> List[int]:
    """At most k row indices spread evenly over n rows (a file sorted by time still gives
    rows from its whole span)."""
    if n <= k:
        return list(range(n))
    return np.linspace(0, n - 1, k).round().astype(int).tolist()


class SampleGolden(beam.PTransform):
    """Raw RecordBatches of one split -> OUTPUT/golden/<file_name>: a uniform sample of at
    most `rows` rows (Beam's reservoir sample over a bounded pick from each batch)."""

    def __init__(self, schema: Schema, output: str, rows: int = DEFAULT_ROWS,
                 file_name: str = GOLDEN_FILE):
        super().__init__()
        self.schema, self.output, self.rows, self.file_name = schema, output, rows, file_name

    def expand(self, batches):
        schema, k = self.schema, self.rows
        return (batches
                | "Pick" >> beam.FlatMap(
                    lambda rb: record_batch_examples(rb, schema, spread(rb.num_rows, k)))
                .with_output_types(bytes)  # serialised raw tf.Examples
                | "Sample" >> beam.combiners.Sample.FixedSizeGlobally(k)
                | "Rows" >> beam.FlatMap(sorted)
                | "Write" >> beam.io.WriteToTFRecord(
                    FileSystems.join(self.output, GOLDEN_DIR, self.file_name), num_shards=1,
                    shard_name_template=""))


def serve_examples(fn, examples: Sequence[bytes], chunk_rows: int = 1024) -> dict:
    """A serving_default signature's outputs over `examples`, called `chunk_rows` at a time,
    as numpy arrays aligned with them."""
    import tensorflow as tf
    parts = [{k: v.numpy() for k, v in fn(examples=tf.constant(
        list(examples[i:i + chunk_rows]))).items()} for i in range(0, len(examples), chunk_rows)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def example_values(examples: list, schema: Schema, column: str,
                   chunk_rows: int = 1024) -> list:
    """Each example's first value of `column` (float, int or str), None where it has none."""
    import tensorflow as tf
    spec_col = schema.column(column)
    spec = {column: tf.io.VarLenFeature(tf.as_dtype(DTYPE_TABLE[spec_col.type].tf))}
    out = []
    for start in range(0, len(examples), chunk_rows):
        chunk = examples[start:start + chunk_rows]
        values = tf.io.parse_example(tf.constant(chunk), spec)[column]
        first = [None] * len(chunk)
        for (row, _), v in zip(values.indices.numpy(), values.values.numpy()):
            if first[row] is None:
                first[row] = v
        out += [None if v is None else v.decode("utf-8", "replace") if isinstance(v, bytes)
                else v.item() for v in first]
    return out


def example_labels(examples: list, schema: Schema, chunk_rows: int = 1024) -> list:
    """Each example's label (its first value), None where it has none or a non-finite one."""
    out = []
    for v in example_values(examples, schema, schema.label, chunk_rows):
        if v is None:
            out.append(None)
        elif schema.task == "regression":
            out.append(float(v) if math.isfinite(float(v)) else None)
        else:
            out.append(str(v))
    return out
