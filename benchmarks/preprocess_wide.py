"""What each column costs the preprocess job on a wide table, one run, the widths side by side.

A table of --rows rows and k numeric columns (plus a label) goes through the job with no spec
(`--label_column y`: every column inferred `numeric`, z-score and quantile bucket), in a fresh
process per width, as a user runs it. Printed per width: wall seconds and peak RSS of the
job's process tree, and the marginal cost per column against the narrowest width. With few
rows the cost is the graph's, not the data's: tf.transform traces, saves and loads a graph
with two outputs per column several times per job.

    python benchmarks/preprocess_wide.py
    python benchmarks/preprocess_wide.py --columns 10,250,1000 --rows 1000
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks._jobs import measure_job  # noqa: E402


def write_table(path: str, rows: int, columns: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        f.write(",".join([f"x{i}" for i in range(columns)] + ["y"]) + "\n")
        for _ in range(rows):
            xs = [rng.gauss(0, 1) for _ in range(columns)]
            f.write(",".join(f"{v:.4f}" for v in xs) + f",{sum(xs[:5]):.4f}\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--columns", default="10,250,1000", help="Widths to run, narrowest first.")
    ap.add_argument("--rows", type=int, default=1000)
    args = ap.parse_args(argv)
    widths = sorted(int(c) for c in args.columns.split(","))
    tmp = tempfile.mkdtemp(prefix="bench_wide_")
    print(f"rows: {args.rows}; cores: {os.cpu_count()}")
    print(f"{'columns':>8}{'wall s':>9}{'peak MB':>9}{'s/column':>10}{'MB/column':>10}")
    first = None
    for k in widths:
        src = os.path.join(tmp, f"w{k}.csv")
        write_table(src, args.rows, k)
        wall, peak = measure_job("beam_jobs.preprocess", [
            "--input", src, "--output", os.path.join(tmp, f"out{k}"), "--label_column", "y"])
        first = first or (k, wall, peak)
        extra = k - first[0]
        per_s = f"{(wall - first[1]) / extra:.3f}" if extra else "-"
        per_mb = f"{(peak - first[2]) / extra:.2f}" if extra else "-"
        print(f"{k:>8}{wall:>9.1f}{peak:>9.0f}{per_s:>10}{per_mb:>10}", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
