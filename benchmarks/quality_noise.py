"""How far a table's figure in benchmarks/tabular_quality.py is from scikit-learn's, against
the noise of its own test rows: a paired bootstrap over the test rows of a finished run (our
batch predictions beside scikit-learn's on the same rows, resampled together).

    PYTHONPATH=<deps> python benchmarks/quality_noise.py --work_dir D --tables housing,dd
(D: the --work_dir of a tabular_quality.py run that has finished; deps as its docstring.)

Prints per table the figure (test RMSE over scikit-learn's, or accuracy minus scikit-learn's),
the standard deviation of that figure over `--draws` resamples of the test rows, and its 90%
interval. Only rows our jobs predicted are paired (a rejected test row is left out of both).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tabular_quality import _named, baseline_predictions  # noqa: E402


def _paired(work: str, name: str):
    """(label, ours, scikit-learn's, regression) over the test rows both predicted."""
    import pandas as pd
    _, label, task, _ = _named(name)
    d = os.path.join(work, name.split(":")[0])
    train = pd.read_csv(os.path.join(d, "train.csv"))
    test = pd.read_csv(os.path.join(d, "test.csv"))
    theirs = baseline_predictions(train, test, label, task)
    ours = {}
    for path in glob.glob(os.path.join(d, "pred", "predictions-*.jsonl")):
        with open(path) as f:
            for line in f:
                p = json.loads(line)
                ours[str(p["key"])] = p
    # The jobs' key: the table's row names where it has them, else file:line (header: line 1).
    keys = (test["rownames"].astype(str).tolist() if "rownames" in test
            else [f"test.csv:{i + 2}" for i in range(len(test))])
    rows = [i for i, k in enumerate(keys) if k in ours and pd.notna(test[label].iloc[i])]
    if not rows:
        raise SystemExit(f"{name}: no test row of {d} matches a prediction's key")
    regression = task == "regression"
    y = test[label].iloc[rows].to_numpy()
    mine = np.array([ours[keys[i]]["prediction" if regression else "class"] for i in rows])
    labels = np.array([ours[keys[i]]["label"] for i in rows])
    if regression and not np.allclose(labels.astype(float), y.astype(float)):
        raise SystemExit(f"{name}: the predictions' labels are not the test rows' (keys?)")
    return y, mine, theirs[rows], regression


def noise(y, mine, theirs, regression: bool, draws: int, seed: int = 0):
    """(figure, bootstrap standard deviation, 5th and 95th percentiles)."""
    if regression:
        a = (mine.astype(float) - y.astype(float)) ** 2
        b = (theirs.astype(float) - y.astype(float)) ** 2

        def figure(i):
            return float(np.sqrt(a[i].mean() / b[i].mean()))
    else:
        a = mine.astype(str) == y.astype(str)
        b = theirs.astype(str) == y.astype(str)

        def figure(i):
            return float(a[i].mean() - b[i].mean())
    rng = np.random.default_rng(seed)
    boot = np.array([figure(rng.integers(0, len(y), len(y))) for _ in range(draws)])
    return figure(np.arange(len(y))), float(boot.std()), *np.quantile(boot, [0.05, 0.95])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work_dir", required=True)
    ap.add_argument("--tables", required=True, help="names as tabular_quality.py's --tables")
    ap.add_argument("--draws", type=int, default=2000)
    a = ap.parse_args(argv)
    print(f"{'table':<14} {'rows':>5} {'figure':>8} {'sd':>7}  90% interval")
    for name in a.tables.split(","):
        y, mine, theirs, regression = _paired(a.work_dir, name)
        fig, sd, lo, hi = noise(y, mine, theirs, regression, a.draws)
        kind = "x" if regression else ""
        print(f"{name.split(':')[0]:<14} {len(y):>5} {fig:>7.3f}{kind or ' '} {sd:>7.3f}  "
              f"[{lo:.3f}, {hi:.3f}]", flush=True)
    print("(figure: test RMSE over scikit-learn's (x), or accuracy minus scikit-learn's; sd and "
          "interval over resamples of the paired test rows)")


if __name__ == "__main__":
    main()
