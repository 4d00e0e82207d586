"""Keras callbacks of a training run: backup and restore, progress lines, per-epoch weight
checkpoints (the last N kept), TensorBoard, the non-finite guard, early stopping and
the per-epoch tuning metric."""
from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time

import tensorflow as tf
import tf_keras as keras

from training import guards
from training.config import TrainConfig
from training.reporting import report

log = logging.getLogger("training")


@contextlib.contextmanager
def heartbeat(what: str, every: float = 60.0):
    """Logs `what` with the minutes so far every `every` seconds until the block ends: a long
    step that reports nothing itself (YDF growing trees on millions of rows) shows it runs."""
    stop, started = threading.Event(), time.time()

    def beat():
        while not stop.wait(every):
            logging.getLogger("training").info("%s: %.1f min so far", what,
                                               (time.time() - started) / 60)
    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class ProgressLogger(keras.callbacks.Callback):
    """Logs where training starts (0, or the step restored from a backup) and its progress."""

    def __init__(self, total_steps: int, every: int = 100):
        super().__init__()
        self.total_steps = total_steps
        self.every = every
        self.resumed_from_step = 0
        self._t0 = time.time()

    def on_train_begin(self, logs=None):
        # BackupAndRestore has restored by now (it is earlier in the callback list).
        self.resumed_from_step = int(self.model.optimizer.iterations.numpy())
        if self.resumed_from_step:
            log.info("Resuming from step %d (restored from backup)", self.resumed_from_step)
        self._t0 = time.time()
        self._step = self.resumed_from_step

    def on_epoch_end(self, epoch, logs=None):
        log.info("epoch %d done: %s", epoch + 1,
                 {k: round(float(v), 4) for k, v in (logs or {}).items()})


class StepProgressLogger(ProgressLogger):
    """Adds a log line every `every` steps (not allowed under ParameterServerStrategy)."""

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1  # counted here: reading the optimizer's variable each step would sync
        step = self._step
        if step % self.every == 0:
            rate = (step - self.resumed_from_step) / max(time.time() - self._t0, 1e-9)
            log.info("step %d/%d (%.1f steps/s) loss=%s", step, self.total_steps, rate,
                     None if not logs else round(float(logs.get("loss", float("nan"))), 4))


class PruneCheckpoints(keras.callbacks.Callback):
    """Keeps the per-epoch weight checkpoints of the last `keep` epochs (local or gs://)."""

    def __init__(self, directory: str, keep: int):
        super().__init__()
        self.directory, self.keep = directory, keep

    def on_epoch_end(self, epoch, logs=None):
        prune_checkpoints(self.directory, self.keep)


def prune_checkpoints(directory: str, keep: int) -> list:
    """Deletes the files of all but the newest `keep` `epoch-NNN` checkpoints; returns the
    epochs removed."""
    try:
        names = tf.io.gfile.listdir(directory)
    except tf.errors.NotFoundError:
        return []
    of = {n.rstrip("/"): int(m.group(1)) for n in names
          if (m := re.match(r"epoch-(\d+)(?:\.|$)", n.rstrip("/")))}
    epochs = sorted(set(of.values()))
    old = epochs[:-keep] if keep else epochs
    for name, epoch in of.items():
        if epoch in old:
            path = os.path.join(directory, name)
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            else:
                tf.io.gfile.remove(path)
    return old


def make_callbacks(cfg: TrainConfig, ckpt_dir: str, log_dir: str, ps: bool, total_steps: int,
               patience: int, validates: bool, cause=lambda: "an extreme label or feature"):
    """(callbacks, the progress logger). Keras allows no batch-level callbacks under
    ParameterServerStrategy: epoch-level there."""
    progress = (ProgressLogger if ps else StepProgressLogger)(total_steps)
    callbacks = [
        # Restores epoch, step, weights and optimizer after a crash; deleted after success.
        keras.callbacks.BackupAndRestore(os.path.join(cfg.checkpoint_dir, "backup"),
                                         save_freq="epoch" if ps else cfg.checkpoint_steps,
                                         delete_checkpoint=True),
        progress,
        keras.callbacks.ModelCheckpoint(os.path.join(ckpt_dir, "epoch-{epoch:03d}"),
                                        save_weights_only=True),
        PruneCheckpoints(ckpt_dir, cfg.keep_checkpoints),
        keras.callbacks.TensorBoard(log_dir=log_dir, update_freq="epoch"),
        (guards.StopOnNonFiniteEpoch if ps else guards.StopOnNonFinite)(cause),
    ]
    if patience and validates:
        callbacks.append(keras.callbacks.EarlyStopping(
            monitor="val_loss", patience=patience, restore_best_weights=True))
    return callbacks, progress


class EpochReporter(keras.callbacks.Callback):
    """Reports `val_<metric>` after each epoch (when the epoch validated)."""

    def __init__(self, metric: str):
        super().__init__()
        self.metric = metric

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get("val_" + self.metric)
        if value is not None:
            report.report_metric(self.metric, value, epoch + 1)
