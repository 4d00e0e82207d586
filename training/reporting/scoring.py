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


def predicted(model, files, info, batch_size: int, holdout) -> Predictions:
    """`model`'s Predictions over `files`' `holdout` rows."""
    ds = data_lib.make_dataset_fn(files, info, batch_size, training=False, scale_label=False,
                                  holdout=holdout)()
    predict = tf.function(lambda x: model(x, training=False), reduce_retracing=True)
    outs, labels, weights = [], [], []
    for features, label, weight in ds:
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
