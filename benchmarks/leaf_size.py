"""Leaves of 5 rows (YDF's default) against 20 (scikit-learn's min_samples_leaf), YDF alone,
and which one `--model auto`'s rule would keep from 4 cross-fitted folds of the train rows.

For each table and seeded 80/20 split (benchmarks/category_encodings.py's `_split`): YDF's
oblique trees with the trainer's other settings (benchmarks/tree_bagging.py: the count of
rounds chosen over 4 cross-fitted folds, 5 forests averaged), grown with each leaf size.
Each size's folds score the train rows they were grown without (squared error, or log
loss); `z` is the paired difference 20 - 5 over its standard error, and `kept` the size
training/choice_rules.py keeps (20 where lower by ENCODING_ERRORS standard errors). Printed:
test RMSE over scikit-learn's, or accuracy minus scikit-learn's, of each size, and of the
one kept.

    PYTHONPATH=/tmp/bench_deps python benchmarks/leaf_size.py --tables carseats,msleep,pima

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
import tree_bagging as tb  # noqa: E402
from category_encodings import _split  # noqa: E402
from tabular_quality import baseline  # noqa: E402

from training.choice_rules import ENCODING_ERRORS, clearly_lower  # noqa: E402

LEAVES = (5, 20)


def held_out_losses(train, label, task, classes, fold_seed) -> tuple:
    """(the folds' count of rounds, each train row's loss by the forest grown without it)."""
    fold_of, count, folds = tb.fold_forests(train, label, task, classes, "CART", fold_seed)
    y = train[label].to_numpy()
    loss = np.zeros(len(train))
    for k, model in enumerate(folds):
        rows = fold_of == k
        p = tb._probs(model, train[rows], classes)
        if classes is None:
            loss[rows] = (p - y[rows].astype(float)) ** 2
        else:
            idx = np.array([classes.index(v) for v in y[rows]])
            loss[rows] = -np.log(np.clip(p[np.arange(len(idx)), idx], 1e-12, 1))
    return count, loss


def table_seed(spec: str, seed: int) -> dict:
    train, test, label, task = _split(spec, seed)
    base = baseline(train, test, label, task)
    classes = tb.prepared(train, test, label, task)
    losses, vs = {}, {}
    for leaf in LEAVES:
        tb.MIN_EXAMPLES = leaf
        count, losses[leaf] = held_out_losses(train, label, task, classes, seed + 1000)
        pred = np.mean(tb.seeded_forests(train, test, label, task, classes, count, 5), axis=0)
        score = tb._score(pred, test, label, task, classes)
        vs[leaf] = score / base if task == "regression" else score - base
    diff = losses[LEAVES[1]] - losses[LEAVES[0]]
    z = diff.mean() / (diff.std(ddof=1) / np.sqrt(len(diff)))
    kept = LEAVES[1] if clearly_lower(losses[LEAVES[1]], losses[LEAVES[0]],
                                      ENCODING_ERRORS)[0] else LEAVES[0]
    return {"vs": vs, "z": z, "kept": kept, "regression": task == "regression"}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", default="carseats,msleep,pima",
                    help="names of tabular_quality's lists, or package.item:label:task")
    ap.add_argument("--seeds", default="0,1,2")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    for spec in a.tables.split(","):
        for seed in map(int, a.seeds.split(",")):
            r = table_seed(spec, seed)
            fmt = "{:.3f}x" if r["regression"] else "{:+.3f}"
            print(f"{spec.split(':')[0]:<28} seed {seed}  leaves of 5: "
                  f"{fmt.format(r['vs'][5])}  of 20: {fmt.format(r['vs'][20])}  "
                  f"z(20 - 5) {r['z']:+.2f}  kept {r['kept']}: "
                  f"{fmt.format(r['vs'][r['kept']])}", flush=True)


if __name__ == "__main__":
    main()
