"""How the default flow grows with rows: the README's three commands, default flags, on the
demo's generated taxi table (numbers, a datetime, categories, a few bad rows) at each size.
Per job: wall seconds and the peak summed RSS of its process tree; between sizes, the
exponent of time and memory in rows (log-log slope: 1.0 is linear, 0.0 flat).

    python benchmarks/default_flow_scale.py --rows 100000,1000000,5000000 --out scale.json

Preprocess runs on 2 DirectRunner workers (as `make demo`); training and batch prediction as
the README writes them. Sizes run smallest first; a size that fails is reported and the run
goes on to the next. Disk: about 0.6 GB per million rows (CSV, TFRecords, predictions).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks._jobs import measure_job  # noqa: E402

JOBS = ("preprocess", "train", "batch_predict")


def job_args(work: str) -> dict:
    csv = os.path.join(work, "taxi.csv")
    return {
        "preprocess": ("beam_jobs.preprocess",
                       ["--input", csv, "--output", os.path.join(work, "prep"),
                        "--label_column", "fare_amount"], 2),
        "train": ("training.task", ["--data_dir", os.path.join(work, "prep"),
                                    "--job_dir", os.path.join(work, "job")], 1),
        "batch_predict": ("beam_jobs.batch_predict",
                          ["--model_dir", os.path.join(work, "job", "export"), "--input", csv,
                           "--output", os.path.join(work, "predictions")], 1),
    }


def run_size(rows: int, root: str, seed: int) -> dict:
    work = os.path.join(root, f"rows_{rows}")
    os.makedirs(work, exist_ok=True)
    t = time.time()
    subprocess.run([sys.executable, "-m", "tools.datagen", "--rows", str(rows), "--seed",
                    str(seed), "--output", os.path.join(work, "taxi.csv")], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = {"rows": rows, "generate_s": round(time.time() - t, 1)}
    for job, (module, args, workers) in job_args(work).items():
        try:
            secs, peak = measure_job(module, args, workers)
        except subprocess.CalledProcessError as e:
            out[job] = {"failed": f"exit {e.returncode}",
                        "stderr_tail": (e.stderr or "").strip().splitlines()[-5:]}
            print(f"{rows:>10,} rows  {job:<14} failed: exit {e.returncode}\n  "
                  + "\n  ".join(out[job]["stderr_tail"]), flush=True)
            break
        out[job] = {"seconds": round(secs, 1), "peak_mb": round(peak)}
        print(f"{rows:>10,} rows  {job:<14} {secs:8.1f} s  {peak:8.0f} MB", flush=True)
    metrics = os.path.join(work, "job", "metrics.json")
    if os.path.exists(metrics):
        with open(metrics) as f:
            m = json.load(f)
        cands = m.get("model", {}).get("candidates", {})
        trees = cands.get("boosted_trees", {})
        out["model"] = {"family": m.get("model", {}).get("family"), "eval": m.get("eval"),
                        "trees_rows": trees.get("refit_rows") or trees.get("rows"),
                        "trees_refit": trees.get("refit_rows") is not None,
                        "validation": {n: c.get("validation") for n, c in cands.items()}}
    shutil.rmtree(work, ignore_errors=True)
    return out


def exponents(results: list) -> list:
    """Log-log slopes of seconds and peak MB between consecutive sizes, per job."""
    out = []
    for a, b in zip(results, results[1:]):
        step = {"from": a["rows"], "to": b["rows"]}
        for job in JOBS:
            ja, jb = a.get(job, {}), b.get(job, {})
            for key in ("seconds", "peak_mb"):
                if key in ja and key in jb and ja[key] > 0 and jb[key] > 0:
                    step[f"{job}_{key}"] = round(math.log(jb[key] / ja[key])
                                                 / math.log(b["rows"] / a["rows"]), 2)
        out.append(step)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="100000,1000000,5000000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work_dir", default=None, help="Default: a new temporary folder.")
    ap.add_argument("--out", default=None, help="Write the results as JSON here too.")
    args = ap.parse_args(argv)
    sizes = sorted(int(r) for r in args.rows.split(","))
    root = args.work_dir or tempfile.mkdtemp(prefix="bench_scale_")
    results = [run_size(rows, root, args.seed) for rows in sizes]
    report = {"sizes": results, "exponents": exponents(results),
              "cores": os.cpu_count()}
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
