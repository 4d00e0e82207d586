"""A trained YDF forest as a TensorFlow module that answers like the network (training/models/
trees.py grows it): regression `[batch, 1]` on the label's own scale, classification logits
`[batch, n_classes]` in the label vocabulary's order."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from training.data import FeatureInfo

MIN_PROBABILITY = 1e-7   # logits are log-probabilities, floored so none is -inf


class TreesModel(tf.Module):
    """A trained YDF forest answering like the network (see the module doc); a feature in
    `means` reaches the forest as its mean labels (category_means)."""

    def __init__(self, forest, info: FeatureInfo, features, model_classes=(), means=()):
        super().__init__(name="boosted_trees")
        self.forest = forest
        self._means = list(means)
        encoded = {n for m in self._means for n in m.names}
        self._features = [f for f in features if f not in encoded]
        # the number an entity's category was made of, missing for one never seen (as the
        # twin rows taught the forest: entity_twins.py)
        self._blank = {n: e for n, e in info.entities.items() if e.number in self._features}
        self._regression = info.task == "regression"
        if not self._regression:
            # Column j of YDF's output is class model_classes[j]; map onto the label's ids.
            to_ids = np.zeros((len(model_classes), info.n_classes), np.float32)
            for j, c in enumerate(model_classes):
                to_ids[j, int(c)] = 1.0
            self._to_ids = tf.constant(to_ids)
            self._binary = len(model_classes) == 2

    def __call__(self, features, training=False):
        inputs = {k: features[k] for k in self._features}
        for m in self._means:
            inputs.update(m.lookup(features[m.feature]))
        for name, e in self._blank.items():
            number = inputs[e.number]
            inputs[e.number] = tf.where(tf.equal(tf.cast(features[name], tf.int64), e.unknown),
                                        tf.fill(tf.shape(number), np.nan), number)
        out = self.forest(inputs)
        if self._regression:
            return tf.reshape(tf.cast(out, tf.float32), [-1, 1])
        probs = tf.cast(out, tf.float32)
        if self._binary:  # YDF gives the second class's probability only
            probs = tf.stack([1.0 - probs, probs], axis=-1)
        return tf.math.log(tf.maximum(tf.matmul(probs, self._to_ids), MIN_PROBABILITY))
