"""Loading an export: `tf.saved_model.load` after the custom ops an export may use are
registered (a boosted-trees export runs YDF's inference ops, from the `ydf-tf` package).
Every process that loads an export (training's evaluation and optimisation, the prediction
jobs' workers) loads it through here."""
from __future__ import annotations

import tensorflow as tf


def register_custom_ops() -> None:
    import ydf_tf  # noqa: F401  (importing registers the ops)


def load(path: str):
    register_custom_ops()
    return tf.saved_model.load(path)
