"""What averaged forests cost at serving time (`--num_forests`): the same table's trees
trained with 1 and with K forests (`training.task --model boosted_trees --num_forests N`,
the same rows and settings), each export's serving signature (tf.Examples in, through the
embedded tf.transform graph) called back to back with batches of each size
(benchmarks/serving_batching.py's cost loop), side by side in one run: p50 latency and
rows/s, and each K's rows/s over one forest's.

    python benchmarks/forests_serving.py --data_dir demo_output/prep --forests 1,5

Trains into a temporary folder unless `--work_dir` is given; the data needs a golden set
(preprocess keeps one by default), whose rows are the requests.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serving_batching import _cost, _requests  # noqa: E402


def _export(data_dir: str, job_dir: str, forests: int, flags) -> str:
    subprocess.run([sys.executable, "-m", "training.task", "--data_dir", data_dir, "--job_dir",
                    job_dir, "--model", "boosted_trees", "--num_forests", str(forests),
                    "--verbose", "0", *flags], check=True, cwd=ROOT)
    with open(os.path.join(job_dir, "metrics.json")) as f:
        return json.load(f)["export_dir"]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data_dir", required=True, help="a preprocess job's output")
    ap.add_argument("--forests", default="1,5")
    ap.add_argument("--sizes", default="1,64,1024")
    ap.add_argument("--threads", type=int, default=1, help="callers at once")
    ap.add_argument("--seconds", type=float, default=3.0, help="per batch size")
    ap.add_argument("--work_dir", default=None)
    ap.add_argument("--train_flags", default="--split_axis SPARSE_OBLIQUE",
                    help="more training.task flags (default: oblique splits, the shape "
                    "the default averages)")
    a = ap.parse_args(argv)
    work = a.work_dir or tempfile.mkdtemp(prefix="forests_serving_")
    counts = [int(k) for k in a.forests.split(",")]
    sizes = [int(s) for s in a.sizes.split(",")]
    exports = {k: _export(a.data_dir, os.path.join(work, f"forests_{k}"), k,
                          a.train_flags.split()) for k in counts}
    import ydf_tf  # noqa: F401  (the forests' inference ops, before loading an export)
    rows = _requests(exports[counts[0]])
    costs = {k: _cost(e, rows, sizes, a.threads, a.seconds) for k, e in exports.items()}
    print(f"{'forests':>7} " + " ".join(f"{f'batch {s}: p50 ms, rows/s':>30}" for s in sizes))
    for k, cost in costs.items():
        print(f"{k:>7} " + " ".join(
            f"{p50:>11.2f} {rps:>10,.0f} ({rps / costs[counts[0]][j][3]:.2f}x)"
            for j, (_, p50, _, rps) in enumerate(cost)))
    print(f"(work dir {work}; rows/s relative to {counts[0]} forest(s))")
    return costs


if __name__ == "__main__":
    main()
