"""YDF's training time on 1 thread against a thread per core, by train rows, side by side.

The trainer's default (`--tree_threads 0`) trains the trees on one thread under
`training.defaults.TREES_ONE_THREAD_ROWS` train rows; this shows where that holds on the
machine it runs on. Taxi-like rows from `tools.datagen` (the demo's data: numbers, a
datetime, categories), the trainer's default tree settings, alternating 1 and N threads,
best of --repeat; the last column is also the time of two 1-thread fits run at once (the
folds of `--model auto`), which YDF allows because it releases the GIL.

    python benchmarks/tree_threads.py
    python benchmarks/tree_threads.py --rows 5000,30000,100000,300000 --num_trees 100
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def settings(num_trees: int) -> dict:
    """The trainer's defaults (training/config.py, training/models/trees.py)."""
    return dict(num_trees=num_trees, max_depth=6, shrinkage=0.05, min_examples=5,
                growing_strategy="BEST_FIRST_GLOBAL", max_num_nodes=31,
                split_axis="SPARSE_OBLIQUE", sparse_oblique_normalization="MIN_MAX",
                sparse_oblique_num_projections_exponent=1.0, categorical_algorithm="CART",
                validation_ratio=0.0, early_stopping="NONE", max_vocab_count=300)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="5000,30000,100000,300000")
    ap.add_argument("--num_trees", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    import pandas as pd
    import ydf

    from tools.datagen import write_csv
    sizes = [int(r) for r in args.rows.split(",")]
    src = os.path.join(tempfile.mkdtemp(prefix="bench_threads_"), "taxi.csv")
    write_csv(src, max(sizes), seed=3, dirty_fraction=0.0)
    table = pd.read_csv(src).drop(columns=["key"])
    cores = os.cpu_count() or 1
    kw = dict(label="fare_amount", task=ydf.Task.REGRESSION, **settings(args.num_trees))

    def fit(df, threads):
        t = time.perf_counter()
        ydf.GradientBoostedTreesLearner(num_threads=threads, **kw).train(df, verbose=0)
        return time.perf_counter() - t

    print(f"cores: {cores}; {args.num_trees} trees, best of {args.repeat}")
    print(f"{'rows':>8}{'1 thread s':>12}{f'{cores} threads s':>13}{'ratio':>7}"
          f"{'2 fits at once s':>18}")
    for n in sizes:
        df = table.iloc[:n]
        one, many = [], []
        for _ in range(args.repeat):
            one.append(fit(df, 1))
            many.append(fit(df, cores))
        t = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda d: fit(d, 1), [df, df]))
        both = time.perf_counter() - t
        print(f"{n:>8}{min(one):>12.2f}{min(many):>13.2f}{min(many) / min(one):>7.2f}"
              f"{both:>18.2f}", flush=True)


if __name__ == "__main__":
    main()
