"""Shadow models: a second model (`--shadow_model_dir`) scores the same rows as the serving
one; its outputs never reach the prediction sinks. What comes out is a comparison: rows
compared, the mean absolute difference (regression) or the class-flip rate
(classification), and each model's metric where the rows carry labels. Batch prediction
writes one per run (summary.json's `shadow`), streaming one per monitoring window.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Optional, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.transforms import window
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from inference.model.model_handler import predict_block
from inference.model.serving_model import _Version
from preprocessing.accounting.rejects import Reject
from preprocessing.reference.evaluation import EvalSums


@dataclasses.dataclass
class ShadowSums:
    """Sums that merge: rows the serving model scored, how many of them the shadow scored
    too (`compared`) or rejected, |difference| or class flips over the compared rows, and
    each model's eval sums over the compared rows that have a label."""
    rows: int = 0
    compared: int = 0
    shadow_rejected: int = 0
    abs_diff: float = 0.0
    flips: int = 0
    serving: EvalSums = dataclasses.field(default_factory=EvalSums)
    shadow: EvalSums = dataclasses.field(default_factory=EvalSums)

    def merge(self, other: "ShadowSums") -> "ShadowSums":
        return ShadowSums(self.rows + other.rows, self.compared + other.compared,
                          self.shadow_rejected + other.shadow_rejected,
                          self.abs_diff + other.abs_diff, self.flips + other.flips,
                          self.serving.merge(other.serving), self.shadow.merge(other.shadow))

    def record(self, task: str, serving_version: Optional[str] = None,
               shadow_version: Optional[str] = None) -> dict:
        out = {"event": "shadow_comparison"}
        out.update((k, v) for k, v in (("serving_version", serving_version),
                                       ("shadow_version", shadow_version)) if v is not None)
        out.update(rows=self.rows, compared=self.compared,
                   shadow_rejected=self.shadow_rejected)
        if task == "regression":
            out["mean_abs_diff"] = self.abs_diff / self.compared if self.compared else None
        else:
            out["class_flip_rate"] = self.flips / self.compared if self.compared else None
        if self.serving.n:
            out["serving_metrics"] = self.serving.metrics(task)
            out["shadow_metrics"] = self.shadow.metrics(task)
        return out


def compare(task: str, serving: dict, shadow: dict, labels: Optional[Sequence] = None,
            rows: Optional[int] = None, shadow_rejected: int = 0) -> ShadowSums:
    """Sums over rows both models scored: `serving` and `shadow` are column-wise outputs
    (the signature's arrays) of the same rows in the same order; `labels` align with them
    (None where a row has none)."""
    if task == "regression":
        a = np.asarray(serving["predictions"], np.float64)
        b = np.asarray(shadow["predictions"], np.float64)
        sums = ShadowSums(abs_diff=float(np.abs(a - b).sum()))
    else:
        a, b = np.asarray(serving["classes"]), np.asarray(shadow["classes"])
        sums = ShadowSums(flips=int((a != b).sum()))
    sums.compared = len(a)
    sums.rows = len(a) + shadow_rejected if rows is None else rows
    sums.shadow_rejected = shadow_rejected
    if labels is not None:
        sums.serving.add_outputs(task, serving, labels)
        sums.shadow.add_outputs(task, shadow, labels)
    return sums


def aligned(serving_index: Sequence[int], serving_out: dict, shadow_index: Sequence[int],
            shadow_out: dict) -> tuple:
    """Both models' outputs restricted to the rows both scored (by row position), in order,
    and those positions."""
    common = sorted(set(serving_index) & set(shadow_index))
    s_pos = {r: i for i, r in enumerate(serving_index)}
    h_pos = {r: i for i, r in enumerate(shadow_index)}
    take_s = [s_pos[r] for r in common]
    take_h = [h_pos[r] for r in common]
    return ({k: v[take_s] for k, v in serving_out.items()},
            {k: v[take_h] for k, v in shadow_out.items()}, common)


class CombineShadow(beam.CombineFn):
    """ShadowSums -> one comparison record."""

    def __init__(self, task: str, serving_version: Optional[str] = None,
                 shadow_version: Optional[str] = None):
        self.task, self.serving_version, self.shadow_version = (task, serving_version,
                                                                shadow_version)

    def create_accumulator(self):
        return ShadowSums()

    def add_input(self, acc, sums):
        return acc.merge(sums)

    def merge_accumulators(self, accs):
        out = ShadowSums()
        for a in accs:
            out = out.merge(a)
        return out

    def extract_output(self, acc):
        return acc.record(self.task, self.serving_version, self.shadow_version)


_LOADED: dict = {}  # shadow export path -> its loaded version, for this process
_LOAD_LOCK = threading.Lock()


def load_shadow(path: str):
    """The shadow version at `path`, loaded once per process: the DirectRunner makes a new
    DoFn and calls its setup() for every bundle (it reloaded the model each time: +500 ms per
    bundle measured at 100 msg/s)."""
    with _LOAD_LOCK:
        if path not in _LOADED:
            _LOADED[path] = _Version(path)
        return _LOADED[path]


class ShadowScore(beam.DoFn):
    """Batch jobs: a PredictionResult over a RowBatch -> ShadowSums; the shadow model
    (loaded once per DoFn instance, in setup) scores the same rows."""

    def __init__(self, shadow_path: str, task: str, label: Optional[str],
                 rows_per_call: Optional[int] = None):
        self.shadow_path, self.task, self.label = shadow_path, task, label
        self.rows_per_call = rows_per_call

    def setup(self):
        self.model = load_shadow(self.shadow_path)

    def process(self, result):
        rb, block = result.example, result.inference
        if not block.index:
            return
        other = predict_block(self.model, rb.names, rb.columns, len(rb), self.rows_per_call)
        serving, shadow, common = aligned(block.index, block.outputs, other.index,
                                          other.outputs)
        labels = None
        if self.label and self.label in rb.names:
            column = rb.column(self.label)
            values = column.to_pylist() if hasattr(column, "to_pylist") else list(column)
            labels = [values[r] for r in common]
        yield compare(self.task, serving, shadow, labels, rows=len(block.index),
                      shadow_rejected=len(block.index) - len(common))


def columnar(task: str, records: Sequence[dict]) -> dict:
    """Streaming's per-row output dicts as the signature's column-wise arrays."""
    if task == "regression":
        return {"predictions": np.array([r["prediction"] for r in records], np.float64)}
    return {"classes": np.array([r["class"].encode("utf-8") for r in records], object)}


class ShadowScoreStream(beam.DoFn):
    """Streaming: (MessageMeta, PredictionResult) -> ShadowSums per monitoring window of
    event time, scored a bundle (or FLUSH_ROWS rows) at a time."""
    FLUSH_ROWS = 1024

    def __init__(self, shadow_path: str, task: str, window_secs: float,
                 label: Optional[str] = None):
        self.shadow_path, self.task, self.label = shadow_path, task, label
        self.window_secs = window_secs

    def setup(self):
        self.model = load_shadow(self.shadow_path)

    def start_bundle(self):
        self._rows = []

    def process(self, keyed):

        meta, result = keyed
        if isinstance(result.inference, Reject):
            return
        self._rows.append((meta.event_time, result.example, result.inference))
        if len(self._rows) >= self.FLUSH_ROWS:
            for ts, sums in self._flush():
                yield window.TimestampedValue(sums, ts)

    def finish_bundle(self):
        for ts, sums in self._flush():
            yield WindowedValue(sums, ts, [GlobalWindow()])

    def _flush(self) -> list:
        rows, self._rows = self._rows, []
        by_window: dict = {}
        for ts, row, out in rows:
            by_window.setdefault(int(ts // self.window_secs), []).append((ts, row, out))
        result = []
        for group in by_window.values():
            names = tuple(self.model.columns.values())
            columns = [[row.get(n) for _, row, _ in group] for n in names]
            other = predict_block(self.model, names, columns, len(group))
            serving = columnar(self.task, [out for _, _, out in group])
            index = list(range(len(group)))
            serving, shadow, common = aligned(index, serving, other.index, other.outputs)
            labels = ([group[r][1].get(self.label) for r in common]
                      if self.label and any(self.label in g[1] for g in group) else None)
            result.append((group[0][0], compare(self.task, serving, shadow, labels,
                                                rows=len(group),
                                                shadow_rejected=len(group) - len(common))))
        return result
