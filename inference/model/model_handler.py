"""A RunInference ModelHandler for our exports, loaded with `tf.saved_model.load`.

Beam's TFModelHandler* load through Keras, and Keras 3 cannot load a TF SavedModel, so this
handler loads the export itself and calls its `predict_raw` signature (raw feature tensors in,
the tf.transform graph inside). Elements are dicts of typed raw values (from
preprocessing.parsing.row_parser); results are PredictionResults whose `inference` is a dict, or a
`Reject` (reason `model_rejected`) for a row the model could not score (a batch that fails
is retried row by row, so one bad row never takes its neighbours down with it).
"""
from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from inference.model.serving_model import (  # noqa: F401 (LOADS, _Version: read by tests)
    LOADS,
    SIGNATURE,
    _Loaded,
    _short,
    _Version,
    shared_model,
)
from inference.outputs.predictions import PredictionBlock
from preprocessing.accounting.rejects import Reject
from preprocessing.parsing import row_parser


@dataclass
class RowBatch:
    """Many rows as one RunInference element (batch jobs): per-element overhead is paid once
    per batch instead of once per row. `columns` hold the values in `names` order (numpy
    arrays or lists, as preprocessing.parsing.row_parser.ColumnBlock gives them); `keys`, `extras`
    (passthrough dicts, or None when none were asked for) and `sources` ((position, raw) for
    dead letters, all from file `path`) align with them."""
    names: tuple
    columns: list
    keys: list
    extras: Optional[list]
    path: str
    sources: list

    def __len__(self):
        return len(self.keys)

    def column(self, name: str):
        return self.columns[self.names.index(name)]


class LineSources:
    """(line number, raw line) of a CSV block's rows, made only when asked for (a dead
    letter): `rows` index the block's lines, `first` is its first line. `lines` is an Arrow
    array of them, or a callable that gives them (bytes split at newlines, re-read from
    the file): then the batch does not carry the block's text along."""

    __slots__ = ("lines", "rows", "first")

    def __init__(self, lines, rows, first: int):
        self.lines, self.rows, self.first = lines, rows, first

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return LineSources(self.lines, self.rows[i], self.first)
        row = int(self.rows[i])
        if callable(self.lines):
            # As fast_csv made its lines: split at "\n", trailing "\r"s stripped.
            return self.first + row, self.lines()[row].rstrip(b"\r").decode("utf-8")
        return self.first + row, self.lines[row].as_py()

    def keys(self, path: str, key_column=None):
        """Keys as an Arrow string array: the key column's value, or file:line where the
        row has none (or there is no key column)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        positions = self.rows + self.first
        if key_column is not None and not isinstance(key_column, pa.Array):
            return pa.array(keys_or_default(path, key_column, positions.tolist()), pa.string())
        if key_column is not None:
            missing = pc.fill_null(pc.equal(key_column, ""), True)
            if not pc.any(missing).as_py():
                return key_column
        default = pc.binary_join_element_wise(
            os.path.basename(path) + ":", pc.cast(pa.array(positions), pa.string()), "")
        return default if key_column is None else pc.if_else(missing, default, key_column)


class SavedModelHandler(ModelHandler[Any, PredictionResult, _Loaded]):
    def __init__(self, model_dir: str, min_batch_size: int = 1, max_batch_size: int = 512,
                 max_batch_duration_secs: Optional[float] = None,
                 watch_base: Optional[str] = None, refresh_secs: Optional[float] = None,
                 rows_per_call: Optional[int] = None, intra_op_threads: Optional[int] = None,
                 gate: Optional[tuple] = None):
        """`model_dir`: the export to load; `watch_base`/`refresh_secs`: hot reload (above),
        `gate`: (golden set or None, max metric regression) a newer version must pass;
        `rows_per_call`: the most rows of a RowBatch one model call takes (None: all);
        `intra_op_threads`: TensorFlow's threads per op in the worker process (None: its
        default, all cores)."""
        super().__init__()
        self._rows_per_call = rows_per_call
        self._threads = intra_op_threads
        self._path = model_dir
        self._min = min_batch_size
        self._max = max_batch_size
        self._max_duration = max_batch_duration_secs
        self._watch_base = watch_base
        self._refresh_secs = refresh_secs
        self._gate = gate

    # ---- ModelHandler API -------------------------------------------------------------------
    def load_model(self) -> _Loaded:
        if self._threads:
            import tensorflow as tf
            try:  # only before the process's first TensorFlow op
                tf.config.threading.set_intra_op_parallelism_threads(self._threads)
            except RuntimeError:
                if tf.config.threading.get_intra_op_parallelism_threads() != self._threads:
                    logging.warning("TensorFlow already started in this process: %d threads "
                                    "per op not applied", self._threads)
        if self._watch_base:  # streaming: shared by the process
            return shared_model(self._path, self._watch_base, self._refresh_secs, self._gate)
        return _Loaded(self._path)

    def update_model_path(self, model_path: Optional[str] = None):
        # Side-input updates (ModelMetadata) may name the saved_model.pb file itself.
        if model_path:
            self._path = model_path[: -len("/saved_model.pb")] \
                if model_path.endswith("/saved_model.pb") else model_path

    def batch_elements_kwargs(self):
        if self._rows_per_call:  # RowBatches, weighed by their rows: small ones gathered
            return {"min_batch_size": self._rows_per_call,
                    "max_batch_size": self._rows_per_call,
                    "element_size_fn": functools.partial(row_weight, self._rows_per_call)}
        kw = {"min_batch_size": self._min, "max_batch_size": self._max}
        if self._max_duration is not None:
            kw["max_batch_duration_secs"] = self._max_duration
        return kw

    def get_metrics_namespace(self) -> str:
        return "RunInference_SavedModel"

    def get_num_bytes(self, batch) -> int:
        return sum(64 * len(x) if isinstance(x, RowBatch) else 64 for x in batch)

    def run_inference(self, batch: Sequence[Any], model: _Loaded,
                      inference_args=None) -> Iterable[PredictionResult]:
        """Elements are row dicts (streaming) or RowBatches (batch jobs: one call each).

        A RowBatch's inference is a PredictionBlock; a row dict's is its output dict, or a
        Reject.
        """
        model.maybe_refresh()
        snap = model.current
        if batch and isinstance(batch[0], RowBatch):
            return [PredictionResult(rb, block, snap.version) for rb, block in
                    zip(batch, predict_row_batches(snap, batch, self._rows_per_call))]
        names = tuple(snap.columns.values())
        columns = [[r.get(n) for r in batch] for n in names]
        result = predict_block(snap, names, columns, len(batch))
        outs = [None] * len(batch)
        for i, rec in zip(result.index, result.output_rows()):
            outs[i] = rec
        for i, rejection in result.rejections:
            outs[i] = rejection
        return [PredictionResult(r, o, snap.version) for r, o in zip(batch, outs)]


def row_weight(limit: int, element) -> int:
    """An element's weight for BatchElements: a RowBatch's rows, at most `limit` (a bigger
    one then makes a batch of its own, never an empty one before it), else 1."""
    return min(max(len(element), 1), limit) if isinstance(element, RowBatch) else 1


def predict_row_batches(model: "_Version", batch: Sequence[RowBatch],
                        rows_per_call: Optional[int]) -> list:
    """One PredictionBlock per RowBatch. Consecutive small ones (many small files) share a
    model call of up to `rows_per_call` rows, as each call has a fixed cost."""
    limit = rows_per_call or 4096
    out, group, rows = [], [], 0

    def flush():
        nonlocal rows
        rows = 0
        if len(group) == 1:
            rb = group[0]
            out.append(predict_block(model, rb.names, rb.columns, len(rb), rows_per_call))
        elif group:
            sizes = [len(rb) for rb in group]
            columns = [row_parser.concat_columns([rb.columns[k] for rb in group])
                       for k in range(len(group[0].names))]
            whole = predict_block(model, group[0].names, columns, sum(sizes), rows_per_call)
            out.extend(whole.split(sizes))
        group.clear()

    for rb in batch:
        if group and (rb.names != group[0].names or rows + len(rb) > limit):
            flush()
        group.append(rb)
        rows += len(rb)
    flush()
    return out


def predict_block(model: "_Version", names: Sequence[str], columns: Sequence, n: int,
                  rows_per_call: Optional[int] = None) -> PredictionBlock:
    """Scores n rows, at most `rows_per_call` per model call; a failing call is retried row
    by row to isolate the bad rows. The block carries the model's version."""
    return _scored(model, names, columns, n, rows_per_call)


def _scored(model, names, columns, n, rows_per_call=None) -> PredictionBlock:
    if n == 0:
        return _block(model, {}, [], [])
    if rows_per_call and n > rows_per_call:
        parts = [(s, _scored(model, names, [c[s:s + rows_per_call] for c in columns],
                                   min(rows_per_call, n - s)))
                 for s in range(0, n, rows_per_call)]
        return _concat(model, parts)
    try:
        return _finite(model, predict(model, names, columns), n)
    except Exception as e:  # a bad value somewhere: find it row by row
        if n == 1:
            return _block(model, {}, [], [(0, Reject("model_rejected", _short(e)))])
        logging.warning("Batch of %d failed (%s); retrying row by row", n, _short(e))
    parts, index, rejections = [], [], []
    for i in range(n):
        one = _scored(model, names, [c[i:i + 1] for c in columns], 1)
        if one.index:
            parts.append(one.outputs)
            index.append(i)
        else:
            rejections.append((i, one.rejections[0][1]))
    return _block(model, _concat_outputs(parts), index, rejections)


def _finite(model, outputs: dict, n: int) -> PredictionBlock:
    """The n rows' outputs, with the rows whose outputs are not all finite taken out as
    non_finite_prediction rejections (JSON and BigQuery have no NaN or infinity)."""
    import numpy as np
    ok = np.ones(n, dtype=bool)
    for v in outputs.values():
        if v.dtype.kind == "f":
            ok &= np.isfinite(v.reshape(n, -1)).all(axis=1)
    if ok.all():
        return _block(model, outputs, list(range(n)), [])
    bad = np.flatnonzero(~ok).tolist()
    names = ", ".join(k for k, v in outputs.items() if v.dtype.kind == "f"
                      and not np.isfinite(v.reshape(n, -1)[bad[0]]).all())
    reject = Reject("non_finite_prediction", f"the model's {names} is NaN or infinite")
    return _block(model, {k: v[ok] for k, v in outputs.items()}, np.flatnonzero(ok).tolist(),
                  [(i, reject) for i in bad])


def _block(model, outputs: dict, index: list, rejections: list) -> PredictionBlock:
    return PredictionBlock(None, outputs, model.version, index=index, rejections=rejections)


def _concat_outputs(parts: list) -> dict:
    import numpy as np
    parts = [p for p in parts if p]
    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}


def _concat(model, parts: list) -> PredictionBlock:
    """PredictionBlocks of consecutive slices (start, block) as one."""
    index, rejections = [], []
    for start, r in parts:
        index += [start + i for i in r.index]
        rejections += [(start + i, rej) for i, rej in r.rejections]
    return _block(model, _concat_outputs([r.outputs for _, r in parts]), index, rejections)


def predict(model: "_Version", names: Sequence[str], columns: Sequence) -> dict:
    """Calls the signature once on value columns (in `names` order): output name -> array."""
    import tensorflow as tf
    index = {n: i for i, n in enumerate(names)}
    tensors = {}
    for name, dtype in model.inputs.items():
        column = model.columns[name]
        if column not in index:
            raise ValueError(f"model input '{column}' is not among the row's columns")
        col = columns[index[column]]
        if isinstance(col, (list, tuple)) and None in col or getattr(col, "null_count", 0):
            raise ValueError(f"missing value for model input '{column}'")
        if hasattr(col, "to_pylist"):  # an Arrow array (a CSV block's column)
            col = col.to_pylist() if dtype == tf.string else col.to_numpy(zero_copy_only=False)
        tensors[name] = tf.constant(col, dtype=dtype)
    return {k: v.numpy() for k, v in model.fn(**tensors).items()}




def default_key(path: str, position) -> str:
    return f"{os.path.basename(path)}:{position}"


def keys_or_default(path: str, values, positions) -> list:
    """Key values as strings, file:position (default_key) where a row has none."""
    return [default_key(path, p) if k is None or k == "" else str(k)
            for k, p in zip(values, positions)]
