"""Forests averaged: the trees kept, grown several times on the same rows with their own
random seeds (`--num_forests`, training/defaults.py num_forests), answering as one forest.

Boosted trees on a few thousand rows vary with their seed where the seed changes them (the
oblique splits' random projections, RANDOM category splits, row subsamples, the cross-fitted
mean labels): on lifelines' dd one forest's seed moved test accuracy by up to 0.04. Their
average keeps the forests' bias and shrinks that variance, as bagging does; regression
averages the predictions, classification the probabilities.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Optional, Sequence

import tensorflow as tf

from training import defaults
from training.config import TrainConfig
from training.data import FeatureInfo
from training.models import entity_twins
from training.models.tree_rows import read_columns
from training.models.trees import (
    TreesRun,
    feature_semantics,
    shape_cfg,
    train_trees,
    tree_threads,
)
from training.models.trees_model import MIN_PROBABILITY


def seeded(cfg: TrainConfig) -> bool:
    """Whether trees grown with `cfg` (one split axis, encoding and search: shape_cfg) change
    with its seed."""
    return (cfg.split_axis == "SPARSE_OBLIQUE" or cfg.categorical_algorithm == "RANDOM"
            or cfg.subsample < 1.0 or cfg.category_encoding == "target")


class AveragedTrees(tf.Module):
    """The mean of TreesModels that answer alike (regression `[batch, 1]`, classification
    log-probabilities `[batch, n_classes]`), answering as they do."""

    def __init__(self, members: Sequence[tf.Module], regression: bool):
        super().__init__(name="boosted_trees_averaged")
        if not members:
            raise ValueError("an average of no forest")
        self.members = list(members)
        self._regression = regression

    def __call__(self, features, training=False):
        outs = [tf.cast(m(features, training=False), tf.float32) for m in self.members]
        if self._regression:
            return tf.add_n(outs) / len(outs)
        probs = tf.add_n([tf.exp(o) for o in outs]) / len(outs)
        return tf.math.log(tf.maximum(probs, MIN_PROBABILITY))


def train_forests(cfg: TrainConfig, info: FeatureInfo, train_files, forests: int,
                  num_trees: Optional[int] = None) -> TreesRun:
    """`forests` forests of train_trees on all of `train_files` (no rows held out), the k-th
    grown with seed cfg.seed + k, as one TreesRun whose model is their average; one forest
    is train_trees' own. The rows are read once (past --trees_max_rows, one sample seeded by
    --seed) and shared. The first forest is the one a single growth gives; its forest (YDF's
    model) stands for the average where YDF's own figures are asked (split gains)."""
    if forests < 1:
        raise ValueError(f"forests must be at least 1, got {forests}")
    cfg = shape_cfg(cfg)
    if forests == 1:
        return train_trees(cfg, info, train_files, holdout=None, num_trees=num_trees)
    rows = read_columns(train_files, info, feature_semantics(info), None, cfg.trees_max_rows,
                        seed=cfg.seed, copies=entity_twins.copies(info.entities))

    def grow(k: int) -> TreesRun:
        return train_trees(dataclasses.replace(cfg, seed=cfg.seed + k), info, train_files,
                           holdout=None, num_trees=num_trees, rows=rows)
    # A small table's forest trains on one thread (tree_threads): two at once. A larger one
    # uses every core, and each growth holds YDF's own copy of the rows (the memory bound
    # read_columns sized for one): one at a time.
    small = len(rows.labels) < defaults.TREES_ONE_THREAD_ROWS
    at_once = defaults.FOLD_TREE_WORKERS if small and tree_threads(
        cfg.tree_threads, len(rows.labels)) == 1 else 1
    with concurrent.futures.ThreadPoolExecutor(at_once) as pool:
        runs = list(pool.map(grow, range(forests)))
    first = runs[0]
    model = AveragedTrees([r.model for r in runs], info.task == "regression")
    return dataclasses.replace(first, model=model, seconds=round(sum(r.seconds for r in runs), 2),
                               forests=forests)
