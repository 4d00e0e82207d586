"""Batch prediction outputs, column-wise: what the batch job writes per batch.

Classes here live in an importable module (not a job's __main__) because runners pickle
elements, e.g. to estimate their size.
"""
from __future__ import annotations

import json

import numpy as np

from inference import model_handler as mh

_ENCODE = json.JSONEncoder().encode
# Fields the writer emits itself: a passthrough column with one of these names overrides it.
_OUTPUT_FIELDS = frozenset(("key", "prediction", "class", "class_id", "probabilities",
                            "model_version", "label"))


class PredictionBlock:
    """The predictions of one batch, column-wise: keys, the model's outputs (numpy arrays),
    the version, passthrough dicts and labels (or None). Written as JSON lines / CSV without
    building a dict per row; `records()` gives the dicts where a sink needs them."""

    __slots__ = ("keys", "outputs", "version", "extras", "labels")

    def __init__(self, keys, outputs, version, extras=None, labels=None):
        self.keys, self.outputs, self.version = keys, outputs, version
        self.extras, self.labels = extras, labels

    def __len__(self):
        return len(self.keys)

    def records(self) -> list:
        out = []
        extras = self.extras or [{}] * len(self.keys)
        labels = self.labels
        for i, (key, pred) in enumerate(zip(self.keys, mh.output_records(self.outputs))):
            rec = {"key": key}
            rec.update(pred)
            rec["model_version"] = self.version
            rec.update(extras[i])
            if labels is not None:
                rec["label"] = labels[i]
            out.append(rec)
        return out

    def json_lines(self) -> str:
        """The lines json.dumps(record) gives for each of records(), built column-wise."""
        if self.extras and any(_OUTPUT_FIELDS & e.keys() for e in self.extras):
            return "\n".join(json.dumps(r) for r in self.records())  # passthrough overrides
        cols = [[f'{{"key": {k}' for k in map(json.encoder.encode_basestring_ascii, self.keys)]]
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

