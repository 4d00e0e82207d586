"""Image training: images/s of the input pipeline and of training the same CNN on it,
side by side in one run, with and without XLA (--jit_compile).

  input alone          training.data's pipeline over the preprocess job's image shards (gzip
                       tf.Examples: parse, JPEG decode, batch), iterated without training
  in-memory tensors    the decoded images already in memory, pre-batched: the ceiling (no
                       I/O, no decoding), the model's own speed
  TFRecord (ours)      training on training.data's pipeline, uncached
  TFRecord, --cache    epoch 2 on: the decoded images are kept in memory
  ... --jit_compile    the same, the training step compiled with XLA

Generated shapes (tools/shapes.py) go through the preprocess job first, as a user's would.

    python benchmarks/train_images.py --per_class 500
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def prepare(per_class: int, tmp: str) -> str:
    from beam_jobs import preprocess
    from tools import shapes
    labels = shapes.generate(os.path.join(tmp, "shapes"), per_class=per_class, seed=3)
    out = os.path.join(tmp, "prep")
    preprocess.run(["--format", "images", "--input", labels, "--output", out,
                    "--split", "0.9,0.1"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per_class", type=int, default=500, help="Generated images per class.")
    ap.add_argument("--data_dir", help="An existing image preprocess output (skips generation).")
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=60, help="Timed steps per row.")
    ap.add_argument("--repeats", type=int, default=2, help="Timed runs per row (best kept).")
    args = ap.parse_args(argv)

    import numpy as np
    import tensorflow as tf

    from benchmarks._jobs import fit_rate, iterate_rate, training_setup
    from training import data as data_lib
    from training.models.keras_models import build_model, compile_model

    tmp, data_dir, info, files, cfg = training_setup(
        args, lambda tmp: prepare(args.per_class, tmp), "bench_train_img_")
    bs = args.batch_size

    # The decoded training images, once, for the in-memory ceiling.
    full = next(iter(data_lib.make_dataset_fn(files, info, 10 ** 6, training=False)()))
    images, labels = full[0][info.image].numpy(), full[1].numpy()
    n = len(labels)
    nb = n // bs

    def in_memory():
        order = np.random.default_rng(0).permutation(n)[: nb * bs]
        ds = tf.data.Dataset.from_tensor_slices((
            {info.image: images[order].reshape((nb, bs) + images.shape[1:])},
            labels[order].reshape((nb, bs) + labels.shape[1:]), np.ones((nb, bs), np.float32)))
        return ds.shuffle(nb).repeat().prefetch(tf.data.AUTOTUNE)

    def tfrecord(cache=False):
        ds = data_lib.make_dataset_fn(files, info, bs, training=True, shuffle_buffer=2_000,
                                      cache=cache)()
        if cache:
            it = iter(ds)
            for _ in range(nb + 2):  # one full epoch fills the cache
                next(it)
        return ds

    def rate(make_ds, jit):
        model = build_model(info, cfg)
        compile_model(model, info, cfg, jit_compile=jit)
        return fit_rate(model, make_ds(), args.steps, args.repeats, bs, warmup=10)

    alone = iterate_rate(tfrecord(), max(args.steps, 100), bs, warmup=5)
    rows = []
    for jit in (False, True):
        tag = ", --jit_compile" if jit else ""
        rows += [(f"in-memory tensors (ceiling){tag}", rate(in_memory, jit)),
                 (f"TFRecord (ours){tag}", rate(tfrecord, jit)),
                 (f"TFRecord, --cache{tag}", rate(lambda: tfrecord(True), jit))]
    ceiling = rows[0][1]
    print(f"train images: {n} ({images.shape[1]}x{images.shape[2]}); batch {bs}; "
          f"{args.steps} steps x best of {args.repeats}; cores: {os.cpu_count()}; "
          f"model: {cfg.backbone}")
    print(f"input pipeline alone (parse + JPEG decode + batch): {alone:,.0f} images/s")
    print(f"{'training input':<40}{'images/s':>10}{'vs ceiling':>12}")
    for name, r in rows:
        print(f"{name:<40}{r:>10.0f}{r / ceiling:>12.2f}")
    print(f"XLA: {rows[3][1] / rows[0][1]:.2f}x the default step on in-memory tensors")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
