"""The blend family: the network and the boosted trees averaged, answering like the trees.

Two models of different kinds make different errors; their average is rarely worse than the
better one and often better than both (docs/performance.md). Regression averages the two
predictions on the label's own scale (the network's back-transform, bounded by the train
labels, applied first); classification averages the two probability vectors. The output is
the trees' shape: regression `[batch, 1]` on the label's scale (served with the trees'
bounds-only label scaler), classification log-probabilities `[batch, n_classes]`.
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from training.holding import held, hold
from training.models.trees_model import MIN_PROBABILITY
from training.target import LabelScaler

BLEND = "blend"


class BlendModel(tf.Module):
    """`network_weight` x the network + (1 - `network_weight`) x the trees."""

    def __init__(self, network, network_scaler: Optional[LabelScaler], trees,
                 regression: bool, network_weight: float = 0.5):
        super().__init__(name=BLEND)
        if not 0.0 <= network_weight <= 1.0:
            raise ValueError(f"network_weight must be in [0, 1], got {network_weight}")
        hold(self, "network", network)  # a Keras network: its variables only (training/holding.py)
        self.trees = trees
        self._scaler = network_scaler
        self._regression = regression
        self.network_weight = float(network_weight)

    def __call__(self, features, training=False):
        return self.combine(held(self, "network")(features, training=False),
                            self.trees(features, training=False))

    def combine(self, net, trees):
        """The blend of the two families' outputs on the same rows (tensors or arrays): how
        `--model auto` scores the blend at each weight from predictions made once."""
        net, trees = tf.cast(net, tf.float32), tf.cast(trees, tf.float32)
        w = self.network_weight
        if self._regression:
            if self._scaler is not None:  # the network learnt a scaled label
                net = tf.reshape(self._scaler.inverse(net[:, 0]), [-1, 1])
            return w * net + (1.0 - w) * trees
        probs = w * tf.nn.softmax(net, axis=-1) + (1.0 - w) * tf.exp(trees)
        return tf.math.log(tf.maximum(probs, MIN_PROBABILITY))
