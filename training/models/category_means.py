"""Many-valued categories as their cross-fitted mean label, for the trees.

A category split over hundreds of values (leaders' names, villages, addresses) lets the trees
on a table of a thousand rows or two pick out small groups whose labels agree by chance: on
lifelines' `dd` table (political regimes, a leader-name and a country column) and
causaldata's `social_insure` (village and address) our trees lost 0.03 to 0.08 accuracy to
scikit-learn's. The field's remedy is target encoding (CatBoost's ordered target statistics,
scikit-learn's TargetEncoder): each value is replaced by the mean label of the rows that hold
it, shrunk towards the mean of all rows (_table), and computed for each train row from the other folds
only (cross-fitting), so a row's own label never reaches its feature. On a panel (a country
over years) the categories themselves are the better inputs; `--category_encoding auto` grows
both and keeps the one the held-out rows choose (training/selection.py).

The shrinkage is scikit-learn's TargetEncoder's (`smooth="auto"`, written here in numpy:
scikit-learn is not a dependency of the trainer). The means of a categorical feature with
cardinality n are an (n + 1) x k table (k: 1 for a
regression or a binary label, else one column per class); row n is the prior, for ids the
train rows never held. The export looks ids up in it (CategoryMeans.lookup), so serving
computes what training fed the trees.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List

import numpy as np
import tensorflow as tf

MANY_VALUES = 30     # categorical features of more values than this are encoded
FOLDS = 5            # cross-fitting folds over the train rows


@dataclasses.dataclass
class CategoryMeans:
    """One categorical feature's table of smoothed mean labels (see the module doc)."""
    feature: str
    table: np.ndarray    # float32 [cardinality + 1, k]; the last row is the prior

    @property
    def names(self) -> List[str]:
        """The numeric inputs the trees see in the feature's place."""
        return [f"{self.feature}__mean{j}" for j in range(self.table.shape[1])]

    def values(self, ids: np.ndarray) -> np.ndarray:
        """[rows, k] means of the ids (the prior for one outside the table)."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        size = len(self.table) - 1
        return self.table[np.where((ids >= 0) & (ids < size), ids, size)]

    def put(self, columns: Dict[str, np.ndarray], values: np.ndarray) -> None:
        """Its [rows, k] `values` into `columns`, a column per name."""
        columns.update({n: values[:, j] for j, n in enumerate(self.names)})

    def lookup(self, ids: tf.Tensor) -> Dict[str, tf.Tensor]:
        """The same in TensorFlow, for the export: {name: means shaped as `ids`}."""
        flat = tf.reshape(tf.cast(ids, tf.int64), [-1])
        size = len(self.table) - 1
        rows = tf.gather(tf.constant(self.table),
                         tf.where((flat >= 0) & (flat < size), flat, size))
        return {n: tf.reshape(rows[:, j], tf.shape(ids)) for j, n in enumerate(self.names)}


def targets(labels: np.ndarray, regression: bool, n_classes: int) -> np.ndarray:
    """[rows, k] what a mean is taken of: the label, or each class's indicator (the second
    class's alone for a binary label)."""
    if regression:
        return np.asarray(labels, np.float64).reshape(-1, 1)
    onehot = np.eye(max(n_classes, 2))[np.asarray(labels, np.int64)]
    return onehot[:, 1:2] if onehot.shape[1] == 2 else onehot


def _table(ids: np.ndarray, y: np.ndarray, size: int) -> np.ndarray:
    """[size + 1, k] each id's mean of `y` shrunk towards the mean of all rows (the last
    row), by scikit-learn's TargetEncoder's empirical Bayes weight (`smooth="auto"`): an
    id's mean counts n * var(y) / (n * var(y) + its own rows' variance), so an id whose rows
    agree keeps its mean and one whose rows scatter falls back to the prior."""
    k = y.shape[1]
    prior = y.mean(0) if len(y) else np.zeros(k)
    variance = y.var(0) if len(y) else np.zeros(k)
    inside = (ids >= 0) & (ids < size)
    ids, y = ids[inside], y[inside]
    counts = np.bincount(ids, minlength=size).astype(np.float64)[:, None]
    sums = np.zeros((size, k))
    np.add.at(sums, ids, y)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
        spread = np.zeros((size, k))
        np.add.at(spread, ids, (y - means[ids]) ** 2)
        weight = variance * counts / (variance * counts + spread / counts)
        table = weight * means + (1 - weight) * prior
    # no rows (0/0), or no variance at all: the prior
    table = np.where(np.isfinite(table), table, prior)
    return np.vstack([table, prior[None, :]]).astype(np.float32)


def fit(feature: str, ids: np.ndarray, y: np.ndarray, cardinality: int, seed: int
        ) -> tuple:
    """(CategoryMeans over all the rows, each row's means from the other FOLDS - 1 folds):
    the table serves, the cross-fitted values train."""
    ids = np.asarray(ids, np.int64).reshape(-1)
    size = max(int(cardinality), int(ids.max()) + 1 if len(ids) else 0)
    whole = CategoryMeans(feature, _table(ids, y, size))
    fold = np.random.default_rng(seed).integers(0, FOLDS, len(ids))
    out = np.zeros((len(ids), y.shape[1]), np.float32)
    for k in range(FOLDS):
        rest = fold != k
        out[~rest] = CategoryMeans(feature, _table(ids[rest], y[rest], size)).values(ids[~rest])
    return whole, out


def many_valued(features: Dict[str, str], cardinality: Dict[str, int]) -> List[str]:
    """The categorical features (YDF semantics) of over MANY_VALUES values."""
    return [n for n, s in features.items()
            if s == "CATEGORICAL" and cardinality.get(n, 0) > MANY_VALUES]


def encode(columns: Dict[str, np.ndarray], features: Dict[str, str], info, labels: np.ndarray,
           seed: int) -> tuple:
    """(columns, features, CategoryMeans) with each many-valued categorical feature of
    `info` (a training.data.FeatureInfo) replaced by its cross-fitted mean labels (fit)."""
    y = targets(labels, info.task == "regression", info.n_classes)
    columns, features, means = dict(columns), dict(features), []
    for name in many_valued(features, info.categorical):
        table, values = fit(name, columns.pop(name), y, info.categorical[name], seed)
        del features[name]
        table.put(columns, values)
        features.update({n: "NUMERICAL" for n in table.names})
        means.append(table)
    return columns, features, tuple(means)
