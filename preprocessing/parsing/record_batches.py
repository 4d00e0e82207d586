"""Rows and columns as Arrow RecordBatches, the form tf.transform's TFXIO path reads (the fast
one): the raw feature spec, the Arrow schema and the TensorAdapterConfig of a Schema."""
from __future__ import annotations

from typing import Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa

from preprocessing.contract.schema import Schema
from preprocessing.contract.values import DTYPE_TABLE


def raw_feature_spec(schema: Schema, columns=None) -> dict:
    """The raw tf.Example feature spec, keyed by the user's column names."""
    import tensorflow as tf
    return {c.name: tf.io.FixedLenFeature([], tf.as_dtype(DTYPE_TABLE[c.type].tf))
            for c in (columns if columns is not None else schema.columns)}


def arrow_schema(schema: Schema) -> pa.Schema:
    """The RecordBatches' schema: one column per schema column, under its TensorFlow name
    (tf.transform's input names)."""
    return pa.schema([pa.field(schema.tf_name(c.name), pa.large_list(DTYPE_TABLE[c.type].arrow))
                      for c in schema.columns])


def rows_to_record_batch(rows: Sequence[tuple], schema: Schema) -> pa.RecordBatch:
    """Packs parsed rows (one value per column each) into a TFXIO-style RecordBatch
    (see columns_to_record_batch)."""
    columns = [list(c) for c in zip(*rows)] if rows else [[] for _ in schema.columns]
    return columns_to_record_batch(columns, schema)


def columns_to_record_batch(columns, schema: Schema, mask=None) -> pa.RecordBatch:
    """Packs column-wise values (a numpy array, an Arrow string array or a list per schema
    column, as fast_csv.parse_block gives them) of the rows where `mask` (a boolean array;
    None: all) is set into a TFXIO-style RecordBatch; arrays without a Python object per value.

    Every value is a one-element list, the layout tf.Example-derived batches have, so the
    tensor representations below read each column as a dense [batch] tensor.
    """
    arrays, n = [], None
    for c, values in zip(schema.columns, columns):
        if isinstance(values, np.ndarray):
            picked = values[mask] if mask is not None else values
            flat = pa.array(picked.astype(DTYPE_TABLE[c.type].stored, copy=False))
        elif isinstance(values, pa.Array) and c.type == "string":
            picked = values.filter(pa.array(mask)) if mask is not None else values
            flat = picked.cast(pa.large_binary())
        else:  # a list (parsed rows, values with None, constants): one by one
            picked = [v for v, m in zip(values, mask) if m] if mask is not None else list(values)
            if c.type == "string":
                flat = pa.array([v if isinstance(v, bytes) else v.encode("utf-8")
                                 for v in picked], type=pa.large_binary())
            else:
                flat = pa.array(np.asarray(picked, dtype=DTYPE_TABLE[c.type].stored))
        n = len(flat)
        arrays.append(flat)
    offsets = pa.array(np.arange((n or 0) + 1, dtype=np.int64))
    return pa.RecordBatch.from_arrays([pa.LargeListArray.from_arrays(offsets, a) for a in arrays],
                                      schema=arrow_schema(schema))


def tensor_adapter_config(schema: Schema):
    """The TensorAdapterConfig that tells tf.transform how to read our RecordBatches."""
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx_bsl.tfxio import tensor_adapter

    reps = {}
    for c in schema.columns:
        name = schema.tf_name(c.name)
        rep = schema_pb2.TensorRepresentation()
        rep.dense_tensor.column_name = name
        # Shape [] per example: a scalar column, as FixedLenFeature([]) reads.
        rep.dense_tensor.shape.CopyFrom(schema_pb2.FixedShape())
        reps[name] = rep
    return tensor_adapter.TensorAdapterConfig(arrow_schema(schema), reps)


class RecordBatchCoder(beam.coders.Coder):
    """Arrow RecordBatches between stages, in Arrow's IPC stream format.

    Without it a RecordBatch PCollection is pickled, and Beam sizes the elements it samples
    for its metrics by encoding them whole, which on a wide table is a large share of the
    job (docs/performance.md). The size estimate here is the batch's buffer size, read
    without encoding. Not deterministic (the Coder default): batches are never keys."""

    def encode(self, batch: pa.RecordBatch) -> bytes:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        return sink.getvalue().to_pybytes()

    def decode(self, encoded: bytes) -> pa.RecordBatch:
        return pa.ipc.open_stream(pa.py_buffer(encoded)).read_next_batch()

    def estimate_size(self, batch: pa.RecordBatch) -> int:
        return batch.nbytes

    def to_type_hint(self):
        return pa.RecordBatch


beam.coders.registry.register_coder(pa.RecordBatch, RecordBatchCoder)
