"""Missingness augmentation for the network: present values of imputed columns hidden at
random while it trains.

A column with missing values reaches the model as its imputed mean plus a 0/1 flag
(preprocessing/features/transform.py). When values are missing mostly for small entities,
the network learns "missing means small" and applies it to a large entity's one missing
value (the issue's sales table: predicted at an eighth). Hiding a share of the present
values the same way (the imputed value, its bucket, the flag set) shows the network rows of
every size with that column missing, so it predicts them from the other columns, as trees
do. Training only; serving and the trees see the data as it is.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import tensorflow as tf

from training import data as data_lib

SCAN_ROWS = 200_000   # rows read at most to find each imputed column's stored value


def imputed_groups(info) -> Dict[str, List[str]]:
    """{a column's missing flag: its transformed model inputs} for every imputed column."""
    schema, out = info.raw_schema, {}
    if schema is None or info.image:
        return out
    inputs = set(info.input_names)
    for c in schema.feature_columns():
        if not c.imputed:
            continue
        name = schema.tf_name(c.name)
        flag = schema.output_name(c.name, "missing")
        bucket = schema.output_name(c.name, "bucket") if c.transform == "numeric" else None
        feats = [n for n in (name, bucket) if n in inputs]
        if flag in inputs and feats:
            out[flag] = feats
    return out


def imputed_values(files, info, groups: Dict[str, List[str]]) -> Dict[str, Dict[str, object]]:
    """{flag: {input: the value a missing row stores}}, read from the first missing row of
    each column (the transform's imputed mean, z-scored, and its bucket); a column with no
    missing row in the first SCAN_ROWS is left out."""
    found: Dict[str, Dict[str, object]] = {}
    if not groups:
        return found
    ds = data_lib.make_dataset_fn(files, info, 4096, training=False)()
    rows = 0
    for features, label, _ in ds:
        for flag, names in groups.items():
            if flag in found:
                continue
            hit = np.flatnonzero(features[flag].numpy() == 1)
            if len(hit):
                found[flag] = {n: features[n].numpy()[hit[0]] for n in names}
        rows += len(label)
        if len(found) == len(groups) or rows >= SCAN_ROWS:
            break
    return found


def with_hidden_values(dataset_fn, values: Dict[str, Dict[str, object]], rate: float,
                       seed: int):
    """dataset_fn whose batches have each present value of an imputed column hidden (stored
    as missing) with probability `rate`, independently per row and column; the same seed
    hides the same values."""
    if not values or rate <= 0:
        return dataset_fn
    groups = sorted(values.items())

    def hide(step, batch):
        features, label, weight = batch
        features = dict(features)
        for k, (flag, stored) in enumerate(groups):
            draw = tf.random.stateless_uniform(
                tf.shape(features[flag]), seed=tf.stack([tf.constant(seed, tf.int64),
                                                         step * len(groups) + k]))
            hidden = (draw < rate) & tf.equal(features[flag], 0)
            features[flag] = tf.where(hidden, tf.ones_like(features[flag]), features[flag])
            for name, value in stored.items():
                features[name] = tf.where(hidden, tf.cast(value, features[name].dtype),
                                          features[name])
        return features, label, weight

    def fn(input_context=None):
        return dataset_fn(input_context).enumerate().map(
            hide, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return fn
