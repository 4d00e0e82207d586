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

import concurrent.futures
import contextlib
import functools
import logging
import os
import shutil
import tempfile
import time

import tensorflow as tf
import tf_keras as keras

from preprocessing.reference.slices import SliceError
from training import choice_rules, defaults, guards
from training import data as data_lib
from training.config import NETWORKS, TrainConfig
from training.exporting import golden_rows
from training.exporting.export import export_model, next_version_dir
from training.exporting.serving_config import SERVING_DIR, serving_base_path, write_serving_config
from training.models.forests import train_forests
from training.models.network import fit_network, refit_network
from training.models.trees import grow_shapes
from training.reporting import report
from training.reporting.eval_slices import check_slice_by, eval_slices
from training.reporting.importance import forest_importance, permutation_importance
from training.reporting.scoring import exact_eval
from training.selection import keep_one

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


@contextlib.contextmanager
def restored_op_determinism():
    """TensorFlow's op determinism as it was before, after the run: a process that trains
    twice (tests, a notebook) gets each run's own setting. TensorFlow's public API can only
    turn it on; its config module can turn it off."""
    from tensorflow.python.framework import config as tf_runtime_config
    before = tf_runtime_config.is_op_determinism_enabled()
    try:
        yield
    finally:
        if not before and tf_runtime_config.is_op_determinism_enabled():
            tf_runtime_config.disable_op_determinism()


def train_and_evaluate(cfg: TrainConfig) -> dict:
    """Trains on `cfg.data_dir`, evaluates, exports; returns the metrics dict (chief). A
    damaged TFRecord shard is a TrainingError naming it."""
    with guards.naming_corrupt_shards(lambda: data_lib.split_files(cfg.data_dir, "train")
                                      + data_lib.split_files(cfg.data_dir, "eval",
                                                            missing_ok=True)), \
            restored_op_determinism():
        return _train_and_evaluate(cfg)


def check_rows_for_a_choice(cfg: TrainConfig, info, families: tuple) -> None:
    """--model auto trains both families on folds of the train split and keeps one: a split
    under MIN_DECISION_ROWS rows cannot fill the folds (3 rows trained for 70 s, then failed
    on an empty fold). Said at launch, in one line."""
    rows = info.split_rows.get("train") or 0
    if cfg.model == "auto" and len(families) == 2 and rows < choice_rules.MIN_DECISION_ROWS:
        raise guards.TrainingError(
            f"the train split has {rows} row(s): --model auto chooses between models on "
            f"held-out rows and needs at least {choice_rules.MIN_DECISION_ROWS}; add rows (one "
            "model, --model wide_deep or boosted_trees, needs a non-empty eval split)")


def model_families(cfg: TrainConfig, info, kind: str) -> tuple:
    """(the families to train: ("network",), ("trees",) or both, why). Both for `--model
    auto` on a table trained on one process, unless it has over SEARCH_MAX_CLASSES classes
    and train rows x classes (x FOLDS_TREE_COST on a small table) over
    AUTO_TREE_MAX_ROW_CLASSES; a multi-worker cluster trains the network, the distributed
    path."""
    rows = int(info.split_rows.get("train") or 0)
    folds = rows < defaults.SMALL_TRAIN_ROWS
    cost = rows * info.n_classes * (defaults.FOLDS_TREE_COST if folds else 1)
    many = info.task == "classification" and info.n_classes > defaults.SEARCH_MAX_CLASSES \
        and cost > defaults.AUTO_TREE_MAX_ROW_CLASSES
    if info.image or cfg.model_module or cfg.model in NETWORKS:
        return ("network",), "--model"
    if cfg.model == "boosted_trees":
        if many:
            log.warning("--model boosted_trees: %d classes, a tree per class per round (slow; "
                        "--model wide_deep scales with them)", info.n_classes)
        return ("trees",), "--model"
    if cfg.model == "auto" and kind in ("multi_worker", "parameter_server"):
        why = f"--model auto under a {kind} cluster: the network (boosted_trees trains on " \
              f"one process)"
    elif cfg.model == "auto" and many:
        per_fold = f" x {defaults.FOLDS_TREE_COST} (cross-fitted folds under " \
            f"{defaults.SMALL_TRAIN_ROWS:,} rows)" if folds else ""
        why = (f"--model auto: {info.n_classes} classes x {rows:,} train rows{per_fold}, over "
               f"{defaults.AUTO_TREE_MAX_ROW_CLASSES:,}: the network alone (the trees grow a "
               f"tree per class per round)")
    else:
        return ("network", "trees"), "both families"
    log.info(why)
    return ("network",), why


def _checked_start(cfg: TrainConfig, kind: str, chief: bool) -> tuple:
    """(the data's FeatureInfo, (deterministic, why), the --slice_by Slicer or None) once
    the outputs are writable (chief), the tuning metric fits the task and the data can be
    sliced as asked; TensorFlow's op determinism on when chosen."""
    if chief:
        for flag in ("job_dir", "model_dir", "checkpoint_dir", "tensorboard_dir"):
            guards.check_writable(getattr(cfg, flag), "--" + flag)
    info = data_lib.load_feature_info(cfg.data_dir, cfg.label_key)
    try:
        slicer = check_slice_by(cfg.slice_by, info.raw_schema, cfg.data_dir)
    except SliceError as e:
        raise guards.TrainingError(str(e)) from None
    if cfg.hypertune_metric and (cfg.hypertune_metric == "accuracy") != \
            (info.task == "classification"):
        raise guards.TrainingError(f"--hypertune_metric {cfg.hypertune_metric} is not a "
                                   f"figure of a {info.task} model")
    deterministic = defaults.determinism(cfg.deterministic, kind,
                                         info.split_rows.get("train") or 0)
    log.info("deterministic=%s (%s)", *deterministic)
    if deterministic[0]:
        tf.config.experimental.enable_op_determinism()
    return info, deterministic, slicer


def _fit_families(cfg: TrainConfig, info, kind: str, strategy, chief: bool, families,
                  train_files, eval_files, folds: int):
    """(cfg as the network resolved it, network fit or None, {TreesShape: trees run} or
    None, {family: (model, info it serves with)}, {family: figures}) of the families
    trained on fold 0's train rows; None on a worker of a cluster once its part is done."""
    net = trees = None
    candidates, runs = {}, {}
    both = "network" in families and "trees" in families
    fold0 = data_lib.choice_fold(0, folds).other()  # the trees' rows beside a network

    def grow(cfg, holdout):
        if holdout is None and (cfg.num_forests or 1) > 1:  # the trees alone, kept as grown
            run = train_forests(cfg, info, train_files, cfg.num_forests)
            return {run.shape: run}
        return grow_shapes(cfg, info, train_files, holdout, stop_on_fold=folds > 1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # On one process the trees grow beside the network (YDF releases the GIL; on a
        # small split it trains on one thread): the same trees as grown after it.
        grown = pool.submit(grow, cfg, fold0) if both and kind == "single" else None
        if "network" in families:
            scratch = None if chief else tempfile.mkdtemp(prefix="worker_scratch_")
            net = fit_network(cfg, info, kind, strategy, chief, train_files, eval_files,
                              scratch, folds)
            cfg = net.cfg
            if not chief:  # the collective save needs every worker; the chief's is the export
                export_model(net.model, cfg.data_dir, info,
                             next_version_dir(os.path.join(scratch, "export")))
                shutil.rmtree(scratch, ignore_errors=True)
                return None
            runs[net.model.name] = (net.model, info)
            candidates[net.model.name] = {"train_seconds": round(net.seconds, 2)}
    if "trees" in families:
        trees = grown.result() if grown else grow(cfg, fold0 if runs else None)
        first = next(iter(trees.values()))  # until keep_one has chosen the shape
        runs["boosted_trees"] = (first.model, first.info)
        candidates["boosted_trees"] = {
            "train_seconds": round(sum(t.seconds for t in trees.values()), 2),
            "rows": first.rows, "num_trees": first.num_trees,
            "num_forests": {"value": first.forests, "why": "--num_forests" if cfg.num_forests
                            else "one forest (--num_forests unset)"},
            "early_stopping": first.early_stopping,
            # the exported forest's when the trees are the only family (keep_one: the refit's)
            "ydf_importance": forest_importance(first.forest) if len(families) == 1 else None,
            "category_encoding": {"value": first.shape.encoding,
                                  "features": first.encoded},
            "categorical_algorithm": {"value": first.shape.algorithm},
            "min_examples": {"value": first.shape.leaf}}
    return cfg, net, trees, runs, candidates


def _refit_on_eval(cfg: TrainConfig, info, folds: tuple, eval_files) -> tuple:
    """(defaults.refit_on_eval's (value, why), golden_rows.Added or None),
    logged; a --refit_on_eval that cannot apply is refused before any training. The golden
    set's rows are left out (training/exporting/golden_rows.py)."""
    with_eval = defaults.refit_on_eval(cfg.refit_on_eval, folds[0],
                                       int(info.split_rows.get("eval") or 0), cfg.slice_by)
    if cfg.refit_on_eval and folds[0] < 2:
        raise guards.TrainingError(f"--refit_on_eval needs --model auto to choose on "
                                   f"cross-fitted folds; here {folds[1]}")
    added = None
    if with_eval[0]:
        added = golden_rows.eval_less_golden(cfg.data_dir, info, eval_files)
        with_eval = (added.files is not None, f"{with_eval[1]}: {added.why}")
        added = added if added.files is not None else None
    log.info("refit_on_eval=%s (%s)", *with_eval)
    return with_eval, added


def _keep_one(cfg: TrainConfig, info, runs, candidates, train_files, eval_files, batch: int,
              refit, folds: int, trees, added) -> tuple:
    """selection.keep_one, the model exported trained a last time with the eval rows
    `added` (_refit_on_eval) when given; the records written for it are removed after."""
    try:
        return keep_one(cfg, info, runs, candidates, train_files, eval_files, batch, refit,
                        folds, trees, exported_from=(
                            train_files + added.files,
                            int(info.split_rows.get("train") or 0) + added.rows)
                        if added else None)
    finally:
        if added and added.files != list(eval_files):
            shutil.rmtree(os.path.dirname(added.files[0]), ignore_errors=True)


def _importance(model, eval_files, served, batch: int, seed: int, rows: int):
    """The kept model's permutation importance (training/importance.py), or None: a figure
    for the report is never worth the trained model."""
    started = time.time()
    try:
        out = permutation_importance(model, eval_files, served, batch, seed, rows) \
            if rows else None
    except Exception as e:  # noqa: BLE001 (the export and metrics.json are the promise)
        log.warning("training: no feature importance (%s: %s)", type(e).__name__, e)
        return None
    if out:
        log.info("feature importance over %d eval rows in %.1f s", out["rows"],
                 time.time() - started)
    return out


def _train_and_evaluate(cfg: TrainConfig) -> dict:
    keras.utils.set_random_seed(cfg.seed)
    if cfg.model == "boosted_trees" and not is_chief():
        log.info("boosted_trees trains on the chief alone: this %s task has nothing to do",
                 task_info()[0])
        return {"chief": False}
    kind = "single" if cfg.model == "boosted_trees" else resolve_distribution(cfg)
    strategy = make_strategy(kind)
    chief = is_chief()
    info, deterministic, slicer = _checked_start(cfg, kind, chief)
    train_files = data_lib.split_files(cfg.data_dir, "train")
    families, families_why = model_families(cfg, info, kind)
    check_rows_for_a_choice(cfg, info, families)
    no_eval, eval_files, folds, trees_cap = _plan(cfg, info, kind, families)
    with_eval, added = _refit_on_eval(cfg, info, folds, eval_files)
    fitted = _fit_families(cfg, info, kind, strategy, chief, families, train_files,
                           eval_files, folds[0])
    if fitted is None:  # a worker of a cluster: the chief exports
        return {"chief": False}
    cfg, net, trees, runs, candidates = fitted
    batch = cfg.batch_size or 1024
    refit = None
    if "network" in families and "trees" in families and kind == "single" and not net.patience:
        # The validation slice chose a family and nothing else: the network kept is trained
        # again with it (a multi-worker fit would need the whole cluster again).
        refit = functools.partial(refit_network, net, info, strategy, kind,
                                  train_files=train_files)
    chosen, model, served, final, why, (exported, exported_info) = _keep_one(
        cfg, info, runs, candidates, train_files, eval_files, batch, refit, folds[0], trees,
        added)
    if len(families) == 1:
        why = families_why
    if no_eval:
        final = dict(candidates[chosen]["validation"], measured_on=(
            f"the validation rows of the choice ({folds[0]} fold(s) of the train split): "
            f"the eval split is empty"))
        log.warning("training: the eval split is empty; the figures are %s", final)
    try:  # the test split judges nothing here; training.tune shows it beside the best trial
        test = exact_eval(exported, data_lib.split_files(cfg.data_dir, "test"),
                          exported_info, batch)
    except FileNotFoundError:
        test = None
    importance = _importance(model, eval_files, served, batch, cfg.seed, cfg.importance_rows)
    export_dir = export_model(exported, cfg.data_dir, exported_info,
                              next_version_dir(cfg.model_dir), family=chosen,
                              learned_golden=added.why if added and added.learned_golden
                              else None)
    metrics = {
        "task": info.task, "label": info.label, "distribution": kind,
        "replicas": strategy.num_replicas_in_sync, "eval": final, "test": test,
        "model": {"family": chosen, "requested": cfg.model_module or cfg.model,
                  "chosen_by": why, "candidates": candidates,
                  "choice_folds": {"value": folds[0], "why": folds[1]},
                  "num_trees": {"value": trees_cap[0], "grown_again_to": trees_cap[1],
                                "why": trees_cap[2]},
                  "refit_on_eval": {"value": with_eval[0], "why": with_eval[1]}},
        "importance": importance, "export_dir": export_dir, "config": cfg.to_dict(),
        "label_scaling": exported_info.label_scaler.to_dict() if exported_info.label_scaler
        else None,
        "deterministic": {"value": deterministic[0], "why": deterministic[1]},
        "serving_config": write_serving_config(
            os.path.join(cfg.job_dir, SERVING_DIR), cfg.serving_model_name,
            cfg.serving_base_path or serving_base_path(cfg.model_dir)),
    }
    if "network" in families:
        metrics.update(net.metrics())
    if slicer is not None:
        metrics["eval_slices"] = eval_slices(slicer, export_dir, cfg.data_dir, info.raw_schema)
    return _reported(cfg, info, metrics)


def _plan(cfg: TrainConfig, info, kind: str, families: tuple) -> tuple:
    """(whether the eval split is empty, its files, defaults.choice_folds's (folds, why),
    defaults.num_trees's (cap, grown again to, why)), logged."""
    no_eval = data_lib.check_eval_split(cfg.data_dir, info.split_rows, len(families) == 2)
    eval_files = data_lib.split_files(cfg.data_dir, "eval", missing_ok=no_eval)
    folds = defaults.choice_folds(cfg.choice_folds, kind, info.split_rows.get("train") or 0,
                                  len(families) == 2 and cfg.model == "auto",
                                  cfg.early_stopping_patience)
    log.info("choice_folds=%s (%s)", *folds)
    trees_cap = defaults.num_trees(cfg.num_trees, folds[0])
    log.info("num_trees=%s (%s)", trees_cap[0], trees_cap[2])
    return no_eval, eval_files, folds, trees_cap


def _reported(cfg: TrainConfig, info, metrics: dict) -> dict:
    """`metrics` with its warnings, written to the job's report, and the tuner's figure
    reported last (the trial's result is the final line)."""
    final, history = metrics["eval"], metrics.get("history", {})
    warnings = defaults.collapse_warnings(info.task, info.n_classes, final, history)
    for w in warnings:
        log.warning("training: %s", w)
    metrics["warnings"] = warnings
    report.write_report(cfg.job_dir, metrics)
    log.info("eval %s; exported to %s", final, metrics["export_dir"])
    tag = report.metric_to_report(cfg.hypertune_metric, info.task)
    if tag:
        report.report_metric(tag, final[tag], len(history.get("loss", [])) + 1)
    return metrics
