"""`--model auto`: scoring the candidates on the same rows and keeping one.

The candidates are the network, the boosted trees and their blend (training/models/blend.py),
each scored row by row (row_losses) on the validation slice: a hashed 1-in-10 slice of the
train split that neither family trained on (the eval split chooses nothing). "Clearly lower"
below means a mean loss lower by more than one standard error of the paired difference on
those rows.

- The blend is kept by default: the average of two different models is rarely worse than
  the better one and often better than both.
- If one family is clearly lower than the other, averaging in the worse one would cost:
  that family is kept, unless the blend is clearly lower than it.
- A slice under MIN_DECISION_ROWS rows decides nothing (the blend is kept): a standard
  error from a few rows is itself noise (a 5-row slice of a 150-row table once chose the
  trees, whose error on the rows that followed was the largest of the three).
"""
from __future__ import annotations

import logging
from typing import Callable, Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from preprocessing.reference.evaluation import EvalSums
from training import data as data_lib
from training.config import TrainConfig
from training.models.blend import BLEND, BlendModel
from training.models.trees import train_trees

log = logging.getLogger("training")

TREES = "boosted_trees"
MIN_DECISION_ROWS = 30   # a smaller validation slice keeps the blend


def scored_rows(model, files, info, batch_size: int, holdout=None) -> tuple:
    """(metrics, each row's loss (row_losses); rows of a class never seen in train are left
    out), over `files` (the `holdout` slice of them) in file order."""
    ds = data_lib.make_dataset_fn(files, info, batch_size, training=False, scale_label=False,
                                  holdout=holdout)()
    predict = tf.function(lambda x: model(x, training=False), reduce_retracing=True)
    sums, losses = EvalSums(), []
    for features, label, weight in ds:
        out = predict(features).numpy()
        y, w = label.numpy(), weight.numpy()
        if info.task == "regression":
            pred = out[:, 0] if info.label_scaler is None else \
                info.label_scaler.inverse(out[:, 0]).numpy()
            sums.add_regression(pred, y[:, 0])
            losses.append(row_losses(pred, y[:, 0]))
        else:
            sums.add_classification(np.argmax(out, -1) == y, w)
            losses.append(row_losses(out, y, w))
    return sums.metrics(info.task), (np.concatenate(losses) if losses else np.zeros(0))


def row_losses(out: np.ndarray, y: np.ndarray, weight: Optional[np.ndarray] = None):
    """Per-row losses: regression (`weight` None) the squared error of the predictions
    `out`; classification the Brier score of the probabilities from `out` (logits or
    log-probabilities) for the rows of weight > 0. A 0/1 loss on a slice of a few hundred
    rows rarely tells two classifiers apart; probabilities do, and bounded, so one row
    cannot decide."""
    if weight is None:
        return (np.asarray(out, np.float64) - y) ** 2
    logits = np.asarray(out, np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    seen = weight > 0
    onehot = np.eye(logits.shape[-1])[np.where(seen, y, 0).astype(int)]
    return ((probs - onehot) ** 2).sum(-1)[seen]


def exact_eval(model, files, info, batch_size: int, holdout=None) -> dict:
    """Metrics over the whole eval split exactly once, on this process (no sharding).

    Per-epoch validation under multi-worker training repeats data to keep workers in step;
    the final figure in metrics.json must be exact, so batch prediction can reproduce it.
    """
    return scored_rows(model, files, info, batch_size, holdout)[0]


def clearly_lower(loss: np.ndarray, than: np.ndarray) -> Tuple[bool, str]:
    """(whether `loss` has a mean lower than `than`'s by more than one standard error of
    their paired difference, the figures)."""
    diff = np.asarray(loss, np.float64) - np.asarray(than, np.float64)
    n = len(diff)
    se = float(diff.std(ddof=1) / np.sqrt(n)) if n > 1 else float("inf")
    mean = float(diff.mean()) if n else 0.0
    return mean < -se, f"{mean:.4g} (standard error {se:.4g})"


def choose_family(losses: Dict[str, np.ndarray], network: str) -> Tuple[str, str]:
    """(candidate kept, why) from the per-row losses of `network`, TREES and BLEND on the
    same rows, by the rule of the module's docstring."""
    n = len(losses[BLEND])
    head = f"validation slice of {n} rows"
    if n < MIN_DECISION_ROWS:
        return BLEND, (f"{head}, under {MIN_DECISION_ROWS}: too few to tell the candidates "
                       f"apart; the blend is kept")
    trees_lower, trees_vs_net = clearly_lower(losses[TREES], losses[network])
    net_lower, _ = clearly_lower(losses[network], losses[TREES])
    better = TREES if trees_lower else network if net_lower else None
    why = f"{head}: mean loss of the trees minus the network's {trees_vs_net}"
    if better is None:
        return BLEND, why + "; neither clearly lower: the blend is kept"
    blend_lower, blend_vs = clearly_lower(losses[BLEND], losses[better])
    why += f"; the blend minus {better} {blend_vs}"
    if blend_lower:
        return BLEND, why + f"; the blend is clearly lower than {better}: kept"
    return better, why + f"; {better} is clearly lower than the other family: kept"


def keep_one(cfg: TrainConfig, info, runs: dict, candidates: dict, train_files, eval_files,
             batch: int, refit_network: Optional[Callable[[], object]] = None) -> tuple:
    """(candidate kept, its model, the info it serves with, its eval metrics, why). With
    both families trained their blend joins them, the validation slice decides
    (choose_family), each candidate's eval figure is recorded, and the families kept
    (alone or in the blend) are trained again on the whole train split before export: the
    trees always, the network when `refit_network` is given (no early stopping used the
    slice)."""
    if len(runs) == 1:
        chosen = next(iter(runs))
        model, served = runs[chosen]
        candidates[chosen]["eval"] = final = exact_eval(model, eval_files, served, batch)
        return chosen, model, served, final, "--model"
    network = next(n for n in runs if n != TREES)

    def blend(trees_model):
        net_model, net_info = runs[network]
        return BlendModel(net_model, net_info.label_scaler, trees_model,
                          info.task == "regression")
    runs[BLEND] = (blend(runs[TREES][0]), runs[TREES][1])
    candidates[BLEND] = {"network_weight": 0.5}
    losses = {}
    for name, (model, served) in runs.items():
        candidates[name]["validation"], losses[name] = scored_rows(
            model, train_files, served, batch, holdout="only")
        candidates[name]["eval"] = exact_eval(model, eval_files, served, batch)  # figures only
    chosen, why = (BLEND, "--model blend") if cfg.model == BLEND else \
        choose_family(losses, network)
    log.info("--model auto: %s (%s; %s)", chosen, "; ".join(
        f"{n} {candidates[n]['validation']}" for n in runs), why)
    if chosen != TREES and refit_network is not None:
        runs[network] = (refit_network(), runs[network][1])
        candidates[network]["refit_rows"] = info.split_rows.get("train")
    if chosen != network:
        # Chosen on the slice; the trees exported are grown on the whole train split, the
        # slice included (seconds; a tenth more rows matters on small tables).
        refit = train_trees(cfg, info, train_files, holdout=None)
        runs[TREES] = (refit.model, refit.info)
        runs[BLEND] = (blend(refit.model), refit.info)
        candidates[TREES]["refit_rows"] = refit.rows
    model, served = runs[chosen]
    if chosen == network and refit_network is None:  # nothing was trained again
        return chosen, model, served, candidates[chosen]["eval"], why
    return chosen, model, served, exact_eval(model, eval_files, served, batch), why
