"""Holding a model inside a `tf.Module` so that saving it costs only its variables.

`tf.saved_model.save` traces every layer's call of a tracked tf_keras model for Keras's own
loader (15 of a MobileNetV2 export's 27 s), and nothing loads our exports as Keras (Keras 3
cannot): the Keras object is held outside the object graph and its variables are saved by
name. Any other model (the trees' tf.Module, a blend) is tracked and saved whole.
"""
from __future__ import annotations

import tensorflow as tf
import tf_keras as keras


class _Untracked:
    """Holds an object outside the SavedModel's object graph."""

    def __init__(self, obj):
        self.obj = obj


def hold(module: tf.Module, name: str, model) -> None:
    """`held(module, name)` calls `model`; what is saved: `<name>_variables` (a Keras
    model's variables, keyed by their names so the checkpoint says which layer each is) or
    `<name>` (any other model, whole)."""
    setattr(module, f"_{name}", _Untracked(model))
    if isinstance(model, keras.Model):
        named = {}
        for v in model.variables:
            key = v.name.split(":")[0]
            named[key if key not in named else f"{key}_{len(named)}"] = v
        setattr(module, f"{name}_variables", named)
    else:
        setattr(module, name, model)


def held(module: tf.Module, name: str):
    return getattr(module, f"_{name}").obj
