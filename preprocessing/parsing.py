"""Raw record parsing against the schema: pure functions shared by every job.

A CSV record becomes a tuple of typed values in `schema.columns` order, or a `RowError`
with a reason code (used for counters) and a detail (for the dead-letter record). Valid rows
are packed column-wise into Arrow RecordBatches, the TFXIO format tf.transform runs fastest on.
"""
from __future__ import annotations

import csv
import math
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

from preprocessing.schema import Schema, coerce_value, looks_like_datetime

REASONS = (
    "wrong_column_count", "missing_value", "unparsable_number", "non_finite_number",
    "unparsable_datetime", "missing_column", "malformed_csv", "invalid_json", "bad_example",
)


class RowError(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def iter_csv_records(lines: Iterable[str], first_line_no: int = 1) -> Iterator[Tuple[int, str]]:
    """Joins physical lines into CSV records (a quoted field may span lines).

    Yields (line number where the record starts, record text without its line ending).
    An unterminated quote at end of input yields the remainder as one record; the parser
    then rejects it as malformed rather than swallowing the rest of the file.
    """
    buf: List[str] = []
    quotes = 0
    start = first_line_no
    line_no = first_line_no - 1
    for line_no, line in enumerate(lines, first_line_no):
        if not buf:
            start = line_no
        buf.append(line)
        quotes += line.count('"')
        if quotes % 2 == 0:
            text = "".join(buf).rstrip("\r\n")
            buf, quotes = [], 0
            if text:
                yield start, text
    if buf:
        yield start, "".join(buf).rstrip("\r\n")


def split_fields(records: Sequence[str], delimiter: str = ",") -> List[Optional[List[str]]]:
    """CSV-parses record texts in one call (fast path); None marks a malformed record."""
    try:
        out = list(csv.reader(records, delimiter=delimiter, strict=True))
        if len(out) == len(records):
            return out
    except csv.Error:
        pass
    result: List[Optional[List[str]]] = []
    for r in records:
        try:
            parsed = list(csv.reader([r], delimiter=delimiter, strict=True))
            result.append(parsed[0] if len(parsed) == 1 else None)
        except csv.Error:
            result.append(None)
    return result


def _is_non_finite(text: str) -> bool:
    try:
        return not math.isfinite(float(text))
    except ValueError:
        return False


class RowParser:
    """Parses field lists with a given header into typed tuples in schema column order."""

    def __init__(self, schema: Schema, header: Sequence[str], optional: Sequence[str] = ()):
        """`optional` columns may be absent or empty (value None), e.g. the label at serving."""
        self.schema = schema
        self.header = [h.strip() for h in header]
        positions = {h: i for i, h in enumerate(self.header)}
        self.missing_columns = [c.name for c in schema.columns
                                if c.name not in positions and c.required
                                and c.name not in optional]
        self._plan = []
        for c in schema.columns:
            self._plan.append((
                c.name, positions.get(c.name), c.type,
                None if c.default is None else coerce_value(str(c.default), c.type),
                c.transform == "datetime", c.name in optional,
            ))
        self._width = len(self.header)

    def parse(self, fields: Optional[Sequence[str]]) -> tuple:
        if fields is None:
            raise RowError("malformed_csv", "the record is not valid CSV (unbalanced quotes?)")
        if self.missing_columns:
            raise RowError("missing_column",
                           f"the file's header lacks required column(s) {self.missing_columns}")
        if len(fields) != self._width:
            raise RowError("wrong_column_count",
                           f"expected {self._width} fields, found {len(fields)}")
        values = []
        for name, pos, dtype, default, is_dt, optional in self._plan:
            text = fields[pos].strip() if pos is not None else ""
            if text == "":
                if default is None and optional:
                    values.append(None)
                    continue
                if default is None:
                    raise RowError("missing_value", f"column '{name}' is empty and has no default")
                values.append(default)
                continue
            if is_dt and not looks_like_datetime(text):
                raise RowError("unparsable_datetime",
                               f"column '{name}': {text!r} is not YYYY-MM-DD HH:MM:SS")
            try:
                values.append(coerce_value(text, dtype))
            except ValueError:
                reason = "non_finite_number" if _is_non_finite(text) else "unparsable_number"
                raise RowError(reason, f"column '{name}': cannot read {text!r} as {dtype}") from None
        return tuple(values)

    def parse_dict(self, obj: dict) -> tuple:
        """Parses a JSON-style mapping (values may already be typed)."""
        fields = []
        for h in self.header:
            v = obj.get(h)
            fields.append("" if v is None else str(v))
        return self.parse(fields)


def example_to_fields(serialized: bytes, header: Sequence[str]) -> List[str]:
    """A serialized raw tf.Example as text fields in `header` order ('' where absent).

    Going through text keeps one validation path (RowParser) for CSV, JSON and tf.Example.
    """
    from tensorflow.core.example import example_pb2
    try:
        ex = example_pb2.Example.FromString(serialized)
    except Exception as e:  # protobuf's DecodeError: not a tf.Example
        raise RowError("bad_example", f"not a serialized tf.Example ({type(e).__name__})") from None
    feats = ex.features.feature
    out = []
    for name in header:
        f = feats.get(name)
        if f is None:
            out.append("")
            continue
        kind = f.WhichOneof("kind")
        values = getattr(f, kind).value if kind else []
        if len(values) == 0:
            out.append("")
        elif len(values) > 1:
            raise RowError("bad_example", f"feature '{name}' has {len(values)} values, expected 1")
        else:
            v = values[0]
            out.append(v.decode("utf-8", errors="replace") if isinstance(v, bytes) else repr(v)
                       if isinstance(v, float) else str(v))
    return out


# ---- Arrow / TFXIO ---------------------------------------------------------------------------
_ARROW_TYPES = {"float": pa.float32(), "int": pa.int64(), "string": pa.large_binary()}
_NUMPY_TYPES = {"float": np.float32, "int": np.int64}


def raw_feature_spec(schema: Schema, columns=None) -> dict:
    import tensorflow as tf
    dtypes = {"float": tf.float32, "int": tf.int64, "string": tf.string}
    return {c.name: tf.io.FixedLenFeature([], dtypes[c.type])
            for c in (columns if columns is not None else schema.columns)}


def arrow_schema(schema: Schema) -> pa.Schema:
    return pa.schema([pa.field(c.name, pa.large_list(_ARROW_TYPES[c.type]))
                      for c in schema.columns])


def rows_to_record_batch(rows: Sequence[tuple], schema: Schema) -> pa.RecordBatch:
    """Packs parsed rows (one value per column each) into a TFXIO-style RecordBatch.

    Every value is a one-element list, the layout tf.Example-derived batches have, so the
    tensor representations below read each column as a dense [batch] tensor.
    """
    n = len(rows)
    offsets = pa.array(np.arange(n + 1, dtype=np.int64))
    arrays = []
    columns = list(zip(*rows)) if n else [() for _ in schema.columns]
    for c, values in zip(schema.columns, columns):
        if c.type == "string":
            flat = pa.array([v if isinstance(v, bytes) else v.encode("utf-8") for v in values],
                            type=pa.large_binary())
        else:
            flat = pa.array(np.asarray(values, dtype=_NUMPY_TYPES[c.type]))
        arrays.append(pa.LargeListArray.from_arrays(offsets, flat))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(schema))


def tensor_adapter_config(schema: Schema):
    """The TensorAdapterConfig that tells tf.transform how to read our RecordBatches."""
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx_bsl.tfxio import tensor_adapter

    reps = {}
    for c in schema.columns:
        rep = schema_pb2.TensorRepresentation()
        rep.dense_tensor.column_name = c.name
        # Shape [] per example: a scalar column, as FixedLenFeature([]) reads.
        rep.dense_tensor.shape.CopyFrom(schema_pb2.FixedShape())
        reps[c.name] = rep
    return tensor_adapter.TensorAdapterConfig(arrow_schema(schema), reps)
