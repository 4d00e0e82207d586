"""`--model auto`: scoring the candidates on the same rows and keeping one.

The candidates are the network, the boosted trees and their blend (training/models/blend.py),
each scored row by row (row_losses) on train rows that neither family trained on (the eval
split chooses nothing): a hashed 1-in-10 validation slice of the train split, or, on a small
table (training/defaults.py choice_folds), every train row: the split is cut into folds
and each fold is scored by a network and trees trained on the other folds (cross-fitting).
Each model predicts each fold once; the blend at each weight is scored from the two
families' predictions (BlendModel.combine). The rules that keep one: training/choice_rules.py.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import logging
import time
from typing import Callable, Dict, Optional

import numpy as np

from preprocessing.reference.evaluation import EvalSums
from training import data as data_lib
from training import defaults
from training.choice_rules import (
    BLEND_WEIGHTS,
    TREES,
    blend_name,
    choose_blend_weight,
    choose_family,
    choose_shape,
)
from training.config import TrainConfig
from training.models.blend import BLEND, BlendModel
from training.models.fold_count import FoldCount, fold_count
from training.models.forests import seeded, train_forests
from training.models.trees import TreesRun, TreesShape, shape_cfg, train_trees
from training.reporting.importance import forest_importance
from training.reporting.scoring import FoldRows, Predictions, exact_eval, sums_of

log = logging.getLogger("training")


def _cut_or_grown(cfg: TrainConfig, info, train_files, fold: int, folds: int, run: TreesRun,
                  rounds: int) -> TreesRun:
    """Fold `fold`'s trees at `rounds` rounds: cut, or (YDF kept fewer: its own best on the
    fold came earlier) grown again to exactly that many without that fold."""
    if rounds <= run.rounds:
        return run.truncated(rounds)
    return train_trees(cfg, info, train_files, num_trees=rounds,
                       holdout=data_lib.choice_fold(fold, folds).other())


@dataclasses.dataclass
class TreesChoice:
    """What the held-out rows chose for the trees exported."""
    shape: TreesShape
    why: str
    count: Optional[FoldCount] = None  # cross-fitted: the folds' count of rounds
    most: Optional[int] = None     # ... of at most this many

    @property
    def rounds(self) -> Optional[int]:
        return None if self.count is None else self.count.rounds


def _fold_count(info, fold_trees) -> FoldCount:
    """The folds' count; by errors too for a classification of ERRORS_COUNT_MIN_ROWS train
    rows or more."""
    errors = fold_trees[0].fold_errors is not None and \
        int(info.split_rows.get("train") or 0) >= defaults.ERRORS_COUNT_MIN_ROWS
    return fold_count([t.fold_losses for t in fold_trees],
                      [t.fold_errors for t in fold_trees] if errors else None)


def _grown_further(cfg: TrainConfig, info, train_files, folds: int, shape: TreesShape,
                   most: int, stop_on_fold: bool = True) -> tuple:
    """(the shape's trees on each fold, their FoldCount): grown again to at most `most`
    rounds, each stopped on its fold unless `stop_on_fold` is False, then cut or grown to
    the folds' count (fold_count.py). For the kept shape whose folds' count came within
    FOLD_LOOK_AHEAD rounds of the trees grown: their loss (or errors) was still falling."""
    cfg = shape_cfg(cfg, shape)
    with concurrent.futures.ThreadPoolExecutor(defaults.FOLD_TREE_WORKERS) as pool:
        grown = list(pool.map(
            lambda fold: train_trees(cfg, info, train_files, num_trees=most,
                                     stop_on_fold=stop_on_fold,
                                     holdout=data_lib.choice_fold(fold, folds).other()),
            range(folds)))
        count = _fold_count(info, grown)
        return list(pool.map(lambda ft: _cut_or_grown(cfg, info, train_files, ft[0], folds,
                                                      ft[1], count.rounds),
                             enumerate(grown))), count


def _grown_again(kept: Optional[FoldCount], shape: TreesShape, num_trees: Optional[int],
                 folds: int) -> tuple:
    """((the most rounds, stopping on the fold) the kept shape's folds are grown again to,
    or None; the most rounds the folds' count is chosen from), for `--num_trees`
    `num_trees`: further where their lowest loss came near the trees grown, to the end
    without stopping where a classification's fewest errors came near a stop on log loss."""
    most, further, _ = defaults.num_trees(num_trees, folds)
    look_ahead = defaults.FOLD_LOOK_AHEAD
    if kept and further and kept.by_loss > most - look_ahead:
        log.info("--model auto: the folds' best count of %s trees, %d, is within %d rounds of "
                 "the %d grown; growing them again to at most %d", shape, kept.by_loss,
                 look_ahead, most, further)
        return (further, True), further
    if kept and kept.errors_unsettled(look_ahead, most):
        log.info("--model auto: the folds' fewest errors of %s trees, at %d rounds, came "
                 "within %d of the %d every fold grew (stopped on their log loss); growing "
                 "them again to %d without stopping", shape, kept.by_errors, look_ahead,
                 kept.reached, most)
        return (most, False), most
    return None, most


def validation_losses(cfg: TrainConfig, info, runs: dict, train_files, batch: int,
                      folds: int, blend: Callable,
                      refit_network: Optional[Callable[..., object]],
                      trees_runs: Dict[TreesShape, TreesRun]) -> tuple:
    """({candidate: EvalSums}, {candidate: per-row losses}, TreesChoice) of the candidates
    in `runs` on validation fold 0 of `folds` (the rows they were trained without), then of
    each further fold by a network (`refit_network`) and trees trained without that fold,
    and their blend at each weight of BLEND_WEIGHTS (`blend(network, trees, weight)`, under
    blend_name, combined from the two families' predictions): the same rows, in the same
    order, for every candidate. The trees are grown on every fold in each shape of
    `trees_runs` (fold 0's), and those of the shape choose_shape keeps are scored.
    Cross-fitted, every fold's trees (each stopped on its fold) are first cut, or grown
    again, to the folds' count (fold_count.py), the count the trees exported keep: the
    choices judge the trees that would be kept."""
    network = next(n for n in runs if n not in (TREES, BLEND))
    started = time.time()
    others = [data_lib.choice_fold(fold, folds).other() for fold in range(1, folds)]
    # The folds' trees grow in threads beside the network's refits: YDF releases the GIL
    # and, on these small splits, trains on one thread (tree_threads), so the second core
    # would otherwise idle. Each fold's trees are the same as grown one after another; so
    # are the folds grown again (_cut_or_grown).
    with concurrent.futures.ThreadPoolExecutor(defaults.FOLD_TREE_WORKERS) as pool:
        grown = {shape: [pool.submit(train_trees, shape_cfg(cfg, shape), info, train_files,
                                     holdout=other, stop_on_fold=True) for other in others]
                 for shape in trees_runs}
        nets = [refit_network(holdout=other) for other in others]
        by_shape = {shape: [run] + [g.result() for g in grown[shape]]
                    for shape, run in trees_runs.items()}
        if others:
            log.info("--model auto: folds 2-%d trained in %.1f s", folds, time.time() - started)
        rounds = {}
        if folds > 1:
            rounds = {shape: _fold_count(info, fold_trees)
                      for shape, fold_trees in by_shape.items()
                      if all(t.fold_losses is not None for t in fold_trees)}
            cut = {shape: [pool.submit(_cut_or_grown, shape_cfg(cfg, shape), info,
                                       train_files, fold, folds, t, count.rounds)
                           for fold, t in enumerate(by_shape[shape])]
                   for shape, count in rounds.items()}
            by_shape.update({shape: [c.result() for c in done] for shape, done in cut.items()})
    rows = FoldRows(train_files, info, batch)

    def fold_predictions(fold_trees):
        return [rows.predicted(t.model, data_lib.choice_fold(fold, folds))
                for fold, t in enumerate(fold_trees)]
    # Each shape's trees predict fold by fold the rows they were grown without (scored by
    # per-row losses, as the families are compared), when there are two to choose from; the
    # kept shape's predictions are the trees' own below, not made again.
    shape_predicted = {shape: fold_predictions(fold_trees)
                       for shape, fold_trees in by_shape.items()} if len(by_shape) > 1 else {}
    shape, why = choose_shape(
        {a: np.concatenate([sums_of(p, t.info)[1] for p, t in zip(preds, by_shape[a])])
         for a, preds in shape_predicted.items()} or {a: np.zeros(0) for a in by_shape})
    log.info("--model auto: the trees grow %s (%s)", shape, why)
    again, most = _grown_again(rounds.get(shape), shape, cfg.num_trees, folds)
    if again:
        by_shape[shape], rounds[shape] = _grown_further(cfg, info, train_files, folds, shape,
                                                        *again)
        if shape_predicted:
            shape_predicted[shape] = fold_predictions(by_shape[shape])
    choice = TreesChoice(shape, why, rounds.get(shape), most)
    fold_runs = list(zip([runs[network][0]] + nets, by_shape[shape]))
    first = by_shape[shape][0]
    runs[TREES] = (first.model, first.info)
    runs[BLEND] = (blend(runs[network][0], first.model), first.info)
    sums, losses = _families_scored(fold_runs, network, runs[network][1], blend, rows, folds,
                                    shape_predicted.get(shape))
    return sums, losses, choice


def _families_scored(fold_runs, network: str, net_info, blend: Callable, rows: FoldRows,
                     folds: int, trees_predicted: Optional[list]) -> tuple:
    """({candidate: EvalSums}, {candidate: per-row losses}) of the network, the trees and
    their blend at each weight of BLEND_WEIGHTS over the folds of `fold_runs` ((network,
    trees) trained without each fold): each family predicts a fold once (the trees'
    `trees_predicted` when the shape choice made them), the blends are combined from that."""
    sums: Dict[str, EvalSums] = {}
    losses: Dict[str, list] = {}
    for fold, (net_model, trees) in enumerate(fold_runs):
        held = data_lib.choice_fold(fold, folds)
        net = rows.predicted(net_model, held)
        tree = trees_predicted[fold] if trees_predicted else rows.predicted(trees.model, held)
        if not np.array_equal(net.label, tree.label):  # the blends below pair them row by row
            raise RuntimeError(f"fold {fold}: the network and the trees read different rows")
        scored = {network: (net, net_info), TREES: (tree, trees.info),
                  **{blend_name(w): (Predictions(
                      blend(net_model, trees.model, w).combine(net.out, tree.out).numpy(),
                      tree.label, tree.weight), trees.info) for w in BLEND_WEIGHTS}}
        for name, (pred, served) in scored.items():
            fold_sums, fold_losses = sums_of(pred, served)
            sums[name] = sums.get(name, EvalSums()).merge(fold_sums)
            losses.setdefault(name, []).append(fold_losses)
    return sums, {n: np.concatenate(v) for n, v in losses.items()}


def _trees_kept(cfg: TrainConfig, info, train_files, grown: TreesRun, shape: TreesShape,
                rounds: Optional[int], forests: int = 1) -> TreesRun:
    """The trees exported. Chosen on held-out rows, they are grown again on the whole train
    split, those rows included (a tenth more rows matters on small tables), `forests` times
    with their own seeds and averaged (training/models/forests.py), unless the trees
    `grown` already held --trees_max_rows (and one forest is asked): a refit would read a
    sample of the same size, and a growth on millions of rows takes most of a run
    (docs/performance.md)."""
    if grown.capped and rounds is None and forests == 1:
        log.info("--model auto: the trees grown on a sample of %s rows are kept (a refit "
                 "would hold no more rows: --trees_max_rows %s)", f"{grown.rows:,}",
                 f"{cfg.trees_max_rows:,}")
        return grown
    return train_forests(shape_cfg(cfg, shape), info, train_files, forests, num_trees=rounds)


def keep_one(cfg: TrainConfig, info, runs: dict, candidates: dict, train_files, eval_files,
             batch: int, refit_network: Optional[Callable[..., object]] = None,
             folds: int = 1, trees_runs: Optional[Dict[TreesShape, TreesRun]] = None,
             exported_from: Optional[tuple] = None) -> tuple:
    """(candidate kept, its model, the info it serves with, its eval metrics, why, (the model
    exported, its info)). With both families trained their blend joins them, the validation
    rows decide (choose_family: the slice, or all train rows over `folds` cross-fitted folds),
    each candidate's eval figure is recorded, and the families kept (alone or in the blend)
    are trained again on the whole train split before export: the trees always (with the shape
    chosen on the validation rows; cross-fitted: the rounds scored lowest over the folds, as
    defaults.refit_rounds scales them to the rows; `trees_runs` are fold 0's, by shape), the
    network when `refit_network` is given (no early stopping used the slice). The last
    element: the model exported and its info, trained a last time on `exported_from` (files,
    rows) when given (the train and eval splits: the eval figures stay those of the model
    trained without the eval rows)."""
    if len(runs) == 1:
        chosen = next(iter(runs))
        model, served = runs[chosen]
        candidates[chosen]["eval"] = final = exact_eval(model, eval_files, served, batch)
        return chosen, model, served, final, "--model", (model, served)
    if folds > 1 and refit_network is None:
        raise ValueError("cross-fitted folds need the network trained again")
    if not trees_runs:
        raise ValueError("a choice between families needs the trees' runs")
    network = next(n for n in runs if n != TREES)
    net_info = runs[network][1]

    def blend(net_model, trees_model, network_weight=0.5):
        return BlendModel(net_model, net_info.label_scaler, trees_model,
                          info.task == "regression", network_weight)
    runs[BLEND] = (blend(runs[network][0], runs[TREES][0]), runs[TREES][1])
    candidates[BLEND] = {"network_weight": 0.5}
    sums, losses, trees_choice = validation_losses(cfg, info, runs, train_files, batch,
                                                   folds, blend, refit_network,
                                                   trees_runs)
    rounds = trees_choice.rounds
    shape = trees_choice.shape
    forests = defaults.num_forests(cfg.num_forests, folds, seeded(shape_cfg(cfg, shape)))
    _record_trees_choice(candidates[TREES], trees_choice, trees_runs[shape], forests, folds)
    rows = "validation slice" if folds == 1 else f"{folds} cross-fitted folds"
    chosen, why = (BLEND, "--model blend") if cfg.model == BLEND else \
        choose_family(losses, network, rows)
    if chosen == BLEND and cfg.model != BLEND:
        weight, weighed = choose_blend_weight({w: losses[blend_name(w)] for w in BLEND_WEIGHTS})
        why += f"; {weighed}"
        candidates[BLEND]["network_weight"] = weight
        sums[BLEND] = sums[blend_name(weight)]
        blend = functools.partial(blend, network_weight=weight)
        runs[BLEND] = (blend(runs[network][0], runs[TREES][0]), runs[TREES][1])
    for name, (model, served) in runs.items():
        candidates[name]["validation"] = sums[name].metrics(info.task)
        candidates[name]["eval"] = exact_eval(model, eval_files, served, batch)  # figures only
    log.info("--model auto: %s (%s; %s)", chosen, "; ".join(
        f"{n} {candidates[n]['validation']}" for n in runs), why)
    train_rows = int(info.split_rows.get("train") or 0)
    refit = None if rounds is None else functools.partial(
        defaults.refit_rounds, rounds, trees_choice.most, info.task,
        train_rows * (folds - 1) / folds)
    again = functools.partial(_trained_again, cfg, info, chosen, runs, candidates,
                              refit_network, trees_runs[shape], refit, forests[0], blend)
    model, served = again(train_files, train_rows)
    final = candidates[chosen]["eval"] if chosen == network and refit_network is None \
        else exact_eval(model, eval_files, served, batch)  # else nothing was trained again
    exported = (model, served)
    if exported_from:
        exported = again(*exported_from, "exported_rows")
        final = dict(final, measured_on=(
            "the kept model trained on the train split alone; the one exported was trained "
            "again on the train and eval splits (refit_on_eval)"))
    return chosen, model, served, final, why, exported


def _record_trees_choice(record: dict, choice: TreesChoice, grown: TreesRun, forests: tuple,
                         folds: int) -> None:
    """metrics.json's record of the trees' shape, count and forests the held-out rows chose."""
    shape = choice.shape
    record["split_axis"] = {"value": shape.axis, "why": choice.why}
    record["category_encoding"] = {"value": shape.encoding, "why": choice.why,
                                   "features": grown.encoded}
    record["categorical_algorithm"] = {"value": shape.algorithm, "why": choice.why}
    record["min_examples"] = {"value": shape.leaf, "why": choice.why}
    record["num_trees"] = grown.num_trees
    record["num_forests"] = {"value": forests[0], "why": forests[1]}
    if choice.count is not None:
        record["refit_num_trees"] = {
            "value": choice.rounds, "why": f"of at most {choice.most}, "
            f"{choice.count.why(folds)}"}
        log.info("--model auto: the trees keep %d of %d rounds (%s)", choice.rounds,
                 choice.most, record["refit_num_trees"]["why"])


def _trained_again(cfg: TrainConfig, info, chosen: str, runs: dict, candidates: dict,
                   refit_network: Optional[Callable[..., object]], grown: TreesRun,
                   refit: Optional[Callable[[int], tuple]], forests: int, blend: Callable,
                   files, rows: int, key: str = "refit_rows") -> tuple:
    """(model, the info it serves with) of the `chosen` candidate, the families in it
    trained again on `files` (`rows` rows): the trees always (`forests` averaged; where the
    folds chose their count, `refit(rows)`'s rounds, recorded under refit_num_trees' `grown`),
    the network when `refit_network` is given. Each family's rows are recorded in
    `candidates` under `key`; `runs` hold the models trained."""
    network = next(n for n in runs if n not in (TREES, BLEND))
    net_info = runs[network][1]
    if chosen != network or refit_network is not None:
        log.info("--model auto: %s trained again on %s rows (%s)", chosen, f"{rows:,}",
                 "the train and eval splits" if key == "exported_rows" else "the train split")
    if chosen != TREES and refit_network is not None:
        runs[network] = (refit_network(train_files=files), net_info)
        candidates[network][key] = rows
    if chosen != network:
        count = None
        if refit is not None:
            count, why = refit(rows)
            candidates[TREES]["refit_num_trees"].setdefault("grown", {})[key] = {
                "value": count, "why": why}
        kept = _trees_kept(cfg, info, files, grown, grown.shape, count, forests)
        runs[TREES] = (kept.model, kept.info)
        runs[BLEND] = (blend(runs[network][0], kept.model), kept.info)
        candidates[TREES][key] = None if kept is grown else kept.rows
        candidates[TREES]["ydf_importance"] = forest_importance(kept.forest)
    return runs[chosen]
