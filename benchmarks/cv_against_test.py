"""Is a small table's miss on its test split a gap or the split's noise? The same two models
compared twice on each seeded 80/20 split of benchmarks/tabular_quality.py:
- on the test split (a fifth of the rows), as tabular_quality.py compares them;
- by 4-fold cross-validation on the train rows (every train row scored once, by models that
  never saw it): four fifths of the rows, and another draw of them.
The models: YDF with the trainer's tree settings, its count of trees chosen over 4 inner
cross-fitted folds of the rows it is given and its trees grown again on all of them
(benchmarks/tree_bagging.py's `refit`, or its `seeds`: `--seeds_bagged` forests averaged),
against scikit-learn's HistGradientBoosting with its defaults. A gap on the test splits
that the cross-validation does not show on the same tables' other rows is the test
splits' draw, not the model's.

    PYTHONPATH=/tmp/bench_deps python benchmarks/cv_against_test.py \\
        --tables survival.diabetic:status:classification --seeds 0,1,2,3,4,5,6,7,8,9

Prints, per table and seed, YDF's figure minus scikit-learn's (accuracy) or over it (RMSE),
on the test split and by cross-validation, then their means. Needs the packages of
benchmarks/tabular_quality.py's docstring.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from category_encodings import _split  # noqa: E402
from tabular_quality import CV_FOLDS, baseline_predictions, cv_fold_of  # noqa: E402
from tree_bagging import _score, predictions, prepared  # noqa: E402


def _figure(pred, rows, label, task) -> float:
    """RMSE or accuracy of scikit-learn's predictions (values, or classes as text)."""
    y = rows[label]
    if task == "regression":
        return float(np.sqrt(np.mean((np.asarray(pred, float) - y.astype(float)) ** 2)))
    return float(np.mean(np.asarray(pred) == y.astype(str).to_numpy()))


def _pair(train, test, label, task, column, seeds_bagged, fold_seed, random):
    """(YDF's figure, scikit-learn's) trained on `train`, scored on `test`."""
    sk = _figure(baseline_predictions(train, test, label, task), test, label, task)
    train, test = train.copy(), test.copy()
    classes = prepared(train, test, label, task)
    _, preds = predictions(train, test, label, task, classes, "RANDOM" if random else "CART",
                           seeds_bagged, fold_seed)
    return _score(preds[column], test, label, task, classes), sk


def _versus(ours, theirs, task) -> float:
    return ours / theirs if task == "regression" else ours - theirs


def table_seed(table, seed, column, seeds_bagged, random) -> dict:
    train, test, label, task = _split(table, seed)
    on_test = _pair(train, test, label, task, column, seeds_bagged, seed + 1000, random)
    fold_of = cv_fold_of(seed, len(train))
    ours, theirs = [], []
    for k in range(CV_FOLDS):
        fit, held = train[fold_of != k], train[fold_of == k]
        o, t = _pair(fit, held, label, task, column, seeds_bagged, seed + 3000 + k, random)
        # pooled over the folds: squared errors summed (RMSE) or rows right (accuracy)
        w = len(held)
        ours.append(w * (o ** 2 if task == "regression" else o))
        theirs.append(w * (t ** 2 if task == "regression" else t))
    pool = (lambda v: float(np.sqrt(sum(v) / len(train)))) if task == "regression" else \
        (lambda v: float(sum(v) / len(train)))
    return {"task": task, "test": _versus(*on_test, task),
            "cv": _versus(pool(ours), pool(theirs), task), "test_rows": len(test),
            "cv_rows": len(train)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", default="survival.diabetic:status:classification")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--column", default="seeds", choices=("refit", "seeds"),
                    help="YDF's exported trees: one refit, or --seeds_bagged forests averaged")
    ap.add_argument("--seeds_bagged", type=int, default=5)
    ap.add_argument("--random_for", default="dd",
                    help="tables whose categories are split by YDF's RANDOM search")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    print(f"{'table':<18} seed {'test':>9} {'cv':>9}  rows (test, cv)", flush=True)
    done = []
    for table in a.tables.split(","):
        for seed in (int(s) for s in a.seeds.split(",")):
            r = table_seed(table, seed, a.column, a.seeds_bagged, table in a.random_for)
            fmt = "{:.3f}x" if r["task"] == "regression" else "{:+.3f}"
            print(f"{table.split(':')[0]:<18} {seed:>4} {fmt.format(r['test']):>9} "
                  f"{fmt.format(r['cv']):>9}  {r['test_rows']}, {r['cv_rows']}", flush=True)
            done.append((table, r))
    for table in dict.fromkeys(t for t, _ in done):
        rs = [r for t, r in done if t == table]
        if rs[0]["task"] == "regression":
            mean, fmt = (lambda v: float(np.exp(np.mean(np.log(v))))), "{:.3f}x"
        else:
            mean, fmt = (lambda v: float(np.mean(v))), "{:+.4f}"
        print(f"{table.split(':')[0]:<18} mean {fmt.format(mean([r['test'] for r in rs])):>9} "
              f"{fmt.format(mean([r['cv'] for r in rs])):>9}  over {len(rs)} seeds")


if __name__ == "__main__":
    main()
