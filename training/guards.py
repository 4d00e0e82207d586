"""Checks that stop a training run that would export garbage, each with one line saying why
and what to do: a cluster spec (TF_CONFIG) that cannot be right, a label with one value, a
loss that is no longer a number, and a checkpoint made on other data."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from typing import Optional

import numpy as np
import tensorflow as tf
import tf_keras as keras

FINGERPRINT = "data_fingerprint.json"
TASK_TYPES = ("chief", "worker", "ps", "evaluator")


class TrainingError(ValueError):
    """A run that cannot give a sound model: the task CLI prints it as one line (exit 2)."""


def read_tf_config(text: Optional[str]) -> dict:
    """TF_CONFIG as a dict, checked: JSON, a known task type, an index within the cluster."""
    if not text:
        return {}
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise TrainingError(f"TF_CONFIG is not JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise TrainingError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
    cluster, task = cfg.get("cluster") or {}, cfg.get("task") or {}
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise TrainingError("TF_CONFIG: 'cluster' and 'task' must be objects")
    if not task:
        return cfg
    ttype, index = task.get("type"), task.get("index", 0)
    if ttype not in TASK_TYPES:
        raise TrainingError(f"TF_CONFIG: task type {ttype!r} is not one of {list(TASK_TYPES)}")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise TrainingError(f"TF_CONFIG: task index {index!r} is not an integer >= 0")
    members = cluster.get(ttype)
    if ttype != "evaluator" and (not isinstance(members, list) or index >= len(members)):
        size = len(members) if isinstance(members, list) else 0
        raise TrainingError(f"TF_CONFIG: task {ttype}:{index} is not in the cluster "
                            f"({size} {ttype} address(es))")
    return cfg


def check_label(task: str, n_classes: int, class_names, label_std: Optional[float]) -> None:
    """A label that cannot be learnt: one class, or a constant regression target."""
    if task == "classification" and n_classes < 2:
        raise TrainingError(f"the label has {n_classes} class(es) in the train split "
                            f"({list(class_names)[:3]}): a classifier needs at least two")
    if task == "regression" and label_std is not None and label_std == 0:
        raise TrainingError("the regression label is constant in the train split: there is "
                            "nothing to learn")


def check_labels_finite(labels: np.ndarray, name: str, limit: float = 1e15) -> None:
    """Regression labels the network can learn: finite and within `limit` (a value like 1e30
    turns the loss into infinity/NaN and the model into NaN)."""
    labels = np.asarray(labels, np.float64)
    bad = ~np.isfinite(labels) | (np.abs(labels) > limit)
    if bad.any():
        worst = labels[bad][0]
        raise TrainingError(f"label '{name}': {int(bad.sum())} train value(s) beyond +-{limit:g} "
                            f"(e.g. {worst:g}); remove or cap them before training")


def data_fingerprint(data_dir: str) -> dict:
    """What a checkpoint was trained on: the transform's output schema and the train
    split's files (names and sizes)."""
    h = hashlib.sha256()
    meta = os.path.join(data_dir, "transformed_metadata")
    for root, _, files in sorted(tf.io.gfile.walk(meta)):
        for name in sorted(files):
            with tf.io.gfile.GFile(os.path.join(root, name), "rb") as f:
                h.update(name.encode() + f.read())
    schema_hash = h.hexdigest()[:16]
    train = sorted(tf.io.gfile.glob(os.path.join(data_dir, "train", "*")))
    h = hashlib.sha256()
    for path in train:
        h.update(os.path.basename(path).encode() + str(tf.io.gfile.stat(path).length).encode())
    return {"schema": schema_hash, "train": h.hexdigest()[:16], "data_dir": data_dir}


def check_resume(checkpoint_dir: str, fingerprint: dict, backup_dir: str) -> None:
    """Refuses to resume a checkpoint made on other data (a different schema, or other train
    files); writes the fingerprint for a fresh start."""
    path = os.path.join(checkpoint_dir, FINGERPRINT)
    has_backup = tf.io.gfile.exists(backup_dir) and bool(tf.io.gfile.listdir(backup_dir))
    if has_backup and tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            old = json.load(f)
        what = [k for k in ("schema", "train") if old.get(k) != fingerprint.get(k)]
        if what:
            raise TrainingError(
                f"the checkpoint in {checkpoint_dir} was trained on other data ({' and '.join(what)} "
                f"differ: {old.get('data_dir')} vs {fingerprint.get('data_dir')}); give a new "
                f"--job_dir, or remove {backup_dir} to start over")
    tf.io.gfile.makedirs(checkpoint_dir)
    with tf.io.gfile.GFile(path, "w") as f:
        json.dump(fingerprint, f)


class StopOnNonFinite(keras.callbacks.Callback):
    """Stops training at the first non-finite loss, with the likely cause."""

    def __init__(self, cause):
        super().__init__()
        self.cause = cause  # () -> str: looked for only when the loss goes bad

    def _check(self, logs, where):
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(loss):
            self.model.stop_training = True
            raise TrainingError(f"the training loss became {loss} at {where}: {self.cause()}")

    def on_train_batch_end(self, batch, logs=None):
        self._check(logs, f"step {batch + 1}")

    def on_epoch_end(self, epoch, logs=None):
        self._check(logs, f"epoch {epoch + 1}")


class StopOnNonFiniteEpoch(StopOnNonFinite):
    """StopOnNonFinite at epoch ends only (ParameterServerStrategy has no batch hooks)."""

    on_train_batch_end = keras.callbacks.Callback.on_train_batch_end


def extreme_columns(dataset, max_batches: int = 50, limit: float = 1e6) -> list:
    """Transformed features (and the label) with non-finite or huge values in the first
    batches of (features, label) data: the likely cause of a non-finite loss."""
    found = {}
    for batch in dataset.take(max_batches):
        features, label = batch[0], batch[1]
        for name, t in list(features.items()) + [("label", label)]:
            if t.dtype.is_floating:
                v = t.numpy()
                bad = ~np.isfinite(v) | (np.abs(v) > limit)
                if bad.any():
                    found.setdefault(name, float(v[bad].ravel()[0]))
    return [f"{k} (e.g. {v:g})" for k, v in found.items()]


def check_writable(directory: str, flag: str = "--job_dir") -> None:
    """Creates `directory` and a probe file in it, so a read-only or unreachable job dir is
    one line at the start, not a traceback after training."""
    probe = os.path.join(directory, f".write_probe_{os.getpid()}")
    try:
        existed = tf.io.gfile.isdir(directory)
        tf.io.gfile.makedirs(directory)
        with tf.io.gfile.GFile(probe, "w") as f:
            f.write("")
        tf.io.gfile.remove(probe)
        if not existed:  # the run makes it when it writes there; a failed run leaves none
            tf.io.gfile.rmtree(directory)
    except (tf.errors.OpError, OSError) as e:
        raise TrainingError(f"{flag} {directory} is not writable "
                            f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None


def find_corrupt_shard(files) -> Optional[tuple]:
    """(shard, good records before the damage, error) of the first of `files` that cannot be
    read to its end (truncated or corrupted), else None."""
    for path in files:
        n = 0
        try:
            for _ in tf.data.TFRecordDataset(path, compression_type="GZIP"):
                n += 1
        except (tf.errors.DataLossError, tf.errors.OutOfRangeError,
                tf.errors.InvalidArgumentError) as e:
            return path, n, tf_message(e)
    return None


def check_shards(data_dir: str, sizes: Optional[dict], splits) -> None:
    """Refuses shards of `splits` that are not the files preprocess wrote: `sizes` is its
    summary's `files` (path under `data_dir` -> bytes; None for outputs of versions that did
    not list them). A gzip TFRecord shard cut exactly between two records reads as a shorter
    shard without any error, so its size is the only sign."""
    if not sizes:
        return
    for split in splits:
        want = {k: v for k, v in sizes.items() if k.startswith(split + "/")}
        have = {f"{split}/{os.path.basename(p)}": p for p in
                tf.io.gfile.glob(os.path.join(data_dir, split, "*.tfrecord.gz"))}
        for name, size in sorted(want.items()):
            path = os.path.join(data_dir, name)
            if name not in have:
                raise TrainingError(f"the TFRecord shard {path} that preprocess wrote is "
                                    "missing; re-run preprocess to write it again")
            found = tf.io.gfile.stat(path).length
            if found != size:
                raise TrainingError(
                    f"the TFRecord shard {path} is {found} bytes, preprocess wrote {size} "
                    "(summary.json): it was cut short or changed after the run; re-run "
                    "preprocess to write it again")
        extra = sorted(set(have) - set(want))
        if extra:
            raise TrainingError(f"{have[extra[0]]} is not a shard preprocess wrote "
                                f"(summary.json lists {len(want)} in {split}/): remove it, "
                                "or re-run preprocess")


def tf_message(error: Exception) -> str:
    """A TF op error's own words, without the function-node and op decoration."""
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", str(error))
    text = re.sub(r"\s*\[Op:[^\]]*\].*$", "", text, flags=re.S)
    return (text.strip().splitlines() or [type(error).__name__])[0][:200]


def corrupt_data_error(files, error: Exception) -> TrainingError:
    """The one-line error for a read that failed on damaged data, naming the shard."""
    found = find_corrupt_shard(files)
    if found is None:
        return TrainingError(f"reading the training data failed: {tf_message(error)}")
    path, n, why = found
    return TrainingError(f"the TFRecord shard {path} is truncated or corrupt after {n} good "
                         f"record(s) ({why}); re-run preprocess to write it again")


@contextlib.contextmanager
def naming_corrupt_shards(list_files):
    """Turns a read of damaged TFRecords inside the block into corrupt_data_error over the
    shards `list_files()` gives."""
    try:
        yield
    except tf.errors.DataLossError as e:
        raise corrupt_data_error(list_files(), e) from None
