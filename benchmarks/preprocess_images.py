"""Images/s of `preprocess --format images` against a bare single-process loop, one run.

The bare loop: PIL decode -> resize (longest side) -> JPEG encode -> tf.train.Example ->
gzip TFRecordWriter, in one process, no validation, no split, no label vocabulary. The job does
those plus validation, EXIF/mode normalisation, the split and tf.transform. Target: the job
reaches >= 0.5x the bare loop's images/s per core.

Two job figures per worker count: end to end (wall time of a fresh `python -m` run, start-up
included: Python, TensorFlow and tf.transform imports, graph building, ~6 s here) and steady
(the marginal rate once running: (images - small) / (wall - wall of a run on `--small_per_class`
images per class), the rate a long job settles at). "per core" divides by the worker count.

    python benchmarks/preprocess_images.py --per_class 500
"""
from __future__ import annotations

import argparse
import glob
import io
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def bare_loop(files, out_path: str, max_side: int) -> int:
    import tensorflow as tf
    from PIL import Image
    opts = tf.io.TFRecordOptions(compression_type="GZIP")
    n = 0
    with tf.io.TFRecordWriter(out_path, opts) as w:
        for path in files:
            img = Image.open(path).convert("RGB")
            img.thumbnail((max_side, max_side))
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=90)
            feats = {
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[buf.getvalue()])),
                "label": tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[os.path.basename(os.path.dirname(path)).encode()])),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feats))
                    .SerializeToString())
            n += 1
    return n


def run_job(folder: str, out: str, workers: int, max_side: int) -> float:
    from benchmarks._jobs import time_job
    return time_job("beam_jobs.preprocess", ["--format", "images", "--input", folder,
                                             "--output", out, "--max_side", str(max_side)], workers)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per_class", type=int, default=500)
    ap.add_argument("--max_side", type=int, default=64)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--min_size", type=int, default=96)
    ap.add_argument("--max_size", type=int, default=256)
    ap.add_argument("--small_per_class", type=int, default=5,
                    help="Images per class of the start-up-only run the steady rate subtracts.")
    args = ap.parse_args(argv)
    from tools.shapes import generate
    tmp = tempfile.mkdtemp(prefix="bench_img_")
    folder = os.path.join(tmp, "shapes")
    generate(folder, args.per_class, seed=4, min_size=args.min_size, max_size=args.max_size)
    os.remove(os.path.join(folder, "labels.csv"))
    small = os.path.join(tmp, "small")
    generate(small, args.small_per_class, seed=5, min_size=args.min_size, max_size=args.max_size)
    os.remove(os.path.join(small, "labels.csv"))
    n_small = len(glob.glob(os.path.join(small, "*", "*.jpg")))
    files = sorted(glob.glob(os.path.join(folder, "*", "*.jpg")))
    t = time.time()
    n = bare_loop(files, os.path.join(tmp, "bare.tfrecord.gz"), args.max_side)
    bare = n / (time.time() - t)
    print(f"images: {n} ({args.min_size}-{args.max_size} px, resized to <= {args.max_side}); "
          f"cores: {os.cpu_count()}")
    print(f"{'variant':<30}{'seconds':>9}{'images/s':>10}{'ratio':>8}{'per core':>10}")
    print(f"{'bare loop (1 process)':<30}{n / bare:>9.1f}{bare:>10.0f}{1.0:>8.2f}{1.0:>10.2f}")
    for w in [int(x) for x in args.workers.split(",")]:
        s_small = run_job(small, os.path.join(tmp, f"small{w}"), w, args.max_side)
        s = run_job(folder, os.path.join(tmp, f"job{w}"), w, args.max_side)
        for label, seconds, count in ((f"job, {w} worker(s), end to end", s, n),
                                      (f"job, {w} worker(s), steady", s - s_small, n - n_small)):
            rate = count / seconds
            print(f"{label:<30}{seconds:>9.1f}{rate:>10.0f}{rate / bare:>8.2f}"
                  f"{rate / bare / w:>10.2f}", flush=True)
    print("(the job also validates, normalises EXIF/modes, splits and runs tf.transform)")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
