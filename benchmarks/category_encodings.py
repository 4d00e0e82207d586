"""The field's options for many-valued string columns in boosted trees, measured outside the
jobs: YDF on the table's own columns (pandas), the trainer's tree settings, each option on
the same seeded 80/20 rows, against scikit-learn's HistGradientBoosting (the baseline of
benchmarks/tabular_quality.py). What `--category_encoding` was chosen from (issue 61).

Options, for the string columns of over MANY_VALUES values (the others stay categories):
- categories: YDF's categories, CART splits, min_vocab_frequency 2 (the trainer's, small table)
- random / one_hot: YDF's other categorical algorithms
- min_vocab_10: values seen fewer than 10 times grouped
- dropped: the columns left out
- counts: each value's count in the train rows, in its place
- target: its cross-fitted mean label (training/models/category_means.py, the trainer's)
- target+categories: the means beside the categories

    PYTHONPATH=/tmp/bench_deps python benchmarks/category_encodings.py \\
        --tables dd,insure,gapminder --seeds 0,1,2
    ... --tables dd --options categories,random --drop ctryname   # a column's worth to each
    ... --tables dd --options random --forests 4 --row_share 0.9    # one forest's noise, and
                                        # what the eval split's tenth of the rows costs

Needs the packages of benchmarks/tabular_quality.py's docstring. Prints each option's test
RMSE over the baseline's, or accuracy minus the baseline's, per table and seed; with
`--forests K`, the mean of K forests grown with K random seeds (each on its own draw of
`--row_share` of the train rows), then their lowest and highest. The baseline always
trains on all the train rows, as in benchmarks/tabular_quality.py.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tabular_quality import _named, baseline  # noqa: E402

OPTIONS = ("categories", "random", "one_hot", "min_vocab_10", "dropped", "counts", "target",
           "target+categories")


def _split(name: str, seed: int, drop=()):
    loader, label, task, leaks = _named(name)
    df = loader().drop(columns=list(leaks) + list(drop) + ["rownames"], errors="ignore")
    test = np.random.default_rng(seed).random(len(df)) < 0.2
    train, tested = df[~test], df[test]
    return train[train[label].notna()].copy(), tested[tested[label].notna()].copy(), label, task


def _strings(df, label):
    import pandas as pd
    return [c for c in df.columns if c != label and not pd.api.types.is_numeric_dtype(df[c])]


def _means(train, test, col, label, task, seed):
    """The trainer's encoding on pandas columns: ids from the train rows' values."""
    from training.models import category_means as cm
    values = {v: i for i, v in enumerate(sorted(train[col].astype(str).unique()))}
    ids = train[col].astype(str).map(values).to_numpy()
    if task == "regression":
        y = cm.targets(train[label].astype(float).to_numpy(), True, 1)
    else:
        classes = {v: i for i, v in enumerate(sorted(train[label].astype(str).unique()))}
        y = cm.targets(train[label].astype(str).map(classes).to_numpy(), False, len(classes))
    table, cross = cm.fit(col, ids, y, len(values), seed)
    served = table.values(test[col].astype(str).map(values).fillna(-1).astype(int).to_numpy())
    for j, name in enumerate(table.names):
        train[name], test[name] = cross[:, j], served[:, j]


def _fit(train, test, label, task, seed, categorical_algorithm="CART", min_vocab=2) -> float:
    import ydf
    for df in (train, test):
        for c in _strings(df, label):
            df[c] = df[c].astype(str)
        if task != "regression":
            df[label] = df[label].astype(str)
    learner = ydf.GradientBoostedTreesLearner(
        label=label, task=ydf.Task.REGRESSION if task == "regression" else
        ydf.Task.CLASSIFICATION, growing_strategy="BEST_FIRST_GLOBAL", max_num_nodes=31,
        split_axis="SPARSE_OBLIQUE", sparse_oblique_normalization="MIN_MAX",
        sparse_oblique_num_projections_exponent=1.0, categorical_algorithm=categorical_algorithm,
        num_trees=300, max_depth=6, shrinkage=0.05, min_examples=5,
        min_vocab_frequency=min_vocab, max_vocab_count=300, random_seed=seed, num_threads=1)
    model = learner.train(train, verbose=0)
    pred = model.predict(test)
    if task == "regression":
        return float(np.sqrt(np.mean((pred - test[label].astype(float).to_numpy()) ** 2)))
    classes = np.array(model.label_classes())
    picked = classes[(pred > 0.5).astype(int)] if pred.ndim == 1 else classes[pred.argmax(1)]
    return float(np.mean(picked == test[label].to_numpy()))


def option(name, train, test, label, task, seed, many) -> float:
    a, b = train.copy(), test.copy()
    if name in ("random", "one_hot"):
        return _fit(a, b, label, task, seed, categorical_algorithm=name.upper())
    if name == "min_vocab_10":
        return _fit(a, b, label, task, seed, min_vocab=10)
    if name == "counts":
        for c in many:
            counts = a[c].astype(str).value_counts()
            a[c + "__n"] = a[c].astype(str).map(counts).fillna(0).to_numpy()
            b[c + "__n"] = b[c].astype(str).map(counts).fillna(0).to_numpy()
    if name.startswith("target"):
        for c in many:
            _means(a, b, c, label, task, seed)
    if name in ("dropped", "counts", "target"):
        a, b = a.drop(columns=many), b.drop(columns=many)
    return _fit(a, b, label, task, seed)


def _draw(train, share: float, seed: int):
    return train if share >= 1 else train.sample(frac=share, random_state=seed)


def _cell(values, base: float, task: str) -> str:
    """The mean of the forests' figures against the baseline, then their range."""
    vs = np.array(values) / base if task == "regression" else np.array(values) - base
    fmt = "{:.3f}x" if task == "regression" else "{:+.3f}"
    cell = fmt.format(vs.mean())
    if len(vs) > 1:
        cell += f" ({fmt.format(vs.min())}..{fmt.format(vs.max())})"
    return f"{cell:>17}"


def main(argv=None) -> None:
    from training.models.category_means import MANY_VALUES
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", default="dd,insure,gapminder,midwest,texas")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--options", default=",".join(OPTIONS))
    ap.add_argument("--drop", default="", help="columns left out for every option and the "
                    "baseline alike (what a column is worth to each learner)")
    ap.add_argument("--forests", type=int, default=1,
                    help="forests grown per option and seed, with random seeds seed*100+k")
    ap.add_argument("--row_share", type=float, default=1.0,
                    help="each forest's draw of the train rows (the jobs' default eval "
                    "split leaves the trees 0.9)")
    a = ap.parse_args(argv)
    if a.forests < 1 or not 0 < a.row_share <= 1:
        ap.error("--forests is at least 1 and --row_share in (0, 1]")
    warnings.filterwarnings("ignore")
    options = a.options.split(",")
    print(f"{'table':<11} seed  {'baseline':>9}  " + " ".join(f"{o:>17}" for o in options))
    for table in a.tables.split(","):
        for seed in (int(s) for s in a.seeds.split(",")):
            train, test, label, task = _split(table, seed, [c for c in a.drop.split(",") if c])
            base = baseline(train, test, label, task)
            many = [c for c in _strings(train, label) if train[c].nunique() > MANY_VALUES]
            cells = []
            for o in options:
                try:
                    vs = [option(o, _draw(train, a.row_share, seed * 100 + k), test, label,
                                 task, seed * 100 + k, many) for k in range(a.forests)]
                except ValueError as e:  # YDF refuses some pairings (ONE_HOT on some tasks)
                    cells.append(f"{'refused':>17}")
                    print(f"  {o}: {str(e)[:120]}", file=sys.stderr)
                    continue
                cells.append(_cell(vs, base, task))
            print(f"{table:<11} {seed:>4}  {base:>9.4g}  " + " ".join(cells) + f"   ({', '.join(many)})",
                  flush=True)


if __name__ == "__main__":
    main()
