"""Scoring a model on TFRecord files row by row: the metrics and each row's loss.

`--model auto` compares its candidates on these per-row losses (training/selection.py), and
metrics.json's final figures are exact_eval's: every eval row once, on this process.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from preprocessing.reference.evaluation import EvalSums
from training import data as data_lib
from training import defaults
from training.reporting.losses import row_losses


def scored_rows(model, files, info, batch_size: int,
                holdout: Optional[data_lib.Holdout] = None) -> tuple:
    """(metrics, each row's loss (row_losses); rows of a class never seen in train are left
    out), over `files` (the `holdout` fold of them) in file order."""
    sums, losses = scored_sums(model, files, info, batch_size, holdout)
    return sums.metrics(info.task), losses


@dataclasses.dataclass
class Predictions:
    """A model's raw outputs on rows, with their labels and label weights, in file order."""
    out: np.ndarray     # [rows, 1] regression (the model's scale), [rows, classes] logits
    label: np.ndarray   # [rows, 1] regression, [rows] class ids
    weight: np.ndarray  # [rows]; 0 = a class never seen in train


class FoldRows:
    """The rows of `files` each Holdout keeps, read once and kept in memory as one batch.

    `--model auto` on a small train split predicts every fold with each candidate (the
    network, every shape of trees, the folds grown again); a dataset pipeline built and a
    model traced for each took a quarter of its time (docs/training.md). Only a train split
    of at most SMALL_TRAIN_ROWS is kept (the choice's folds); a larger one's validation
    slice, and image rows (decoded, a fold of them could take gigabytes), are read again
    each time, batch by batch."""

    def __init__(self, files, info, batch_size: int):
        self.files, self.info, self.batch_size = list(files), info, batch_size
        self._rows: dict = {}

    @property
    def kept(self) -> bool:
        """Whether the rows are kept, each fold as one batch."""
        rows = int(self.info.split_rows.get("train") or 0)
        return not self.info.image and 0 < rows <= defaults.SMALL_TRAIN_ROWS

    def batches(self, holdout):
        """[(features, label, weight)] of the `holdout` rows (a dataset when not kept)."""
        if not self.kept:
            return _dataset(self.files, self.info, self.batch_size, holdout)
        if holdout not in self._rows:
            whole = max(self.batch_size, int(self.info.split_rows["train"]))
            self._rows[holdout] = list(_dataset(self.files, self.info, whole, holdout))
        return self._rows[holdout]

    def predicted(self, model, holdout) -> Predictions:
        """`model`'s Predictions over the `holdout` rows (read with this FoldRows' info: the
        label's scaler plays no part here, so any candidate's info reads them alike)."""
        return _predictions(model, self.batches(holdout), eager=self.kept)


def _dataset(files, info, batch_size: int, holdout):
    return data_lib.make_dataset_fn(files, info, batch_size, training=False, scale_label=False,
                                    holdout=holdout)()


def predicted(model, files, info, batch_size: int, holdout) -> Predictions:
    """`model`'s Predictions over `files`' `holdout` rows."""
    return _predictions(model, _dataset(files, info, batch_size, holdout), eager=False)


def _predictions(model, batches, eager: bool) -> Predictions:
    """`model`'s Predictions over `batches` of (features, label, weight); `eager` for one
    batch (FoldRows.kept), where a trace costs more than the ops it would save."""
    predict = (lambda x: model(x, training=False)) if eager else \
        tf.function(lambda x: model(x, training=False), reduce_retracing=True)
    outs, labels, weights = [], [], []
    for features, label, weight in batches:
        outs.append(predict(features).numpy())
        labels.append(label.numpy())
        weights.append(weight.numpy())
    if not outs:
        return Predictions(np.zeros((0, 1), np.float32), np.zeros(0), np.zeros(0))
    return Predictions(np.concatenate(outs), np.concatenate(labels), np.concatenate(weights))


def sums_of(pred: Predictions, info) -> Tuple[EvalSums, np.ndarray]:
    """(EvalSums to merge across folds, each row's loss) of Predictions made with `info`."""
    sums = EvalSums()
    if not len(pred.out):
        return sums, np.zeros(0)
    if info.task == "regression":
        values = pred.out[:, 0] if info.label_scaler is None else \
            info.label_scaler.inverse(pred.out[:, 0]).numpy()
        sums.add_regression(values, pred.label[:, 0])
        return sums, row_losses(values, pred.label[:, 0])
    sums.add_classification(np.argmax(pred.out, -1) == pred.label, pred.weight)
    return sums, row_losses(pred.out, pred.label, pred.weight)


def scored_sums(model, files, info, batch_size: int, holdout) -> Tuple[EvalSums, np.ndarray]:
    """(EvalSums to merge across folds, each row's loss) over `files`' `holdout` rows."""
    return sums_of(predicted(model, files, info, batch_size, holdout), info)


def exact_eval(model, files, info, batch_size: int, holdout=None) -> dict:
    """Metrics over the whole eval split exactly once, on this process (no sharding).

    Per-epoch validation under multi-worker training repeats data to keep workers in step;
    the final figure in metrics.json must be exact, so batch prediction can reproduce it.
    """
    if not files:  # an empty split: preprocess wrote no shard for it
        return EvalSums().metrics(info.task)
    return scored_rows(model, files, info, batch_size, holdout)[0]
