"""Permutation importance of the model kept, on the eval split: how much the mean per-row
loss (losses.row_losses: squared error, or the Brier score) rises when one raw column's
inputs are shuffled across rows. It is the same measure for the network, the trees and the
blend, so the report can compare them; a column's transformed outputs (its bucket, missing
flag, datetime parts) are shuffled together, and each derived feature and cross on its own.

Read from at most MAX_ROWS eval rows (training.task --importance_rows; the first in file
order), one shuffle per column:
a figure near zero, or below it, means the model does not use that column on these rows."""
from __future__ import annotations

import logging
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf

from training import data as data_lib
from training.config import TrainConfig
from training.reporting.losses import row_losses

MAX_ROWS = TrainConfig.importance_rows  # the flag's default, declared once there

log = logging.getLogger("training")


def input_groups(info: data_lib.FeatureInfo) -> Dict[str, List[str]]:
    """{what a person calls it: the model inputs it becomes}, for the inputs the model
    reads (a column with no input left, e.g. dropped, is absent)."""
    inputs = set(info.input_names)
    groups: Dict[str, List[str]] = {}
    schema = info.raw_schema
    origins = schema.transformed_origins() if schema is not None else \
        [(n, n) for n in info.input_names]
    for name, what in origins:
        if name not in inputs:
            continue
        column = what.split("'")[1] if what.startswith("column '") else name
        groups.setdefault(column, []).append(name)
    named = {n for names in groups.values() for n in names}
    for name in info.input_names:  # an input no origin names stands alone
        if name not in named:
            groups[name] = [name]
    return groups


def _rows(files, info, batch: int, max_rows: int):
    """(inputs as numpy arrays, labels, weights) of the first `max_rows` rows of `files`."""
    parts, labels, weights, n = [], [], [], 0
    ds = data_lib.make_dataset_fn(files, info, batch, training=False, scale_label=False)()
    for features, label, weight in ds:
        parts.append({k: v.numpy() for k, v in features.items()})
        labels.append(label.numpy())
        weights.append(weight.numpy())
        n += len(weights[-1])
        if n >= max_rows:
            break
    if not parts:
        return None
    inputs = {k: np.concatenate([p[k] for p in parts])[:max_rows] for k in parts[0]}
    return inputs, np.concatenate(labels)[:max_rows], np.concatenate(weights)[:max_rows]


def _mean_loss(predict, inputs, y, w, info, batch: int) -> float:
    n, losses = len(y), []
    for start in range(0, n, batch):
        out = predict({k: tf.constant(v[start:start + batch]) for k, v in inputs.items()})
        out = out.numpy()
        if info.task == "regression":
            pred = out[:, 0] if info.label_scaler is None else \
                info.label_scaler.inverse(out[:, 0]).numpy()
            losses.append(row_losses(pred, y[start:start + batch, 0]))
        else:
            losses.append(row_losses(out, y[start:start + batch], w[start:start + batch]))
    return float(np.concatenate(losses).mean())


def permutation_importance(model, files, info: data_lib.FeatureInfo, batch: int,
                           seed: int = 0, max_rows: int = MAX_ROWS) -> Optional[dict]:
    """{"rows", "loss", "base_loss", "features": {column: rise in mean loss}} (largest
    first), or None for an image model or an empty eval split."""
    if info.image or not files:
        return None
    read = _rows(files, info, batch, max_rows)
    if read is None:
        return None
    inputs, y, w = read
    predict = tf.function(lambda x: model(x, training=False), reduce_retracing=True)
    base = _mean_loss(predict, inputs, y, w, info, batch)
    order = np.random.default_rng(seed).permutation(len(y))
    rises = {}
    for column, names in input_groups(info).items():
        shuffled = dict(inputs)
        for name in names:
            shuffled[name] = inputs[name][order]
        rises[column] = _mean_loss(predict, shuffled, y, w, info, batch) - base
    return {"rows": int(len(y)), "measured_on": "eval split",
            "loss": "squared error" if info.task == "regression" else "Brier score",
            "base_loss": base,
            "features": dict(sorted(rises.items(), key=lambda kv: -kv[1]))}


def forest_importance(forest, top: int = 30) -> Optional[dict]:
    """YDF's own importance of a trained forest: SUM_SCORE, the loss reduction summed over a
    feature's splits, as shares of the total (over the model's inputs, the transformed
    features), largest first; None where YDF gives none. Beside the permutation measure,
    which compares the families on the eval split, this is what the trees used to split."""
    try:
        found = forest.variable_importances().get("SUM_SCORE") or []
    except Exception as e:  # noqa: BLE001 (a figure for the report, never a failed run)
        log.warning("training: no YDF importance (%s: %s)", type(e).__name__, e)
        return None
    total = sum(max(float(v), 0.0) for v, _ in found)
    if not found or total <= 0:
        return None
    ranked = sorted(((name, max(float(v), 0.0) / total) for v, name in found),
                    key=lambda kv: -kv[1])[:top]
    return {"kind": "SUM_SCORE", "features": {name: round(share, 6) for name, share in ranked}}
