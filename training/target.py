"""The regression target as the network sees it: standardised, on a log scale when the label is
positive with a long right tail (prices, incomes, counts).

A network whose output layer starts near 0 learns a label in the thousands slowly and weighs
its largest values most; training on (g(y) - mean) / std, with g = log1p for a long-tailed
label, removes both. The inverse is applied inside the exported model (training/exporting/export.py)
and in the trainer's exact eval, so predictions and metrics are on the label's own scale.

The inverse is also bounded by the train labels' range: no input, however far outside what
training saw, can make the model predict beyond the labels it learnt from (an input 40
standard deviations out went through expm1 to 1,000x the largest price). A tree model
behaves so by construction; the network is made to.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional

import numpy as np
import tensorflow as tf

SKEW_FOR_LOG = 1.0       # sample skewness above which a non-negative label is logged
MAX_LABELS = 1_000_000   # train labels read to choose the scaling


@dataclasses.dataclass(frozen=True)
class LabelScaler:
    log: bool = False
    mean: float = 0.0
    std: float = 1.0
    low: Optional[float] = None    # the train labels' range: predictions are clipped to it
    high: Optional[float] = None

    def forward(self, y):
        y = tf.cast(y, tf.float32)
        if self.log:
            y = tf.math.log1p(tf.maximum(y, 0.0))
        return (y - self.mean) / self.std

    def inverse(self, z):
        y = tf.cast(z, tf.float32) * self.std + self.mean
        y = tf.math.expm1(y) if self.log else y
        if self.low is not None and self.high is not None:
            y = tf.clip_by_value(y, self.low, self.high)
        return y

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def fit(cls, labels: np.ndarray) -> "LabelScaler":
        y = np.asarray(labels, np.float64)
        y = y[np.isfinite(y)]
        if len(y) < 2:
            return cls()
        log = bool(y.min() >= 0 and _skewness(y) > SKEW_FOR_LOG)
        g = np.log1p(y) if log else y
        std = float(g.std())
        return cls(log=log, mean=float(g.mean()), std=std if std > 0 else 1.0,
                   low=float(y.min()), high=float(y.max()))

    @classmethod
    def bounds_only(cls, labels: np.ndarray) -> "LabelScaler":
        """No scaling, only the train labels' range (a model that learns the label as is)."""
        fitted = cls.fit(labels)
        return cls(low=fitted.low, high=fitted.high)


def _skewness(y: np.ndarray) -> float:
    centred = y - y.mean()
    std = centred.std()
    return float((centred ** 3).mean() / std ** 3) if std > 0 else 0.0


def read_labels(files: List[str], name: str, limit: int = MAX_LABELS) -> np.ndarray:
    """The float label of up to `limit` train records."""
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP").take(limit).batch(10_000)
    spec = {name: tf.io.FixedLenFeature([], tf.float32)}
    parts = [tf.io.parse_example(b, spec)[name].numpy() for b in ds]
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)
