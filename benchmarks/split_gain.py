"""Whether the held-out folds pick YDF's hessian split gain where it helps on test, measured
outside the jobs: YDF on the table's own columns with the trainer's tree settings
(benchmarks/tree_bagging.py), once with its default gain and once with `use_hessian_gain`,
each counted over 4 cross-fitted folds of the train rows as the trainer counts them (stopped
50 rounds past the folds' best log loss), on the seeded 80/20 rows of
benchmarks/tabular_quality.py. Per table and seed: each gain's test accuracy minus
scikit-learn's HistGradientBoosting's (3 seeded forests averaged at the folds' count), and the
paired difference of the per-row Brier scores over the folds' held-out rows (hessian minus
default) in standard errors: what a choice on the folds, as `--model auto` chooses the trees'
shape (training/choice_rules.py choose_shape), would read. Through the jobs that choice was
built, measured and taken out (docs/performance.md, 2026-12-07).

    PYTHONPATH=/tmp/bench_deps python benchmarks/split_gain.py --tables penguins,chile --seeds 0,1,2

Needs the packages of benchmarks/tabular_quality.py's docstring; classification tables.
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

FORESTS = 3


def one_gain(train, test, label, classes, hessian: bool, seed: int) -> tuple:
    """(the folds' count, each train row's Brier score from the fold grown without it, test
    accuracy of FORESTS seeded forests at that count) with one split gain."""
    tb.HESSIAN = hessian
    task = "classification"
    fold_of, count, folds = tb.fold_forests(train, label, task, classes, "CART", seed + 1000)
    held_probs = np.zeros((len(train), len(classes)))
    for k, m in enumerate(folds):
        held_probs[fold_of == k] = tb._probs(m, train[fold_of == k], classes)
    truth = (np.array(classes)[None, :] == train[label].to_numpy()[:, None]).astype(float)
    brier = np.sum((held_probs - truth) ** 2, axis=1)
    probs = tb.averaged(train, test, label, task, classes, count, FORESTS)
    return count, brier, tb._score(probs, test, label, task, classes)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", default="penguins,chile")
    ap.add_argument("--seeds", default="0,1,2")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    print(f"{'table':<24} seed {'rows':>5} {'counts':>8} {'default':>8} {'hessian':>8} "
          f"{'folds z':>8}", flush=True)
    for table in a.tables.split(","):
        for seed in (int(s) for s in a.seeds.split(",")):
            train, test, label, task = _split(table, seed)
            if task != "classification":
                raise SystemExit(f"{table}: a regression; the hessian gain is tried for "
                                 "classes only")
            base = baseline(train, test, label, task)
            classes = tb.prepared(train, test, label, task)
            cd, bd, ad = one_gain(train, test, label, classes, False, seed)
            ch, bh, ah = one_gain(train, test, label, classes, True, seed)
            diff = bh - bd
            z = diff.mean() / (diff.std(ddof=1) / np.sqrt(len(diff)))
            print(f"{table.split(':')[0]:<24} {seed:>4} {len(train):>5} {cd:>4}/{ch:<3} "
                  f"{ad - base:>+8.4f} {ah - base:>+8.4f} {z:>+8.1f}", flush=True)


if __name__ == "__main__":
    main()
