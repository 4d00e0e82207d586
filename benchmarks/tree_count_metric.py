"""The boosted trees' count chosen over 4 cross-fitted folds by each fold's log loss (the
trainer's rule until 2026-12-06) against by its error rate and by the larger of the two (the
trainer's rule since: training/models/fold_count.py), measured
outside the jobs: YDF on the table's own columns with the trainer's tree settings
(benchmarks/tree_bagging.py), every fold grown to 300 trees without stopping, on the seeded
80/20 rows of benchmarks/tabular_quality.py, against scikit-learn's HistGradientBoosting
there. Columns (accuracy minus scikit-learn's; 3 seeded forests averaged at each count):
- loss: the count with the lowest log loss summed over the folds;
- error: the count with the fewest errors summed over the folds (log loss breaks ties);
- larger: the larger of the two (trees grown on while the folds' accuracy still rises).

    PYTHONPATH=/tmp/bench_deps python benchmarks/tree_count_metric.py --tables car,chile --seeds 0,1,2

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


def fold_curves(train, label, task, seed) -> tuple:
    """(log loss, errors) after each round, summed over the 4 folds' held-out rows."""
    fold_of = np.random.default_rng(seed + 1000).integers(0, tb.FOLDS, len(train))
    losses, errors = [], []
    for k in range(tb.FOLDS):
        held = train[fold_of == k]
        m = tb._learner(label, task, 42, "CART", 300, False).train(
            train[fold_of != k], valid=held, verbose=0)
        logs = m.training_logs()
        losses.append(np.array([e.evaluation.loss for e in logs]) * len(held))
        errors.append((1 - np.array([e.evaluation.accuracy for e in logs])) * len(held))
    n = min(len(x) for x in losses)
    return (np.sum([x[:n] for x in losses], 0), np.sum([x[:n] for x in errors], 0))


def table_seed(table, seed) -> dict:
    train, test, label, task = _split(table, seed)
    if task == "regression":
        raise SystemExit(f"{table}: a regression table; this compares classification counts")
    base = baseline(train, test, label, task)
    classes = tb.prepared(train, test, label, task)
    loss, errors = fold_curves(train, label, task, seed)
    counts = {"loss": int(np.argmin(loss)) + 1,
              "error": int(np.argmin(errors + 1e-6 * loss)) + 1}
    counts["larger"] = max(counts.values())
    scored = {}
    for count in set(counts.values()):
        probs = tb.averaged(train, test, label, task, classes, count, FORESTS)
        scored[count] = tb._score(probs, test, label, task, classes) - base
    return {"classes": len(classes), "counts": counts,
            "vs": {k: scored[c] for k, c in counts.items()}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", default="car,chile")
    ap.add_argument("--seeds", default="0,1,2")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    columns = ("loss", "error", "larger")
    print(f"{'table':<22} seed classes counts (loss/error) " + " ".join(f"{c:>8}" for c in columns),
          flush=True)
    done = []
    for table in a.tables.split(","):
        for seed in (int(s) for s in a.seeds.split(",")):
            r = table_seed(table, seed)
            print(f"{table.split(':')[0]:<22} {seed:>4} {r['classes']:>7} "
                  f"{r['counts']['loss']:>6} / {r['counts']['error']:<6}          "
                  + " ".join(f"{r['vs'][c]:>+8.4f}" for c in columns), flush=True)
            done.append(r)
    print(f"{'mean':<22} {len(done):>4}                                 " + " ".join(
        f"{np.mean([r['vs'][c] for r in done]):>+8.4f}" for c in columns))


if __name__ == "__main__":
    main()
