"""Loading an export: `tf.saved_model.load` after the custom ops an export may use are
registered (a boosted-trees or blend export runs TensorFlow Decision Forests' inference ops,
which the `ydf-tf` package registers; preprocessing/files/serving_ops.py). Every process that
loads an export (training's evaluation and optimisation, the prediction jobs' workers) loads
it through here."""
from __future__ import annotations

from preprocessing.files.serving_ops import MissingOpsError, missing_ops_message


def register_custom_ops() -> None:
    """Registers TF-DF's inference ops when ydf-tf is installed (without it a network export
    still loads; a forest's says what to install)."""
    try:
        import ydf_tf  # noqa: F401  (importing registers the ops)
    except ImportError:
        pass


def load(path: str):
    import tensorflow as tf  # here, not at import: a job's --help must not load TensorFlow

    register_custom_ops()
    try:
        return tf.saved_model.load(path)
    except (RuntimeError, tf.errors.NotFoundError) as e:
        if "Op type not registered" not in str(e):
            raise
        raise MissingOpsError(missing_ops_message(path, e)) from None
