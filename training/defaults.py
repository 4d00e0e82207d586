"""Training defaults chosen from the data, and the end-of-training collapse check.

Defaults tuned for a million tabular rows (batch 512, 10 epochs) give a 1,800-image set 30
optimizer steps: batch-norm statistics never converge and eval accuracy sits at chance while
train accuracy climbs. So, for each flag the user left unset:

- batch size: a power of two near train rows / 50, within [32, 512] (1M rows: 512; 1,800: 32);
- epochs: 10, or more so that training takes at least MIN_STEPS optimizer steps (at most
  MAX_EPOCHS);
- learning-rate schedule: cosine when the step floor raised the epochs (small data: many
  passes, a decaying rate settles them), else constant.

Every choice and its reason is logged and written to metrics.json ("defaults"). Explicit
flags always win.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

MIN_BATCH, MAX_BATCH = 32, 512
ROWS_PER_BATCH = 50  # train rows per batch-size unit: at least ~50 steps per epoch
BASE_EPOCHS = 10
MIN_STEPS = 1000
MAX_EPOCHS = 200
EARLY_STOPPING_PATIENCE = 10  # epochs, tabular data (validation: a slice of the train split)
# Early stopping needs a validation loss that measures the model, not the slice: below this
# many holdout rows (a train split under 10,000) its noise decided the epoch (a 160-row slice
# restored epoch 2 of a small binary table: a near-linear model), so training runs its
# scheduled epochs (cosine decay on small data) instead.
EARLY_STOPPING_MIN_ROWS = 1000
# A small train split: under this many rows (a holdout slice under EARLY_STOPPING_MIN_ROWS)
# neither family stops early (the trees' own 10% validation rows would be a few dozen too),
# the trees keep rare categories, and on one process TensorFlow's deterministic ops are on:
# the same data, flags and seed give the same network (its training time unchanged on small
# data, see docs/training.md; parallel reads in whatever order they finish made a 263-row
# table's network differ by 8% RMSE between two runs).
SMALL_TRAIN_ROWS = 10_000
CHOICE_FOLDS = 4  # `--model auto` on a small train split: the folds scored (choice_folds)
# A cross-fitted fold's trees stop growing once their loss on the held-out fold has not
# improved for this many rounds (YDF's LOSS_INCREASE rule, its default look-ahead is 30): a
# noisy table whose best count is a few dozen rounds no longer grows all --num_trees in each
# of the folds (Ecdat's Car, 6 classes: 65 s a fold for 300 rounds; docs/performance.md).
FOLD_LOOK_AHEAD = 50
# The trees' count when --num_trees is not given (num_trees): at most NUM_TREES; where
# `--model auto` chooses the count on cross-fitted folds and the kept shape's best count came
# within FOLD_LOOK_AHEAD rounds of NUM_TREES (its folds' stopping rule had not confirmed it),
# that shape's folds are grown again to at most FOLD_MAX_TREES. 300 bound the count on
# tables whose held-out loss was still falling (ggplot2's txhousing, Ecdat's Cigar and Guns,
# openintro's loans; docs/performance.md); growing every shape that far took loans' training
# 8 -> 14 minutes, growing the kept one only a fraction of that.
NUM_TREES = 300
FOLD_MAX_TREES = 1000
# YDF's trees train on one thread below this many train rows, where its threads measured
# slower than one (benchmarks/tree_threads.py, docs/performance.md): their work per node is
# too small to share.
TREES_ONE_THREAD_ROWS = 200_000
# YDF grows a tree per class per round. Past SEARCH_MAX_CLASSES classes `--model auto` grows
# one shape of trees (training/models/trees.py shapes), and trains them only while train rows
# x classes, times FOLDS_TREE_COST under SMALL_TRAIN_ROWS rows (cross-fitted folds, forests
# grown to the end), stay within AUTO_TREE_MAX_ROW_CLASSES. Generated tables: 8,977 rows x
# 100 classes took 8.4 minutes to train (trees 0.893 accuracy, the network 0.691); from
# 10,000 rows the trees are grown once and stop early: 99k rows x 100 classes, 153 s
# (docs/performance.md). Hundreds of classes on a large table would take hours.
SEARCH_MAX_CLASSES = 20
FOLDS_TREE_COST = 10
AUTO_TREE_MAX_ROW_CLASSES = 10_000_000
# A classification's folds choose the larger of their counts by log loss and by errors
# (training/models/fold_count.py) on a train split of this many rows or more, the count by
# log loss alone on fewer: the fewest errors over 300 rounds, counted on a few hundred rows,
# is the luck of a few of them. Through the jobs, seed 0 (docs/performance.md): on
# carData's TitanicSurvival, AER's CreditCard and SwissLabor, lifelines' dd and MASS's
# birthwt (135-1,300 train rows) the errors' count moved accuracy -0.004 to +0.006, and
# birthwt's by -0.059 (2 of its 34 test rows); on modeldata's hpc_data, carData's
# KosteckiDillon and Ecdat's Cracker (2,370-3,100; seeds 0-2) +0.002 to +0.022, once -0.002.
ERRORS_COUNT_MIN_ROWS = 2000
FOLD_TREE_WORKERS = 2  # the cross-fitted folds' trees grown at once (training/selection.py)
# Forests averaged in the export where the count was chosen on cross-fitted folds and the kept
# trees depend on their random seed (num_forests): each grown on the same rows with its own
# seed. YDF alone with the trainer's settings on 34 small tables x 3 seeds
# (benchmarks/tree_bagging.py): test RMSE over scikit-learn's, geometric mean, 0.811x with
# one forest against 0.799x with 5; accuracy minus scikit-learn's -0.0051 against -0.0025.
FORESTS = 5
# Regression trees grown again on more rows than each fold's keep more rounds than the
# folds' best count, in proportion to the rows (refit_rounds). YDF alone with the trainer's
# settings, 5 forests, 28 regression tables x 3 seeds (benchmarks/tree_bagging.py, `scaled`
# against `seeds`): test RMSE over scikit-learn's, geometric mean, 0.7404x -> 0.7349x at 4/3
# of the folds' count (15 better by over 2%, 4 worse). On 14 classification tables x 3 the
# same scaling lost accuracy (-0.0007 -> -0.0037 against scikit-learn's): their count is kept.
REFIT_SCALED_TASKS = ("regression",)


def choose(train_rows: int, batch_size: Optional[int], epochs: Optional[int],
           lr_schedule: Optional[str], train_steps: Optional[int] = None,
           steps_per_epoch: Optional[int] = None) -> Tuple[int, int, str, Dict[str, dict]]:
    """(batch_size, epochs, lr_schedule, {flag: {"value", "why"}}) for the unset flags."""
    why: Dict[str, dict] = {}
    if batch_size is None:
        raw = max(1, train_rows // ROWS_PER_BATCH)
        batch_size = min(MAX_BATCH, max(MIN_BATCH, 2 ** int(math.log2(raw))))
        why["batch_size"] = {"value": batch_size, "why": (
            f"auto: {train_rows:,} train rows / {ROWS_PER_BATCH} as a power of two within "
            f"[{MIN_BATCH}, {MAX_BATCH}]")}
    per_epoch = steps_per_epoch or max(1, math.ceil(train_rows / batch_size))
    floor_raised = False
    if epochs is None:
        epochs = BASE_EPOCHS
        if not train_steps and per_epoch * epochs < MIN_STEPS:
            epochs = min(MAX_EPOCHS, math.ceil(MIN_STEPS / per_epoch))
            floor_raised = True
        why["epochs"] = {"value": epochs, "why": (
            f"auto: at least {MIN_STEPS} optimizer steps ({per_epoch} steps per epoch)"
            if floor_raised else f"auto: {BASE_EPOCHS} ({per_epoch} steps per epoch)")}
    if lr_schedule is None:
        lr_schedule = "cosine" if floor_raised else "constant"
        why["lr_schedule"] = {"value": lr_schedule, "why": (
            "auto: cosine decay over the many passes small data needs" if floor_raised else
            "auto: constant (enough steps per epoch)")}
    return batch_size, epochs, lr_schedule, why


def early_stopping(patience: Optional[int], image: bool, holdout_rows: int,
                   cross_fitted: bool = False) -> Tuple[int, str]:
    """(patience, why): the flag when given; else off for images (validated on the eval split,
    trained on a schedule), for a cross-fitted model choice (every fold's network trains the
    same schedule) and for a holdout slice too small to measure, else
    EARLY_STOPPING_PATIENCE."""
    if patience is not None:
        return patience, "--early_stopping_patience"
    if image:
        return 0, "auto: off for images"
    if cross_fitted:
        return 0, "auto: off, the model choice is cross-fitted (--choice_folds)"
    if holdout_rows < EARLY_STOPPING_MIN_ROWS:
        return 0, (f"auto: off, the holdout slice ({holdout_rows} rows) is under "
                   f"{EARLY_STOPPING_MIN_ROWS} rows: too small to choose an epoch")
    return EARLY_STOPPING_PATIENCE, f"auto: {EARLY_STOPPING_PATIENCE} epochs on a " \
        f"{holdout_rows}-row holdout slice"


def collapse_warnings(task: str, n_classes: int, final: dict, history: dict) -> List[str]:
    """What went wrong when eval is near chance or far below train, with the flags to try."""
    out = []
    if task == "classification":
        acc = final.get("accuracy")
        train = _last(history, ("accuracy", "sparse_categorical_accuracy", "binary_accuracy"))
        chance = 1.0 / max(n_classes, 2)
        if acc is not None and acc <= chance + 0.1 * (1 - chance):
            out.append(f"eval accuracy {acc:.3f} is near chance ({chance:.3f} for {n_classes} "
                       f"classes)")
        if acc is not None and train is not None and train - acc > 0.3:
            out.append(f"eval accuracy {acc:.3f} is far below train accuracy {train:.3f}")
    else:
        loss, val = _last(history, ("loss",)), _last(history, ("val_loss",))
        if loss and val and val > 3 * loss:
            out.append(f"eval loss {val:.4g} is over 3x the train loss {loss:.4g}")
    if out:
        out.append("likely causes: too few optimizer steps for batch-norm statistics to settle, "
                   "or overfitting; try --batch_size 32 --epochs 20 --lr_schedule cosine, "
                   "--augment for images, and check the label column")
    return out


def _last(history: dict, keys) -> Optional[float]:
    for k in keys:
        if history.get(k):
            return float(history[k][-1])
    return None


def determinism(flag: Optional[bool], kind: str, train_rows: int) -> Tuple[bool, str]:
    """(TensorFlow's deterministic ops on, why): --[no-]deterministic, else on for a train
    split under SMALL_TRAIN_ROWS on one process."""
    if flag is not None:
        return flag, "--deterministic" if flag else "--no-deterministic"
    if kind != "single":
        return False, f"a {kind} run: workers finish in their own order"
    if train_rows >= SMALL_TRAIN_ROWS:
        return False, (f"{train_rows} train rows (>= {SMALL_TRAIN_ROWS}): parallel reads "
                       "in the order they finish")
    return True, (f"{train_rows} train rows (< {SMALL_TRAIN_ROWS}) on one process: the "
                  "same data, flags and seed give the same model")


def choice_folds(flag: Optional[int], kind: str, train_rows: int, both_families: bool,
                 patience: Optional[int]) -> Tuple[int, str]:
    """(folds, why): how many folds of the train split `--model auto` scores the candidates
    on. Each fold is held out in turn from a network and trees trained on the rest, so every
    train row is scored once by models that never saw it; 1 is the 1-in-10 validation slice.
    On a small table one slice is a few dozen rows (or a few hundred of a heavy-tailed
    label) and chose by noise; cross-fitting costs CHOICE_FOLDS - 1 more trainings of each
    family (each on the small table, no early stopping)."""
    if not both_families:
        return 1, "one family: nothing to choose"
    if kind != "single":
        return 1, f"a {kind} run: the network trains once"
    if flag is not None:
        return flag, "--choice_folds"
    if patience:
        return 1, "--early_stopping_patience: the network stops on the validation slice"
    if train_rows >= SMALL_TRAIN_ROWS:
        return 1, (f"{train_rows} train rows (>= {SMALL_TRAIN_ROWS}): the 1-in-10 slice "
                   f"has enough rows")
    return CHOICE_FOLDS, (f"auto: {train_rows} train rows (< {SMALL_TRAIN_ROWS}): every row "
                          f"scored once, {CHOICE_FOLDS} folds")


def refit_on_eval(flag: Optional[bool], folds: int, eval_rows: int,
                  slice_by: tuple) -> Tuple[bool, str]:
    """(whether the model kept is trained a last time on the train and eval splits together
    before export, why). Only where the choice was cross-fitted: the folds, not the eval
    split, chose it, and on a small table the eval split's tenth of the rows is worth more
    to the model than to its figures (the figures stay those of the same model trained
    without them), as AutoGluon's `refit_full` retrains the model chosen on its validation
    data on training and validation data together. The golden set's rows are still left
    out, unless it is too small for the gate to judge by (training/exporting/golden_rows.py)."""
    if flag is False:
        return False, "--no-refit_on_eval"
    if not eval_rows:
        return False, "the eval split is empty: nothing to add"
    if slice_by:
        return False, "--slice_by measures the exported model on the eval split's rows"
    if folds < 2:
        return False, (f"the choice was made on {'the validation slice' if folds else 'no rows'}"
                       ", not on cross-fitted folds")
    return True, "--refit_on_eval" if flag else \
        f"auto: --model auto chose on {folds} cross-fitted folds"


def num_forests(flag: Optional[int], folds: int, seeded: bool) -> Tuple[int, str]:
    """(forests grown with seeds seed, seed+1, ... and averaged as the trees kept, why):
    --num_forests as given; unset, FORESTS where `folds` > 1 cross-fitted folds chose the
    trees (a small table: their growth takes seconds) and they are `seeded` (their seed
    changes them: oblique projections, RANDOM category splits, row subsamples or
    cross-fitted mean labels), else one. An average of forests that differ only by their
    seed keeps their bias and shrinks their variance."""
    if flag is not None:
        return flag, "--num_forests"
    if folds < 2:
        return 1, "auto: one (no cross-fitted folds chose the trees)"
    if not seeded:
        return 1, "auto: one (the kept trees are the same whatever their seed)"
    return FORESTS, (f"auto: {FORESTS}, each grown with its own seed (--model auto chose the "
                     f"trees on {folds} cross-fitted folds)")


def refit_rounds(rounds: int, most: int, task: str, fold_rows: float, rows: int
                 ) -> Tuple[int, str]:
    """(rounds the trees grown again on `rows` rows keep, why): the folds' best count
    `rounds`, each fold's trees grown on `fold_rows` rows; for a task of
    REFIT_SCALED_TASKS times rows / fold_rows (more rows: more rounds before the trees
    overfit them), at most `most` (the most the folds grew: --num_trees is a bound)."""
    if task not in REFIT_SCALED_TASKS or fold_rows <= 0 or rows <= fold_rows:
        return rounds, "the folds' count"
    scaled = min(most, max(rounds, int(round(rounds * rows / fold_rows))))
    return scaled, (f"the folds' {rounds} x {rows:,} rows / {fold_rows:,.0f} a fold's"
                    + (f", at most {most}" if scaled == most else ""))


def num_trees(flag: Optional[int], folds: int) -> Tuple[int, Optional[int], str]:
    """(the most trees grown, the most the kept shape's folds may be grown again to or None,
    why): --num_trees as given; unset, NUM_TREES, and FOLD_MAX_TREES for `folds` > 1
    cross-fitted folds."""
    if flag is not None:
        return flag, None, "--num_trees"
    if folds > 1:
        return NUM_TREES, FOLD_MAX_TREES, (
            f"auto: {NUM_TREES}; the kept shape's folds are grown again to at most "
            f"{FOLD_MAX_TREES} where their best count came within {FOLD_LOOK_AHEAD} rounds "
            f"of {NUM_TREES}")
    return NUM_TREES, None, f"auto: {NUM_TREES}"
