"""train_and_evaluate: distributed training on the preprocess output, then export.

Strategy (from `--distribution`, `auto` reads TF_CONFIG):
  single            one device (default strategy)
  mirrored          all local GPUs (MirroredStrategy)
  multi_worker      TF_CONFIG workers, synchronous all-reduce (MultiWorkerMirroredStrategy)
  parameter_server  TF_CONFIG with `ps` and a `chief` (ParameterServerStrategy); workers and
                    ps tasks run a tf.distribute.Server and wait for the chief's work.
Only the chief writes the export, metrics.json and the curves PNG.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import shutil
import tempfile
import time

import numpy as np
import tensorflow as tf
import tf_keras as keras

from preprocessing.evaluation import EvalSums
from training import data as data_lib
from training import defaults, guards, report
from training.config import TrainConfig
from training.export import export_model, next_version_dir
from training.model import build_model, compile_model
from training.serving_config import SERVING_DIR, serving_base_path, write_serving_config

log = logging.getLogger("training")


# ---- cluster / strategy ------------------------------------------------------------------------
def tf_config() -> dict:
    return guards.read_tf_config(os.environ.get("TF_CONFIG"))


def task_info() -> tuple:
    t = tf_config().get("task") or {}
    return t.get("type"), int(t.get("index", 0))


def is_chief() -> bool:
    cluster = tf_config().get("cluster") or {}
    ttype, index = task_info()
    if ttype is None:
        return True
    if "chief" in cluster:
        return ttype == "chief"
    return ttype == "worker" and index == 0


def resolve_distribution(cfg: TrainConfig) -> str:
    if cfg.distribution != "auto":
        return cfg.distribution
    cluster = tf_config().get("cluster") or {}
    if cluster.get("ps"):
        return "parameter_server"
    if len(cluster.get("worker", [])) + len(cluster.get("chief", [])) > 1:
        return "multi_worker"
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return "mirrored"
    return "single"


def make_strategy(kind: str):
    if kind == "single":
        return tf.distribute.get_strategy()
    if kind == "mirrored":
        return tf.distribute.MirroredStrategy()
    if kind == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        # Workers and ps serve the chief's requests until they are stopped.
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                      task_index=resolver.task_id, protocol="grpc", start=True)
        log.info("%s %d serving for the parameter-server chief", resolver.task_type, resolver.task_id)
        server.join()
    return tf.distribute.ParameterServerStrategy(resolver)


# ---- callbacks -----------------------------------------------------------------------------------
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


# ---- evaluation ---------------------------------------------------------------------------------
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
    import re
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


def exact_eval(model, files, info, batch_size: int) -> dict:
    """Metrics over the whole eval split exactly once, on this process (no sharding).

    Per-epoch validation under multi-worker training repeats data to keep workers in step;
    the final figure in metrics.json must be exact, so batch prediction can reproduce it.
    """
    ds = data_lib.make_dataset_fn(files, info, batch_size, training=False, scale_label=False)()
    predict = tf.function(lambda x: model(x, training=False))
    sums = EvalSums()
    for features, label, weight in ds:
        out = predict(features).numpy()
        y, w = label.numpy(), weight.numpy()
        if info.task == "regression":
            pred = out[:, 0] if info.label_scaler is None else \
                info.label_scaler.inverse(out[:, 0]).numpy()
            sums.add_regression(pred, y[:, 0])
        else:
            sums.add_classification(np.argmax(out, -1) == y, w)
    return sums.metrics(info.task)


# ---- the entry point -----------------------------------------------------------------------------
@contextlib.contextmanager
def precision_policy(mixed: bool):
    """Keras' global dtype policy while the model is built: mixed_float16 (float16 compute,
    float32 variables) or float32; always float32 again afterwards."""
    keras.mixed_precision.set_global_policy("mixed_float16" if mixed else "float32")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


def float32_outputs(model: keras.Model) -> keras.Model:
    """The model with its outputs cast to float32: losses and exported predictions stay
    float32 under mixed precision (Keras' advice for the last layer)."""
    outputs = tf.nest.map_structure(
        lambda t: keras.layers.Activation("linear", dtype="float32")(t), model.outputs)
    return keras.Model(model.input, outputs[0] if len(outputs) == 1 else outputs,
                       name=model.name)


def _schedule(cfg: TrainConfig, info, train_rows: int):
    """(cfg with the data's defaults filled in, what was chosen and why, steps per epoch,
    epochs)."""
    batch_size, auto_epochs, schedule, chosen = defaults.choose(
        train_rows, cfg.batch_size, cfg.epochs, cfg.lr_schedule, cfg.train_steps,
        cfg.steps_per_epoch)
    for name, c in chosen.items():
        log.info("%s=%s (%s)", name, c["value"], c["why"])
    cfg = dataclasses.replace(cfg, batch_size=batch_size, epochs=auto_epochs,
                              lr_schedule=schedule)
    steps_per_epoch = cfg.steps_per_epoch or data_lib.steps_for(train_rows, cfg.batch_size)
    epochs = cfg.epochs
    if cfg.train_steps:
        steps_per_epoch = min(steps_per_epoch, cfg.train_steps)
        epochs = math.ceil(cfg.train_steps / steps_per_epoch)
    return cfg, chosen, steps_per_epoch, epochs


def _input_fns(cfg: TrainConfig, info, train_files, eval_files, train_rows: int,
               eval_rows: int):
    """(train_fn, validation_fn, validation steps, holdout). Tabular models validate (and
    stop early) on a hashed slice of the train split, so the eval split measures a model it
    never chose; image models validate on the eval split."""
    holdout = None if info.image else "exclude"
    train_fn = data_lib.make_dataset_fn(train_files, info, cfg.batch_size, training=True,
                                        shuffle_buffer=cfg.shuffle_buffer, cache=cfg.cache,
                                        seed=cfg.seed, holdout=holdout)
    if holdout:
        val_rows = max(1, train_rows // data_lib.HOLDOUT_BUCKETS)
        val_fn = data_lib.make_dataset_fn(train_files, info, cfg.batch_size, training=False,
                                          repeat=True, holdout="only")
    else:
        val_rows = eval_rows
        val_fn = data_lib.make_dataset_fn(eval_files, info, cfg.batch_size, training=False,
                                          repeat=True)
    return train_fn, val_fn, cfg.eval_steps or data_lib.steps_for(val_rows, cfg.batch_size), \
        holdout


def _build_compiled(cfg: TrainConfig, info, strategy, kind: str, total_steps: int):
    """(compiled model, mixed precision used, XLA used), built under the strategy."""
    builder = build_model
    if cfg.model_module:
        from preprocessing.modules import load_module_function
        builder = load_module_function(cfg.model_module, "build_model")
    mixed = cfg.mixed_precision and bool(tf.config.list_logical_devices("GPU"))
    if cfg.mixed_precision and not mixed:
        log.warning("training: --mixed_precision needs a GPU (float16 is slower on CPU): "
                    "training in float32")
    jit = cfg.jit_compile and kind != "parameter_server"
    if cfg.jit_compile and not jit:
        log.warning("training: --jit_compile is not used under ParameterServerStrategy")
    with strategy.scope(), precision_policy(mixed):
        model = builder(info, cfg)
        if not isinstance(model, keras.Model):
            raise TypeError(f"build_model in {cfg.model_module} returned "
                            f"{type(model).__name__}, not a tf_keras Model (Keras 2: "
                            "`import tf_keras as keras`)")
        if mixed:
            model = float32_outputs(model)
        compile_model(model, info, cfg, total_steps=total_steps, jit_compile=jit,
                      **({"steps_per_execution": 1} if kind == "parameter_server" else {}))
    return model, mixed, jit


def _fit_inputs(kind: str, strategy, train_fn, val_fn, val_steps: int):
    """(training data, validation keyword arguments of fit) for the strategy."""
    if kind == "parameter_server":  # the chief evaluates exactly instead of inline validation
        return keras.utils.experimental.DatasetCreator(train_fn), {}
    if kind == "single":
        return train_fn(), {"validation_data": val_fn(), "validation_steps": val_steps}
    return (strategy.distribute_datasets_from_function(train_fn),
            {"validation_data": strategy.distribute_datasets_from_function(val_fn),
             "validation_steps": val_steps})


def _callbacks(cfg: TrainConfig, ckpt_dir: str, log_dir: str, ps: bool, total_steps: int,
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


def train_and_evaluate(cfg: TrainConfig) -> dict:
    """Trains on `cfg.data_dir`, evaluates, exports; returns the metrics dict (chief). A
    damaged TFRecord shard is a TrainingError naming it."""
    with guards.naming_corrupt_shards(lambda: data_lib.split_files(cfg.data_dir, "train")
                                      + data_lib.split_files(cfg.data_dir, "eval")):
        return _train_and_evaluate(cfg)


def _train_and_evaluate(cfg: TrainConfig) -> dict:
    keras.utils.set_random_seed(cfg.seed)
    kind = resolve_distribution(cfg)
    strategy = make_strategy(kind)
    chief = is_chief()
    if chief:
        for flag in ("job_dir", "model_dir", "checkpoint_dir", "tensorboard_dir"):
            guards.check_writable(getattr(cfg, flag), "--" + flag)
    info = data_lib.load_feature_info(cfg.data_dir, cfg.label_key)
    train_files = data_lib.split_files(cfg.data_dir, "train")
    eval_files = data_lib.split_files(cfg.data_dir, "eval")
    train_rows = info.split_rows.get("train") or 10_000
    cfg, chosen, steps_per_epoch, epochs = _schedule(cfg, info, train_rows)
    log.info("distribution=%s replicas=%d chief=%s task=%s epochs=%d steps/epoch=%d",
             kind, strategy.num_replicas_in_sync, chief, info.task, epochs, steps_per_epoch)
    train_fn, val_fn, val_steps, holdout = _input_fns(
        cfg, info, train_files, eval_files, train_rows, info.split_rows.get("eval") or 1_000)
    patience = cfg.early_stopping_patience
    if patience is None:
        patience = 0 if info.image else defaults.EARLY_STOPPING_PATIENCE
    model, mixed, jit = _build_compiled(cfg, info, strategy, kind, epochs * steps_per_epoch)
    train_data, val_kwargs = _fit_inputs(kind, strategy, train_fn, val_fn, val_steps)

    # Non-chief workers write their share of (collective) saves to scratch dirs.
    scratch = None if chief else tempfile.mkdtemp(prefix="worker_scratch_")
    ckpt_dir = cfg.checkpoint_dir if chief else os.path.join(scratch, "ckpt")
    log_dir = cfg.tensorboard_dir if chief else os.path.join(scratch, "logs")
    if chief:  # a checkpoint made on other data is not resumed
        guards.check_resume(cfg.checkpoint_dir, guards.data_fingerprint(cfg.data_dir),
                            os.path.join(cfg.checkpoint_dir, "backup"))

    def cause() -> str:
        found = guards.extreme_columns(data_lib.make_dataset_fn(
            train_files, info, cfg.batch_size, training=False)())
        return ("extreme values in " + ", ".join(found) if found else
                "no extreme value seen in the first batches; try a lower --learning_rate")
    callbacks, progress = _callbacks(cfg, ckpt_dir, log_dir, kind == "parameter_server",
                                     epochs * steps_per_epoch, patience, bool(val_kwargs),
                                     cause)
    started = time.time()
    history = model.fit(train_data, epochs=epochs, steps_per_epoch=steps_per_epoch,
                        callbacks=callbacks, verbose=cfg.verbose if chief else 0, **val_kwargs)
    train_seconds = time.time() - started

    export_base = cfg.model_dir if chief else os.path.join(scratch, "export")
    export_dir = export_model(model, cfg.data_dir, info, next_version_dir(export_base))
    if not chief:
        shutil.rmtree(scratch, ignore_errors=True)
        return {"chief": False}
    final = exact_eval(model, eval_files, info, cfg.batch_size)
    hist = {k: [float(v) for v in vs] for k, vs in history.history.items()}
    warnings = defaults.collapse_warnings(info.task, info.n_classes, final, hist)
    for w in warnings:
        log.warning("training: %s", w)
    steps_done = int(model.optimizer.iterations.numpy())
    metrics = {
        "task": info.task, "label": info.label, "distribution": kind,
        "replicas": strategy.num_replicas_in_sync, "eval": final, "history": hist,
        "epochs_run": len(next(iter(hist.values()), [])), "steps_per_epoch": steps_per_epoch,
        "final_step": steps_done, "resumed_from_step": progress.resumed_from_step,
        "train_seconds": round(train_seconds, 2),
        "examples_per_second": round((steps_done - progress.resumed_from_step)
                                     * cfg.batch_size / max(train_seconds, 1e-9), 1),
        "export_dir": export_dir, "config": cfg.to_dict(), "defaults": chosen,
        "precision": "mixed_float16" if mixed else "float32", "jit_compile": jit,
        "label_scaling": info.label_scaler.to_dict() if info.label_scaler else None,
        "validation": "train holdout (1 in 10 records)" if holdout else "eval split",
        "early_stopping_patience": patience,
        "warnings": warnings,
        "serving_config": write_serving_config(
            os.path.join(cfg.job_dir, SERVING_DIR), cfg.serving_model_name,
            cfg.serving_base_path or serving_base_path(cfg.model_dir)),
    }
    report.write_report(cfg.job_dir, metrics)
    log.info("eval %s; exported to %s", final, export_dir)
    return metrics
