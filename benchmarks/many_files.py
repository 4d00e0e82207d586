"""Preprocess of many small files against the same rows in one file, side by side, one run.

Issue 27's bound: 20,000 one-row CSV files end to end (start-up, schema inference, pipeline)
in under 30 s on this 2-core machine; the per-file cost is the difference between the two
lines divided by the file count.

    python benchmarks/many_files.py --files 20000
    python benchmarks/many_files.py --files 20000 --model_dir <an export trained on id,x,z,y>

With --model_dir, batch prediction over both inputs is timed too.
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

HEADER = "id,x,z,y\n"


def write_inputs(tmp: str, n: int) -> tuple:
    rng = random.Random(0)
    rows = [f"r{i},{rng.random():.6f},{i % 5},{rng.random() * 10:.4f}\n" for i in range(n)]
    many = os.path.join(tmp, "many")
    os.makedirs(many)
    for i, row in enumerate(rows):
        with open(os.path.join(many, f"part-{i:06d}.csv"), "w") as f:
            f.write(HEADER + row)
    one = os.path.join(tmp, "one.csv")
    with open(one, "w") as f:
        f.write(HEADER + "".join(rows))
    return os.path.join(many, "*.csv"), one


def report(title: str, results: dict, files: int) -> None:
    base = results["one file"][0]
    print(title + ":")
    for name, (secs, peak) in results.items():
        print(f"  {name:>24}: {secs:6.1f} s  ({secs / base:4.2f}x one file, peak {peak:,.0f} MB)")
    many_secs = results[f"{files:,} one-row files"][0]
    print(f"  per-file cost: {1000 * (many_secs - base) / files:.2f} ms; "
          f"under 30 s for 20,000 files: {'yes' if many_secs < 30 else 'NO'}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--model_dir", default=None)
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="bench_many_files_")
    try:
        many, one = write_inputs(tmp, args.files)
        results = {}
        for name, pattern in (("one file", one), (f"{args.files:,} one-row files", many)):
            out = os.path.join(tmp, "out_" + name.split()[0])
            results[name] = measure_job("beam_jobs.preprocess",
                                        ["--input", pattern, "--output", out,
                                         "--label_column", "y"], args.workers)
        report(f"preprocess, {args.files:,} rows, schema inferred, {args.workers} worker(s)",
               results, args.files)
        if args.model_dir:
            results = {}
            for name, pattern in (("one file", one), (f"{args.files:,} one-row files", many)):
                out = os.path.join(tmp, "pred_" + name.split()[0])
                results[name] = measure_job("beam_jobs.batch_predict",
                                            ["--model_dir", args.model_dir, "--input", pattern,
                                             "--output", out], args.workers)
            report(f"batch predict, {args.files:,} rows", results, args.files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
