"""Predictions, column-wise: what the model gives for a batch and what the batch job writes.

Classes here live in an importable module (not a job's __main__) because runners pickle
elements, e.g. to estimate their size.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_ENCODE = json.JSONEncoder().encode
# Fields the writer emits itself: a passthrough column with one of these names overrides it.
_OUTPUT_FIELDS = frozenset(("key", "prediction", "class", "class_id", "probabilities",
                            "model_version", "label"))


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One row's prediction as every job writes it: the row's key (under `key_field`: "key"
    in batch jobs, "id" for a streamed message), the model's outputs ({prediction}, or
    {class, class_id, probabilities}), the version that scored it, then what the row
    carries (batch: passthrough columns, the label; streaming: message id, latency, event
    time). Serialised only at the sinks (to_dict: the JSON object written)."""
    key: Any
    outputs: Mapping[str, Any]
    model_version: Any
    extras: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    key_field: str = "key"

    def to_dict(self) -> dict:
        out = {self.key_field: self.key}
        out.update(self.outputs)
        out["model_version"] = self.model_version
        out.update(self.extras)
        return out

    def get(self, field: str, default=None):
        """A field of to_dict's object (a sink's attribute, the message to acknowledge)."""
        return self.to_dict().get(field, default)


class PredictionBlock:
    """The predictions of one batch, column-wise: the one predictions type.

    The model handler makes it with the model's `outputs` (numpy arrays keyed by the
    signature's output names) for the batch's rows `index`, the `version` that scored them,
    and (position, Reject) `rejections` for the rows it could not score. `for_rows` then
    attaches what the rows carry (keys, passthrough dicts, labels) for the scored rows, and
    the block is written as JSON lines / CSV without a dict per row; `records()` gives the
    dicts where a sink needs them."""

    __slots__ = ("keys", "outputs", "version", "extras", "labels", "index", "rejections",
                 "slices")

    def __init__(self, keys, outputs, version, extras=None, labels=None, index=None,
                 rejections=(), slices=None):
        self.keys, self.outputs, self.version = keys, outputs, version
        self.extras, self.labels = extras, labels
        self.slices = slices  # column -> each row's slice (with --slice_by and labels)
        self.index = list(range(len(keys))) if index is None else index
        self.rejections = list(rejections)

    def __len__(self):
        return len(self.index)

    def take(self, values):
        """The scored rows' entries of a batch-aligned column (list, numpy or Arrow)."""
        if len(self.index) == len(values):
            return values
        if isinstance(values, np.ndarray):
            return values[self.index]
        if isinstance(values, pa.Array):
            return values.take(pa.array(self.index, pa.int64()))
        return [values[i] for i in self.index]

    def for_rows(self, keys, extras=None, labels=None) -> "PredictionBlock":
        """This block's predictions with the rows' keys, passthrough and labels (each
        aligned with the batch: only the scored rows' entries are kept)."""
        return PredictionBlock(self.take(keys), self.outputs, self.version,
                               None if extras is None else self.take(extras),
                               None if labels is None else self.take(labels))

    def split(self, sizes) -> list:
        """The blocks of consecutive batches of `sizes` rows this block scored as one."""
        index = np.asarray(self.index, dtype=np.int64)
        out, start = [], 0
        for n in sizes:
            picked = (index >= start) & (index < start + n)
            out.append(PredictionBlock(
                None, {k: v[picked] for k, v in self.outputs.items()}, self.version,
                index=(index[picked] - start).tolist(),
                rejections=[(i - start, r) for i, r in self.rejections
                            if start <= i < start + n]))
            start += n
        return out

    def output_rows(self) -> list:
        """One output dict per scored row (the form the streaming job emits)."""
        return output_records(self.outputs)

    def key_list(self) -> list:
        return self.keys.to_pylist() if isinstance(self.keys, pa.Array) else self.keys

    def predictions(self) -> list:
        """One Prediction per scored row."""
        out = []
        extras = self.extras or [{}] * len(self.keys)
        labels = self.labels
        for i, (key, pred) in enumerate(zip(self.key_list(), output_records(self.outputs))):
            carried = dict(extras[i])
            if labels is not None:
                carried["label"] = labels[i]
            out.append(Prediction(key, pred, self.version, carried))
        return out

    def records(self) -> list:
        """predictions() as the dicts the sinks write."""
        return [p.to_dict() for p in self.predictions()]

    def json_bytes(self) -> bytes:
        """json_lines() as UTF-8 (what the text sink writes): Arrow's text as it is."""
        if self._arrow_ok():
            return self._arrow_json_lines()
        return self.json_lines().encode("utf-8")

    def _arrow_ok(self) -> bool:
        return (isinstance(self.keys, pa.Array) and not self.extras and self.labels is None
                and "predictions" in self.outputs and len(self.keys) > 0)

    def json_lines(self) -> str:
        """The lines json.dumps(record) gives for each of records(), built column-wise."""
        if self.extras and any(_OUTPUT_FIELDS & e.keys() for e in self.extras):
            return "\n".join(json.dumps(r) for r in self.records())  # passthrough overrides
        if self._arrow_ok():
            return self._arrow_json_lines().decode("utf-8")
        cols = [[f'{{"key": {k}' for k in
                 map(json.encoder.encode_basestring_ascii, self.key_list())]]
        out = self.outputs
        if "predictions" in out:
            preds = out["predictions"].tolist()
            fmt = float.__repr__ if np.isfinite(out["predictions"]).all() else _ENCODE
            cols.append([f', "prediction": {p}' for p in map(fmt, preds)])
        else:
            classes = [c.decode("utf-8") for c in out["classes"].tolist()]
            cols.append([f', "class": {c}, "class_id": {i}, "probabilities": {p}' for c, i, p in
                         zip(map(_ENCODE, classes), out["class_ids"].tolist(),
                             map(_ENCODE, out["probabilities"].tolist()))])
        tail = f', "model_version": {_ENCODE(self.version)}'
        if self.extras:
            cols.append([tail + (", " + _ENCODE(e)[1:-1] if e else "") for e in self.extras])
        else:
            cols.append([tail] * len(self.keys))
        if self.labels is not None:
            cols.append([f', "label": {v}}}' for v in map(_ENCODE, self.labels)])
        else:
            cols.append(["}"] * len(self.keys))
        return "\n".join(map("".join, zip(*cols)))


    def _arrow_json_lines(self) -> bytes:
        """json_lines for a regression block with Arrow keys, built by Arrow's string kernels.

        Where Arrow's text is not json.dumps's (a key needing escapes; a float Python writes
        in exponent form, as an integer-valued `x.0`, or as NaN/Infinity) those values are
        written by Python."""
        keys = self.keys
        if plain_keys(keys):
            head, key_json = '{"key": "', [keys, '", "prediction": ']
        else:
            head, key_json = '{"key": ', [pa.array(map(json.encoder.encode_basestring_ascii,
                                                       keys.to_pylist()), pa.string()),
                                          ', "prediction": ']
        preds = np.asarray(self.outputs["predictions"], dtype=np.float64).reshape(-1)
        size = np.abs(preds)
        plain = (size >= 1e-4) & (size < 1e16) & (preds != np.floor(preds))  # NaN: False
        if plain.all():
            pred_json = pc.cast(pa.array(preds), pa.string())
        else:
            pred_json = pa.array(map(_ENCODE, preds.tolist()), pa.string())
        # Each line ends in "\n": the lines' data buffer is then the whole text, as it is.
        lines = pc.binary_join_element_wise(
            head, *key_json, pred_json, f', "model_version": {_ENCODE(self.version)}}}\n', "")
        data, start, end = _text_range(lines)
        return data.slice(start, end - start - 1).to_pybytes()  # the sink adds the last "\n"


def output_records(outputs: dict) -> list:
    """Column-wise outputs -> one dict per row: {prediction} or {class, class_id, probabilities}."""
    if not outputs:
        return []
    if "predictions" in outputs:
        return [{"prediction": p} for p in outputs["predictions"].tolist()]
    classes = [c.decode("utf-8") for c in outputs["classes"].tolist()]
    return [{"class": c, "class_id": i, "probabilities": p} for c, i, p in
            zip(classes, outputs["class_ids"].tolist(), outputs["probabilities"].tolist())]


def _text_range(values: pa.Array):
    """A string array's data buffer and the byte range its values (all of them, in order)
    take in it: they lie there back to back."""
    _, offsets, data = values.buffers()
    offsets = np.frombuffer(offsets, np.int64 if pa.types.is_large_string(values.type)
                            else np.int32)[values.offset:values.offset + len(values) + 1]
    return data, int(offsets[0]), int(offsets[-1])


def plain_keys(keys: pa.Array) -> bool:
    """Whether json.dumps writes every key as it is: printable ASCII but '"' and '\\'
    (one vectorised pass over the keys' bytes)."""
    if keys.null_count:
        return False
    data, start, end = _text_range(keys)
    if end == start:  # only empty keys (Arrow may then have no data buffer)
        return True
    b = np.frombuffer(data, np.uint8)[start:end]
    return bool(((b >= 0x20) & (b <= 0x7E) & (b != 0x22) & (b != 0x5C)).all())

