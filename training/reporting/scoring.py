"""Scoring a model on TFRecord files row by row: the metrics and each row's loss.

`--model auto` compares its candidates on these per-row losses (training/selection.py), and
metrics.json's final figures are exact_eval's: every eval row once, on this process.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from preprocessing.reference.evaluation import EvalSums
from training import data as data_lib
from training.losses import row_losses


def scored_rows(model, files, info, batch_size: int,
                holdout: Optional[data_lib.Holdout] = None) -> tuple:
    """(metrics, each row's loss (row_losses); rows of a class never seen in train are left
    out), over `files` (the `holdout` fold of them) in file order."""
    sums, losses = scored_sums(model, files, info, batch_size, holdout)
    return sums.metrics(info.task), losses


def scored_sums(model, files, info, batch_size: int, holdout) -> Tuple[EvalSums, np.ndarray]:
    """(EvalSums to merge across folds, each row's loss) over `files`' `holdout` rows."""
    ds = data_lib.make_dataset_fn(files, info, batch_size, training=False, scale_label=False,
                                  holdout=holdout)()
    predict = tf.function(lambda x: model(x, training=False), reduce_retracing=True)
    sums, losses = EvalSums(), []
    for features, label, weight in ds:
        out = predict(features).numpy()
        y, w = label.numpy(), weight.numpy()
        if info.task == "regression":
            pred = out[:, 0] if info.label_scaler is None else \
                info.label_scaler.inverse(out[:, 0]).numpy()
            sums.add_regression(pred, y[:, 0])
            losses.append(row_losses(pred, y[:, 0]))
        else:
            sums.add_classification(np.argmax(out, -1) == y, w)
            losses.append(row_losses(out, y, w))
    return sums, (np.concatenate(losses) if losses else np.zeros(0))


def exact_eval(model, files, info, batch_size: int, holdout=None) -> dict:
    """Metrics over the whole eval split exactly once, on this process (no sharding).

    Per-epoch validation under multi-worker training repeats data to keep workers in step;
    the final figure in metrics.json must be exact, so batch prediction can reproduce it.
    """
    if not files:  # an empty split: preprocess wrote no shard for it
        return EvalSums().metrics(info.task)
    return scored_rows(model, files, info, batch_size, holdout)[0]
