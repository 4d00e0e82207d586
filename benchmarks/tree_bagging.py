"""What averaging forests is worth on small tables, measured outside the jobs: YDF on the
table's own columns with the trainer's tree settings, the count of trees chosen over 4
cross-fitted folds as the trainer chooses it (each fold stopped 50 rounds past its best,
the count lowest over the folds' summed loss), on the seeded 80/20 rows of
benchmarks/tabular_quality.py, against scikit-learn's HistGradientBoosting there.

Each column is one way to make the exported trees from those folds:
- refit: one forest grown again on all the train rows at the chosen count (the trainer's
  way before this benchmark);
- folds: the 4 fold forests (each grown without its fold) averaged;
- refit+folds: the refit and the folds' average, averaged (half each);
- seeds: K forests grown on all the train rows with K random seeds, averaged
  (`--seeds_bagged K`; the trees' randomness is their oblique projections' and RANDOM
  category splits');
- scaled: the same K forests with the count times the train rows over a fold's (4/3,
  `--refit_scale`), as the trainer grows a regression's (training/defaults.py
  refit_rounds); here for both tasks, to show why a classification's count is kept.
Classification averages the forests' probabilities. Prints RMSE over the baseline's or
accuracy minus the baseline's, per table and seed, then each column's geometric mean
(regression) and mean (classification) over what was run.

    PYTHONPATH=/tmp/bench_deps python benchmarks/tree_bagging.py --tables housing,dd --seeds 0,1,2

Needs the packages of benchmarks/tabular_quality.py's docstring.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from category_encodings import _split, _strings  # noqa: E402
from tabular_quality import baseline  # noqa: E402

COLUMNS = ("refit", "folds", "refit+folds", "seeds", "scaled")
FOLDS = 4
LOOK_AHEAD = 50


HESSIAN = False   # --use_hessian_gain
MIN_EXAMPLES = 5  # rows a leaf holds at least (benchmarks/leaf_size.py sets 20)


def _learner(label, task, seed, algorithm, num_trees, stop):
    import ydf
    extra = dict(early_stopping="LOSS_INCREASE", early_stopping_num_trees_look_ahead=LOOK_AHEAD) \
        if stop else dict(validation_ratio=0.0, early_stopping="NONE")
    return ydf.GradientBoostedTreesLearner(
        label=label, task=ydf.Task.REGRESSION if task == "regression" else
        ydf.Task.CLASSIFICATION, growing_strategy="BEST_FIRST_GLOBAL", max_num_nodes=31,
        split_axis="SPARSE_OBLIQUE", sparse_oblique_normalization="MIN_MAX",
        sparse_oblique_num_projections_exponent=1.0, categorical_algorithm=algorithm,
        num_trees=num_trees, max_depth=6, shrinkage=0.05, min_examples=MIN_EXAMPLES,
        min_vocab_frequency=2, max_vocab_count=300, random_seed=seed, num_threads=1,
        use_hessian_gain=HESSIAN and task != "regression", **extra)


def _probs(model, df, classes):
    """[rows, classes] probabilities in `classes`' order (a regression: the predictions)."""
    pred = np.asarray(model.predict(df))
    if classes is None:
        return pred
    own = list(model.label_classes())
    if pred.ndim == 1:
        pred = np.stack([1 - pred, pred], axis=1)
    out = np.zeros((len(df), len(classes)))
    for j, c in enumerate(own):
        out[:, classes.index(c)] = pred[:, j]
    return out


def _score(pred, test, label, task, classes) -> float:
    if task == "regression":
        return float(np.sqrt(np.mean((pred - test[label].astype(float).to_numpy()) ** 2)))
    return float(np.mean(np.array(classes)[pred.argmax(1)] == test[label].to_numpy()))


def _per_round(model, rows, regression):
    means = np.array([e.evaluation.loss for e in model.training_logs()], np.float64)
    return rows * (means ** 2 if regression else means)


def seeded_forests(train, test, label, task, classes, rounds: int, forests: int,
                   algorithm: str = "CART") -> list:
    """`test`'s predictions (probabilities) by each of `forests` forests of `rounds` rounds
    grown on `train` with seeds 42, 43, ..."""
    return [_probs(_learner(label, task, 42 + s, algorithm, rounds, False).train(
        train, verbose=0), test, classes) for s in range(forests)]


def averaged(train, test, label, task, classes, rounds: int, forests: int,
             algorithm: str = "CART"):
    """The mean of seeded_forests' predictions."""
    return np.mean(seeded_forests(train, test, label, task, classes, rounds, forests,
                                  algorithm), axis=0)


def prepared(train, test, label, task):
    """The rows as YDF reads them here (strings, a class as text), and the classes."""
    for df in (train, test):
        for c in _strings(df, label):
            df[c] = df[c].astype(str)
        if task != "regression":
            df[label] = df[label].astype(str)
    return None if task == "regression" else sorted(train[label].unique())


def fold_forests(train, label, task, classes, algorithm, fold_seed) -> tuple:
    """(each train row's fold, the rounds counted over FOLDS cross-fitted folds as the trainer
    counts them, each fold's forest grown without it, cut or grown again to that count)."""
    regression = task == "regression"
    fold_of = np.random.default_rng(fold_seed).integers(0, FOLDS, len(train))
    grown, losses = [], []
    for k in range(FOLDS):
        fit, held = train[fold_of != k], train[fold_of == k]
        m = _learner(label, task, 42, algorithm, 300, True).train(fit, valid=held, verbose=0)
        grown.append(m)
        losses.append(_per_round(m, len(held), regression))
    shortest = min(len(x) for x in losses)
    count = int(np.argmin(np.sum([x[:shortest] for x in losses], axis=0))) + 1
    per_round = 1 if regression or len(classes) == 2 else len(classes)
    folds = []
    for k, m in enumerate(grown):
        if m.num_trees() // per_round < count:
            m = _learner(label, task, 42, algorithm, count, False).train(
                train[fold_of != k], verbose=0)
        while m.num_trees() > count * per_round:
            m.remove_tree(m.num_trees() - 1)
        folds.append(m)
    return fold_of, count, folds


def predictions(train, test, label, task, classes, algorithm, seeds_bagged, fold_seed,
                refit_scale=None):
    """(rounds chosen over 4 cross-fitted folds of `train`, {column: `test`'s predictions or
    probabilities}) for each of COLUMNS; `scaled` only with a `refit_scale` (its forests are
    grown for it alone)."""
    _, count, fold_models = fold_forests(train, label, task, classes, algorithm, fold_seed)
    folds = [_probs(m, test, classes) for m in fold_models]
    def refits(rounds):
        return seeded_forests(train, test, label, task, classes, rounds, seeds_bagged,
                              algorithm)
    seeded = refits(count)
    out = {"refit": seeded[0], "folds": np.mean(folds, axis=0),
           "refit+folds": 0.5 * seeded[0] + 0.5 * np.mean(folds, axis=0),
           "seeds": np.mean(seeded, axis=0)}
    if refit_scale:
        out["scaled"] = np.mean(refits(max(count, int(round(count * refit_scale)))), axis=0)
    return count, out


def table_seed(table, seed, algorithm, seeds_bagged, refit_scale=FOLDS / (FOLDS - 1)) -> dict:
    train, test, label, task = _split(table, seed)
    base = baseline(train, test, label, task)
    classes = prepared(train, test, label, task)
    count, preds = predictions(train, test, label, task, classes, algorithm, seeds_bagged,
                               fold_seed=seed + 1000, refit_scale=refit_scale)
    vs = {}
    for name, pred in preds.items():
        s = _score(pred, test, label, task, classes)
        vs[name] = s / base if task == "regression" else s - base
    return {"task": task, "count": count, "vs": vs}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", default="housing,dd")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--seeds_bagged", type=int, default=5)
    ap.add_argument("--random_for", default="dd",
                    help="tables whose categories are split by YDF's RANDOM search (the "
                    "trainer keeps it on dd)")
    ap.add_argument("--refit_scale", type=float, default=FOLDS / (FOLDS - 1),
                    help="the `scaled` column's count over the folds' (default: the train "
                    "rows over a fold's; 0: no `scaled` column)")
    ap.add_argument("--use_hessian_gain", action="store_true",
                    help="YDF's split gain with the hessian term (classification)")
    a = ap.parse_args(argv)
    global HESSIAN
    HESSIAN = a.use_hessian_gain
    warnings.filterwarnings("ignore")
    random_for = set(a.random_for.split(","))
    columns = COLUMNS if a.refit_scale else COLUMNS[:-1]
    print(f"{'table':<12} seed rounds " + " ".join(f"{c:>12}" for c in columns), flush=True)
    done = []
    for table in a.tables.split(","):
        for seed in (int(s) for s in a.seeds.split(",")):
            r = table_seed(table, seed, "RANDOM" if table in random_for else "CART",
                           a.seeds_bagged, a.refit_scale)
            fmt = "{:.3f}x" if r["task"] == "regression" else "{:+.3f}"
            print(f"{table.split(':')[0]:<12} {seed:>4} {r['count']:>6} "
                  + " ".join(f"{fmt.format(r['vs'][c]):>12}" for c in columns), flush=True)
            done.append(r)
    for task, fmt, mean in (("regression", "{:.3f}x", lambda v: np.exp(np.mean(np.log(v)))),
                            ("classification", "{:+.4f}", np.mean)):
        rs = [r for r in done if r["task"] == task]
        if rs:
            print(f"{task[:12]:<12} {len(rs):>4}        " + " ".join(
                f"{fmt.format(mean([r['vs'][c] for r in rs])):>12}" for c in columns))


if __name__ == "__main__":
    main()
