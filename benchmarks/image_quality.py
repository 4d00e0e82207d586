"""Image classifier quality with the trainer's DEFAULT flags, at a few data sizes.

For each size: generated shapes (tools/shapes.py, 4 classes) -> the preprocess job (default
0.8/0.1/0.1 split) -> `python -m training.task --data_dir ... --job_dir ...` with no training
flag at all, as a new user would run it -> eval accuracy over the whole eval split, the
defaults the trainer chose from the data (training/defaults.py), its collapse warnings, and
the wall time. Issue 17: defaults tuned for 1M tabular rows gave a small image set chance
accuracy; this shows what the data-driven defaults give instead.

    python benchmarks/image_quality.py --sizes 500,2000,10000
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def run_size(total: int, tmp: str, seed: int) -> dict:
    from benchmarks._jobs import time_job
    from tools import shapes
    per_class = max(1, total // len(shapes.CLASSES))
    labels = shapes.generate(os.path.join(tmp, "shapes"), per_class=per_class, seed=seed)
    prep, job = os.path.join(tmp, "prep"), os.path.join(tmp, "job")
    prep_secs = time_job("beam_jobs.preprocess", ["--format", "images", "--input", labels,
                                                  "--output", prep])
    train_secs = time_job("training.task", ["--data_dir", prep, "--job_dir", job,
                                            "--verbose", "0"])
    with open(os.path.join(job, "metrics.json")) as f:
        metrics = json.load(f)
    history = metrics.get("history", {})
    train_acc = next((history[k][-1] for k in ("accuracy", "sparse_categorical_accuracy")
                      if history.get(k)), None)
    return {"images": per_class * len(shapes.CLASSES), "eval_accuracy": metrics["eval"]["accuracy"],
            "train_accuracy": train_acc,
            "defaults": {k: v["value"] for k, v in metrics.get("defaults", {}).items()},
            "warnings": metrics.get("warnings", []), "preprocess_s": round(prep_secs, 1),
            "train_s": round(train_secs, 1)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="500,2000,10000", help="Total images per run.")
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args(argv)
    rows = []
    for total in [int(s) for s in args.sizes.split(",")]:
        tmp = tempfile.mkdtemp(prefix=f"bench_img_quality_{total}_")
        try:
            r = run_size(total, tmp, args.seed)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rows.append(r)
        print(json.dumps(r), flush=True)
    print("\n| images | defaults chosen | eval accuracy | train accuracy | collapse warning "
          "| preprocess s | train s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        d = r["defaults"]
        chosen = ", ".join(f"{k} {d[k]}" for k in ("batch_size", "epochs", "lr_schedule")
                           if k in d)
        train = "-" if r["train_accuracy"] is None else f"{r['train_accuracy']:.4f}"
        print(f"| {r['images']:,} | {chosen} | {r['eval_accuracy']:.4f} | {train} | "
              f"{'yes' if r['warnings'] else 'no'} | {r['preprocess_s']} | {r['train_s']} |")


if __name__ == "__main__":
    main()
