"""The network family: build, compile and fit the tf_keras model (wide & deep, DNN, CNN, or a
--model_module's) under the distribution strategy, with the data's defaults, early stopping on
a slice of the train split, and backup / restore."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
from typing import Optional

import tensorflow as tf
import tf_keras as keras

from preprocessing.features.module_files import load_module_function
from training import data as data_lib
from training import defaults, guards
from training.callbacks import EpochReporter, ProgressLogger, StepProgressLogger, make_callbacks
from training.config import TrainConfig
from training.models import missingness
from training.models.keras_models import build_model, compile_model
from training.reporting import report

log = logging.getLogger("training")


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


def _stored_missing(cfg: TrainConfig, info, train_files) -> dict:
    """What a missing row of each imputed column stores (missingness.imputed_values), read
    once per run: every training of the network (folds, refit) hides values with it."""
    if not cfg.hide_missing:
        return {}
    values = missingness.imputed_values(train_files, info, missingness.imputed_groups(info))
    if values:
        log.info("network: present values of %d imputed column(s) hidden as missing at "
                 "rate %g while training (--hide_missing)", len(values), cfg.hide_missing)
    return values


def _train_fn(cfg: TrainConfig, info, train_files, holdout: Optional[data_lib.Holdout],
              stored_missing: dict):
    """The training data's dataset_fn: shuffled, repeated, batched (`holdout` as in
    data_lib.make_dataset_fn), present values hidden as `stored_missing` at rate
    --hide_missing."""
    fn = data_lib.make_dataset_fn(train_files, info, cfg.batch_size, training=True,
                                  shuffle_buffer=cfg.shuffle_buffer, cache=cfg.cache,
                                  seed=cfg.seed, holdout=holdout)
    return missingness.with_hidden_values(fn, stored_missing, cfg.hide_missing, cfg.seed)


def _input_fns(cfg: TrainConfig, info, train_files, eval_files, train_rows: int,
               eval_rows: int, holdout: data_lib.Holdout, stored_missing: dict):
    """(train_fn, validation_fn, validation steps, holdout used). Tabular models validate
    (and stop early) on `holdout`, a hashed fold of the train split, so the eval split
    measures a model it never chose; image models validate on the eval split."""
    holdout = None if info.image else holdout
    train_fn = _train_fn(cfg, info, train_files, holdout, stored_missing)
    if holdout:
        val_rows = max(1, train_rows // holdout.folds)
        val_fn = data_lib.make_dataset_fn(train_files, info, cfg.batch_size, training=False,
                                          repeat=True, holdout=holdout.other())
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
        try:
            builder = load_module_function(cfg.model_module, "build_model")
        except (FileNotFoundError, AttributeError) as e:  # the file, or no build_model in it
            raise guards.TrainingError(f"--model_module: {e}") from e
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
            raise guards.TrainingError(f"build_model in {cfg.model_module} returned "
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


@dataclasses.dataclass
class NetworkRun:
    model: keras.Model
    cfg: TrainConfig            # with the data's defaults filled in
    history: dict
    chosen: dict                # defaults chosen from the data, and why
    steps_per_epoch: int
    progress: ProgressLogger
    seconds: float
    mixed: bool
    jit: bool
    patience: int
    holdout: Optional[data_lib.Holdout]
    stored_missing: dict        # what hidden values are stored as (_stored_missing)

    def metrics(self) -> dict:
        steps_done = int(self.model.optimizer.iterations.numpy())
        resumed = self.progress.resumed_from_step
        return {
            "history": self.history,
            "epochs_run": len(next(iter(self.history.values()), [])),
            "steps_per_epoch": self.steps_per_epoch, "final_step": steps_done,
            "resumed_from_step": resumed, "train_seconds": round(self.seconds, 2),
            "examples_per_second": round((steps_done - resumed) * self.cfg.batch_size
                                         / max(self.seconds, 1e-9), 1),
            "defaults": self.chosen,
            "precision": "mixed_float16" if self.mixed else "float32", "jit_compile": self.jit,
            "validation": f"train holdout (1 in {self.holdout.folds} records)"
                          if self.holdout else "eval split",
            "early_stopping_patience": self.patience,
        }


def fit_network(cfg: TrainConfig, info, kind: str, strategy, chief: bool, train_files,
                eval_files, scratch: Optional[str], choice_folds: int = 1) -> NetworkRun:
    """Fits the network on the train split less its validation slice (tables: fold 0 of
    `choice_folds` when the model choice is cross-fitted); non-chief workers write their
    share of (collective) saves under `scratch`."""
    train_rows = info.split_rows.get("train") or 10_000
    cfg, chosen, steps_per_epoch, epochs = _schedule(cfg, info, train_rows)
    log.info("distribution=%s replicas=%d chief=%s task=%s epochs=%d steps/epoch=%d",
             kind, strategy.num_replicas_in_sync, chief, info.task, epochs, steps_per_epoch)
    stored_missing = _stored_missing(cfg, info, train_files)
    train_fn, val_fn, val_steps, holdout = _input_fns(
        cfg, info, train_files, eval_files, train_rows, info.split_rows.get("eval") or 1_000,
        data_lib.choice_fold(0, choice_folds).other(), stored_missing)
    patience, why = defaults.early_stopping(cfg.early_stopping_patience, bool(info.image),
                                            train_rows // data_lib.HOLDOUT_BUCKETS,
                                            cross_fitted=choice_folds > 1)
    chosen.setdefault("early_stopping_patience", {"value": patience, "why": why})
    log.info("early_stopping_patience=%s (%s)", patience, why)
    model, mixed, jit = _build_compiled(cfg, info, strategy, kind, epochs * steps_per_epoch)
    train_data, val_kwargs = _fit_inputs(kind, strategy, train_fn, val_fn, val_steps)
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
    callbacks, progress = make_callbacks(cfg, ckpt_dir, log_dir, kind == "parameter_server",
                                         epochs * steps_per_epoch, patience, bool(val_kwargs),
                                         cause)
    tag = report.metric_to_report(cfg.hypertune_metric, info.task)
    if chief and tag:
        callbacks.append(EpochReporter(tag))
    started = time.time()
    history = model.fit(train_data, epochs=epochs, steps_per_epoch=steps_per_epoch,
                        callbacks=callbacks, verbose=cfg.verbose if chief else 0, **val_kwargs)
    hist = {k: [float(v) for v in vs] for k, vs in history.history.items()}
    return NetworkRun(model=model, cfg=cfg, history=hist, chosen=chosen,
                      steps_per_epoch=steps_per_epoch, progress=progress,
                      seconds=time.time() - started, mixed=mixed, jit=jit, patience=patience,
                      holdout=holdout, stored_missing=stored_missing)


def refit_network(run: NetworkRun, info, strategy, kind: str, train_files,
                  holdout: Optional[data_lib.Holdout] = None) -> keras.Model:
    """The network trained again the same way (seed, batch size, steps, schedule) on the
    whole train split, its validation slice included (or less another fold: `holdout`).
    Called only where that slice chose nothing but the family (no early stopping): on a
    small table it is a tenth more rows."""
    cfg = run.cfg
    epochs = len(run.history.get("loss", [])) or cfg.epochs
    keras.utils.set_random_seed(cfg.seed)
    train_fn = _train_fn(cfg, info, train_files, holdout, run.stored_missing)
    total = epochs * run.steps_per_epoch
    model, _, _ = _build_compiled(cfg, info, strategy, kind, total)
    started = time.time()
    model.fit(train_fn(), epochs=epochs, steps_per_epoch=run.steps_per_epoch, verbose=0,
              callbacks=[StepProgressLogger(total),
                         guards.StopOnNonFinite(lambda: "an extreme label or feature")])
    log.info("network trained again on %s: %d steps in %.1f s",
             f"{len(train_files)} shard(s)" if holdout is None else
             f"the train split less fold {holdout.fold} of {holdout.folds}", total,
             time.time() - started)
    return model
