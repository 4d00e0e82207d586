"""Image classifier quality with the trainer's DEFAULT flags, at a few data sizes.

For each size: generated shapes (tools/shapes.py, 4 classes) -> the preprocess job (default
0.8/0.1/0.1 split) -> `python -m training.task --data_dir ... --job_dir ...` with no training
flag at all, as a new user would run it -> eval accuracy over the whole eval split, the
defaults the trainer chose from the data (training/defaults.py), its collapse warnings, and
the wall time. Issue 17: defaults tuned for 1M tabular rows gave a small image set chance
accuracy; this shows what the data-driven defaults give instead.

    python benchmarks/image_quality.py --sizes 500,2000,10000
    python benchmarks/image_quality.py --image_dir DIR     # your images: DIR/<class>/<file>
    python benchmarks/image_quality.py --sklearn_digits    # real data: scikit-learn's digits

`--sklearn_digits` is the issue's case: 1,797 real handwritten digits (10 classes, 8x8,
upscaled to 32x32 PNGs), on which an SVM gets ~0.98. It needs `pip install scikit-learn`
(not a dependency of the project).
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
    """Generated shapes of `total` images."""
    from tools import shapes
    per_class = max(1, total // len(shapes.CLASSES))
    labels = shapes.generate(os.path.join(tmp, "shapes"), per_class=per_class, seed=seed)
    return run_images(labels, tmp, per_class * len(shapes.CLASSES))


def write_sklearn_digits(directory: str) -> int:
    """scikit-learn's digits as DIRECTORY/<digit>/<i>.png (32x32 grey); returns the count."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit("--sklearn_digits needs scikit-learn: pip install scikit-learn")
    import numpy as np
    from PIL import Image
    digits = load_digits()
    for i, (pixels, label) in enumerate(zip(digits.images, digits.target)):
        folder = os.path.join(directory, f"digit_{label}")
        os.makedirs(folder, exist_ok=True)
        img = Image.fromarray((pixels / 16 * 255).astype(np.uint8), "L")
        img.resize((32, 32), Image.NEAREST).save(os.path.join(folder, f"{i}.png"))
    return len(digits.images)


def run_images(source: str, tmp: str, count: int) -> dict:
    """preprocess --format images of `source` (class folders or a labels CSV), then the
    trainer with no training flag."""
    from benchmarks._jobs import time_job
    prep, job = os.path.join(tmp, "prep"), os.path.join(tmp, "job")
    prep_secs = time_job("beam_jobs.preprocess", ["--format", "images", "--input", source,
                                                  "--output", prep])
    train_secs = time_job("training.task", ["--data_dir", prep, "--job_dir", job,
                                            "--verbose", "0"])
    with open(os.path.join(job, "metrics.json")) as f:
        metrics = json.load(f)
    history = metrics.get("history", {})
    train_acc = next((history[k][-1] for k in ("accuracy", "sparse_categorical_accuracy")
                      if history.get(k)), None)
    return {"images": count, "eval_accuracy": metrics["eval"]["accuracy"],
            "eval_images": metrics["eval"].get("examples"), "train_accuracy": train_acc,
            "defaults": {k: v["value"] for k, v in metrics.get("defaults", {}).items()},
            "warnings": metrics.get("warnings", []), "preprocess_s": round(prep_secs, 1),
            "train_s": round(train_secs, 1)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="500,2000,10000", help="Total images per run.")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--image_dir", help="Your own images (DIR/<class>/<file>, or a labels "
                                        "CSV) instead of generated ones.")
    ap.add_argument("--sklearn_digits", action="store_true",
                    help="scikit-learn's 1,797 real digit images instead of generated ones.")
    args = ap.parse_args(argv)
    rows = []
    runs = ([("image_dir", None)] if args.image_dir else
            [("digits", None)] if args.sklearn_digits else
            [("shapes", int(s)) for s in args.sizes.split(",")])
    for kind, total in runs:
        tmp = tempfile.mkdtemp(prefix=f"bench_img_quality_{kind}_")
        try:
            if kind == "shapes":
                r = run_size(total, tmp, args.seed)
            elif kind == "digits":
                folder = os.path.join(tmp, "digits")
                r = run_images(folder, tmp, write_sklearn_digits(folder))
            else:
                r = run_images(args.image_dir, tmp, None)
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
        images = "-" if r["images"] is None else f"{r['images']:,}"
        print(f"| {images} | {chosen} | {r['eval_accuracy']:.4f} | {train} | "
              f"{'yes' if r['warnings'] else 'no'} | {r['preprocess_s']} | {r['train_s']} |")


if __name__ == "__main__":
    main()
