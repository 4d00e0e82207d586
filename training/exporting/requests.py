"""What TF Serving's requests carry into an export's signatures: the method names its
Classify and Regress APIs check, and how a raw tf.Example is parsed into the raw columns
(`serving_default` parses so; warmup records and optimised versions build the same inputs)."""
from __future__ import annotations

import tensorflow as tf

from preprocessing.contract.schema import Schema
from preprocessing.contract.values import DTYPE_TABLE
from preprocessing.parsing.record_batches import raw_feature_spec

PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"


def example_spec(schema: Schema) -> dict:
    """How `serving_default` parses a raw tf.Example. tf.Examples carry the user's column
    names; predict_raw and the transform take the TensorFlow names (schema.tf_name)."""
    cols = schema.serving_columns()
    spec = raw_feature_spec(schema, cols)
    for c in cols:
        if c.default is not None:  # optional columns may be absent from a tf.Example
            spec[c.name] = tf.io.FixedLenFeature([], tf.as_dtype(DTYPE_TABLE[c.type].tf),
                                                 default_value=c.typed_default())
    return spec


def predict_raw_parsing(schema: Schema) -> tuple:
    """(tf.Example spec, {example key: predict_raw input}): how `serving_default` turns
    tf.Examples into predict_raw's inputs (an image export: the image column's bytes as
    `image_bytes`)."""
    image = next((c.name for c in schema.columns if c.transform == "image"), None)
    if image:
        return {image: tf.io.FixedLenFeature([], tf.string)}, {image: "image_bytes"}
    return example_spec(schema), {c.name: schema.tf_name(c.name)
                                  for c in schema.serving_columns()}
