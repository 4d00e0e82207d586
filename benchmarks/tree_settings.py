"""The boosted trees' default settings, side by side on public regression tables.

Why `training.task`'s trees default to oblique splits grown best-first with CART category
splits: for each table, three seeded 80/20 splits; every variant of YDF's gradient boosted
trees trains on the first 80% of the train rows (what the trees see after preprocess's
default 0.8/0.1/0.1 split), scikit-learn's HistGradientBoostingRegressor with its defaults on
all of them (the quality benchmark's baseline) and on the same 80%. Printed: each variant's
test RMSE over the baseline's, the geometric mean over the three splits, per table and over
all tables (lower is better). Raw columns go in (string columns as categories, R's
`rownames` dropped); the jobs' transform is left out so the trees' settings alone differ.

    PYTHONPATH=/tmp/bench_deps python benchmarks/tree_settings.py [--tables a,b] [--seeds 3]
(deps as benchmarks/tabular_quality.py says.)
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tabular_quality import MORE_TABLES, TABLES  # noqa: E402

BASE = dict(num_trees=300, max_depth=6, shrinkage=0.1, min_examples=5, min_vocab_frequency=1)
OBLIQUE = dict(split_axis="SPARSE_OBLIQUE", sparse_oblique_normalization="MIN_MAX",
               sparse_oblique_num_projections_exponent=1.0)
BEST_FIRST = dict(growing_strategy="BEST_FIRST_GLOBAL", max_num_nodes=31)
VARIANTS = {
    "ydf_defaults": BASE,
    "oblique": {**BASE, **OBLIQUE},
    "best_first": {**BASE, **BEST_FIRST},
    "rank1_template": {**BASE, **OBLIQUE, **BEST_FIRST, "categorical_algorithm": "RANDOM"},
    "oblique_best_first": {**BASE, **OBLIQUE, **BEST_FIRST, "categorical_algorithm": "CART"},
    # training.task's setting under 10,000 train rows (every table here but diamonds, whose
    # trees the job stops early; here they are grown like the others').
    "ours": {**BASE, **OBLIQUE, **BEST_FIRST, "categorical_algorithm": "CART",
             "shrinkage": 0.05, "validation_ratio": 0.0, "early_stopping": "NONE"},
    # The other split axis `--split_axis auto` grows beside it (kept where lower by 3
    # standard errors on the held-out train rows).
    "ours_axis_aligned": {**BASE, **BEST_FIRST, "categorical_algorithm": "CART",
                          "shrinkage": 0.05, "validation_ratio": 0.0, "early_stopping": "NONE"},
}


def _frame(df, label):
    import pandas as pd
    df = df[df[label].notna()].copy()
    cols = [c for c in df.columns if c not in (label, "rownames")]
    for c in cols:
        if pd.api.types.is_datetime64_any_dtype(df[c]):
            df[c] = df[c].astype("int64")
        elif not pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c]):
            df[c] = pd.Categorical(df[c].astype(str))
    # As the quality benchmark's baseline: scikit-learn refuses over 255 categories (ISLR
    # Auto's car names).
    cols = [c for c in cols if str(df[c].dtype) != "category" or len(df[c].cat.categories) <= 255]
    return df, cols


def _ydf_columns(df, cols):
    return {c: (np.array(df[c].astype(str).tolist(), dtype=object)
                if str(df[c].dtype) == "category" else df[c].to_numpy(np.float32))
            for c in cols}


def _rmse(pred, y) -> float:
    return float(np.sqrt(np.mean((np.asarray(pred, np.float64) - np.asarray(y, np.float64)) ** 2)))


def one_split(df, cols, label, seed) -> dict:
    import ydf
    from sklearn.ensemble import HistGradientBoostingRegressor
    idx = np.random.default_rng(seed).permutation(len(df))
    n_test = int(0.2 * len(df))
    test, train = df.iloc[idx[:n_test]], df.iloc[idx[n_test:]]
    seen = train.iloc[: int(0.8 * len(train))]
    out = {}
    for name, rows in (("sklearn", train), ("sklearn_same_rows", seen)):
        m = HistGradientBoostingRegressor(categorical_features="from_dtype", random_state=0)
        m.fit(rows[cols], rows[label].astype(float))
        out[name] = _rmse(m.predict(test[cols]), test[label])
    data = _ydf_columns(seen, cols)
    data["__label__"] = seen[label].to_numpy(np.float32)
    for name, kw in VARIANTS.items():
        m = ydf.GradientBoostedTreesLearner(label="__label__", task=ydf.Task.REGRESSION,
                                            random_seed=0, **kw).train(data, verbose=0)
        out[name] = _rmse(m.predict(_ydf_columns(test, cols)), test[label])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", default=",".join(n for n, t in TABLES.items()
                                                 if t[2] == "regression"),
                    help="names of tabular_quality's TABLES or MORE_TABLES (regression)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--max_rows", type=int, default=20_000)
    a = ap.parse_args(argv)
    names = ["sklearn_same_rows"] + list(VARIANTS)
    print(f"{'table':<11} {'rows':>6} " + " ".join(f"{n:>17}" for n in names))
    per_table = []
    for table in a.tables.split(","):
        loader, label, _, leaks = {**TABLES, **MORE_TABLES}[table]
        df, cols = _frame(loader().drop(columns=list(leaks)), label)
        if len(df) > a.max_rows:
            df = df.sample(a.max_rows, random_state=0)
        runs = [one_split(df, cols, label, seed) for seed in range(a.seeds)]
        ratios = {n: float(np.exp(np.mean([np.log(r[n] / r["sklearn"]) for r in runs])))
                  for n in names}
        per_table.append(ratios)
        print(f"{table:<11} {len(df):>6} " + " ".join(f"{ratios[n]:>17.3f}" for n in names),
              flush=True)
    geo = {n: float(np.exp(np.mean([np.log(r[n]) for r in per_table]))) for n in names}
    print(f"{'geo. mean':<11} {'':>6} " + " ".join(f"{geo[n]:>17.3f}" for n in names))
    print("(test RMSE over scikit-learn's on all train rows; trees and sklearn_same_rows see "
          "the first 80% of them)")


if __name__ == "__main__":
    main()
