"""A small table's gap to scikit-learn by repeated cross-validation of all its rows, in
accuracy and in log loss (classification) or RMSE (regression).

A test split of 80 rows moves accuracy by 0.0125 a row, more than the quality bar (-0.005).
Here every row of the table is scored `--draws` times, each time by models trained on the
other (K-1)/K of the rows, about the rows a seeded 80/20 split trains on when K is 5.
The models are those of benchmarks/cv_against_test.py: YDF with the trainer's tree settings
(its count of trees chosen over 4 inner cross-fitted folds, 5 forests averaged:
benchmarks/tree_bagging.py's `seeds`) against scikit-learn's HistGradientBoosting with its
defaults. Log loss is what the folds choose the trees' count on; accuracy is what
benchmarks/tabular_quality.py reports.

    PYTHONPATH=/tmp/bench_deps python benchmarks/repeated_cv.py \\
        --table survival.diabetic:status:classification --draws 20 [--group id | --relabel id]

`--group C` keeps the rows sharing a value of C in one fold (diabetic's two eyes of a
patient: no test row's partner is trained on); `--relabel C` swaps C's values among
themselves (the rows that shared a value still do; its order says nothing).

Prints, after each draw, the running figures: the accuracy and mean log loss of each and
their differences (classification), or RMSE over scikit-learn's; standard errors are over
rows (paired), so they understate the spread between draws, which is printed too.
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
from category_encodings import _split  # noqa: E402
from tabular_quality import baseline_model  # noqa: E402
from tree_bagging import predictions, prepared  # noqa: E402


def _theirs(train, test, label, task, classes) -> np.ndarray:
    """scikit-learn's predictions, or its probabilities in `classes`' order."""
    model, x_test = baseline_model(train, test, label, task)
    if classes is None:
        return model.predict(x_test)
    p, own = model.predict_proba(x_test), list(model.classes_)
    out = np.full((len(test), len(classes)), 1e-12)
    for j, c in enumerate(own):
        out[:, classes.index(c)] = p[:, j]
    return out


def _row_scores(pred, y, classes) -> dict:
    """Per row: squared error, or right (0/1) and log loss."""
    if classes is None:
        return {"squared": (np.asarray(pred, float) - y.astype(float)) ** 2}
    idx = np.array([classes.index(v) for v in y])
    p = np.clip(pred[np.arange(len(idx)), idx], 1e-12, 1.0)
    return {"right": (pred.argmax(1) == idx).astype(float), "log_loss": -np.log(p)}


def fold_of(full, draw: int, folds: int, group=None) -> np.ndarray:
    """Each row's fold; with `group`, a column whose rows with one value share a fold."""
    rng = np.random.default_rng(5000 + draw)
    if group is None:
        return rng.permutation(len(full)) % folds
    keys = full[group].unique()
    return full[group].map(dict(zip(keys, rng.permutation(len(keys)) % folds))).to_numpy()


def relabelled(full, column: str):
    """`column`'s values swapped among themselves (seeded): rows that shared a value still
    do, but its order says nothing."""
    keys = full[column].unique()
    out = full.copy()
    out[column] = out[column].map(dict(zip(keys, np.random.default_rng(99).permutation(keys))))
    return out


def one_draw(full, label, task, draw: int, folds: int, group=None) -> tuple:
    """({ours, theirs} each {score: per-row values}) of one draw of `folds`-fold CV."""
    fold_of_row = fold_of(full, draw, folds, group)
    rows = {"ours": {}, "theirs": {}}
    for k in range(folds):
        train, test = full[fold_of_row != k].copy(), full[fold_of_row == k].copy()
        classes = prepared(train, test, label, task)
        _, preds = predictions(train, test, label, task, classes, "CART", 5,
                               7000 + draw * 10 + k)
        y = test[label].to_numpy()
        for who, pred in (("ours", preds["seeds"]),
                          ("theirs", _theirs(train, test, label, task, classes))):
            for name, v in _row_scores(pred, y, classes).items():
                rows[who].setdefault(name, []).append(v)
    return {who: {n: np.concatenate(v) for n, v in d.items()} for who, d in rows.items()}


def _line(done: list, task: str) -> str:
    ours = {n: np.concatenate([d["ours"][n] for d in done]) for n in done[0]["ours"]}
    theirs = {n: np.concatenate([d["theirs"][n] for d in done]) for n in done[0]["ours"]}
    if task == "regression":
        per_draw = [np.sqrt(d["ours"]["squared"].mean() / d["theirs"]["squared"].mean())
                    for d in done]
        return (f"RMSE over scikit-learn's {np.sqrt(ours['squared'].mean() / theirs['squared'].mean()):.3f}x"
                f" (draws {min(per_draw):.3f}x..{max(per_draw):.3f}x)")
    diff = ours["right"] - theirs["right"]
    loss = ours["log_loss"] - theirs["log_loss"]
    per_draw = [float((d["ours"]["right"] - d["theirs"]["right"]).mean()) for d in done]
    se = lambda v: float(v.std(ddof=1) / np.sqrt(len(v)))  # noqa: E731
    return (f"accuracy {ours['right'].mean():.4f} against {theirs['right'].mean():.4f}, "
            f"difference {diff.mean():+.4f} (se {se(diff):.4f}; draws "
            f"{min(per_draw):+.4f}..{max(per_draw):+.4f}); log loss {ours['log_loss'].mean():.4f}"
            f" against {theirs['log_loss'].mean():.4f}, difference {loss.mean():+.4f} "
            f"(se {se(loss):.4f})")


def main(argv=None) -> None:
    import pandas as pd
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", default="survival.diabetic:status:classification")
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--group", default=None,
                    help="a column whose rows with one value go to one fold (a patient's)")
    ap.add_argument("--relabel", default=None,
                    help="a column whose values are swapped among themselves first")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    train, test, label, task = _split(a.table, 0)
    full = pd.concat([train, test]).reset_index(drop=True)
    if a.relabel:
        full = relabelled(full, a.relabel)
    done = []
    for draw in range(a.draws):
        done.append(one_draw(full, label, task, draw, a.folds, a.group))
        print(f"{a.table.split(':')[0]} {len(full)} rows, {draw + 1} draws of {a.folds}-fold: "
              f"{_line(done, task)}", flush=True)


if __name__ == "__main__":
    main()
