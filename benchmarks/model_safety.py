"""What production safety costs batch prediction, side by side in one run: the job with none of
it (`--skew_report off`), with the skew report (statistics of every served row compared with
the train split's), with a shadow model (`--shadow_model_dir`: a second model scores every
row), and with the model gate's check of a newer version at launch (two versions under the
base: the newest is checked on its golden set against the previous one before the job
starts).

Each job runs in a fresh process on the same rows; `steady` is the marginal rate,
(rows - small) / (wall - wall on `--small` rows), the throughput a long job settles at, so
start-up (and the gate, paid once at launch) does not hide in it.

    python benchmarks/model_safety.py --model_dir demo_output/job/export --rows 1000000
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks._jobs import measure_job  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model_dir", required=True, help="An export, or a base of versions "
                    "(its newest is used), with a golden set (trained after preprocess kept one).")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=2, help="Best of this many runs each.")
    args = ap.parse_args(argv)
    from inference.model.versions import resolve_model_dir
    from tools.datagen import write_csv
    export = resolve_model_dir(args.model_dir)
    tmp = tempfile.mkdtemp(prefix="bench_model_safety_")
    try:
        big, small = os.path.join(tmp, "big.csv"), os.path.join(tmp, "small.csv")
        write_csv(big, args.rows, seed=5)
        write_csv(small, args.small, seed=5)
        base = os.path.join(tmp, "versions")
        for v in ("1", "2"):  # the same export twice: the gate runs and accepts version 2
            shutil.copytree(export, os.path.join(base, v))
        off = ["--skew_report", "off"]
        runs = {"plain": ["--model_dir", export] + off,
                "skew report": ["--model_dir", export],
                "shadow model": ["--model_dir", export, "--shadow_model_dir", export] + off,
                "gated newest version": ["--model_dir", base] + off}
        print(f"batch predict, {args.rows:,} CSV rows, {args.workers} worker(s), "
              f"model {export}")
        first, best = None, {}
        for _ in range(args.repeat):  # rounds alternate the configurations (drift is shared)
            for name, model_args in runs.items():
                timed = [measure_job("beam_jobs.batch_predict", model_args + [
                    "--input", src, "--output", os.path.join(tmp, "out")], args.workers)
                    for src in (big, small)]
                wall, wall_small, peak = best.get(name, (1e18, 1e18, 0.0))
                best[name] = (min(wall, timed[0][0]), min(wall_small, timed[1][0]),
                              max(peak, timed[0][1]))
        for name in runs:
            wall, wall_small, peak = best[name]
            steady = (args.rows - args.small) / max(wall - wall_small, 1e-9)
            first = first or (steady, wall)
            print(f"  {name:>22}: end-to-end {args.rows / wall:9,.0f} rows/s ({wall:5.1f} s), "
                  f"steady {steady:9,.0f} rows/s = {steady / first[0]:4.2f}x plain, "
                  f"start-up {wall_small:4.1f} s, peak {peak:,.0f} MB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
