"""Training examples/s by input approach, same model, measured side by side in one run.

  in-memory tensors   the transformed data already in memory (the ceiling: no I/O, no parsing)
  TFRecord (ours)     training.data's pipeline over the preprocess job's gzip shards
  pandas generator    a DataFrame fed batch by batch from Python (tf.data.from_generator)
  CSV via tf.data     the same features as CSV text, TextLineDataset -> batch -> decode_csv
  --jit_compile       the in-memory ceiling again, the training step compiled with XLA

Targets: TFRecord >= 0.9x the in-memory ceiling, and faster than pandas and CSV.

    python benchmarks/train_input.py --rows 200000
    python benchmarks/train_input.py --data_dir out/prep      # an existing preprocess output
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def prepare(rows: int, tmp: str) -> str:
    from beam_jobs import preprocess
    from preprocessing import TAXI_SPEC
    from tools.datagen import write_csv
    csv_path = os.path.join(tmp, "taxi.csv")
    write_csv(csv_path, rows, seed=3, dirty_fraction=0.0)
    out = os.path.join(tmp, "prep")
    preprocess.run(["--input", csv_path, "--output", out, "--schema_spec", TAXI_SPEC,
                    "--num_shards", "8", "--split", "0.9,0.1"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--data_dir", help="Existing preprocess output (skips generation).")
    ap.add_argument("--batch_size", type=int, default=512)
    ap.add_argument("--steps", type=int, default=300, help="Timed steps per approach.")
    ap.add_argument("--repeats", type=int, default=2, help="Timed runs per approach (best kept).")
    args = ap.parse_args(argv)

    import numpy as np
    import pandas as pd
    import tensorflow as tf

    from benchmarks._jobs import fit_rate, iterate_rate, training_setup
    from training import data as data_lib
    from training.models.keras_models import build_model, compile_model

    tmp, data_dir, info, files, cfg = training_setup(
        args, lambda tmp: prepare(args.rows, tmp), "bench_train_")
    names = info.input_names
    bs = args.batch_size

    # Materialise the transformed training data once, for the in-memory, pandas and CSV inputs.
    full = next(iter(data_lib.make_dataset_fn(files, info, 10 ** 7, training=False)()))
    features = {k: v.numpy() for k, v in full[0].items()}
    label = full[1].numpy()[:, 0]
    n = len(label)
    df = pd.DataFrame(features)
    df["__label"] = label
    csv_path = os.path.join(tmp, "transformed.csv")
    df.to_csv(csv_path, index=False, header=False, float_format="%.6g")

    nb = n // bs

    def in_memory():
        # Pre-batched tensors, shuffled once in memory: each element is a whole batch, so the
        # pipeline does no per-example work at all (the compute-only ceiling).
        order = np.random.default_rng(0).permutation(n)[: nb * bs]
        feats = {k: features[k][order].reshape(nb, bs) for k in names}
        ds = tf.data.Dataset.from_tensor_slices(
            (feats, label[order].reshape(nb, bs, 1), np.ones((nb, bs), np.float32)))
        return ds.shuffle(nb).repeat().prefetch(tf.data.AUTOTUNE)

    def tfrecord():
        return data_lib.make_dataset_fn(files, info, bs, training=True, shuffle_buffer=10_000)()

    def tfrecord_cached():
        ds = data_lib.make_dataset_fn(files, info, bs, training=True, shuffle_buffer=10_000,
                                      cache=True)()
        it = iter(ds)
        for _ in range(n // bs + 2):  # one full epoch fills the cache (--cache)
            next(it)
        return ds

    def pandas_gen():
        def gen():
            while True:
                order = np.random.permutation(n)
                for i in range(0, n - bs + 1, bs):
                    part = df.iloc[order[i:i + bs]]
                    yield ({k: part[k].to_numpy() for k in names},
                           part["__label"].to_numpy()[:, None], np.ones(bs, np.float32))
        sig = ({k: tf.TensorSpec([None], tf.as_dtype(features[k].dtype)) for k in names},
               tf.TensorSpec([None, 1], tf.float32), tf.TensorSpec([None], tf.float32))
        return tf.data.Dataset.from_generator(gen, output_signature=sig).prefetch(tf.data.AUTOTUNE)

    def csv_tfdata():
        cols = list(df.columns)
        defaults = [tf.constant([], tf.as_dtype(df[c].dtype)) for c in cols]

        def parse(lines):
            values = tf.io.decode_csv(lines, record_defaults=defaults)
            d = dict(zip(cols, values))
            y = d.pop("__label")
            return ({k: d[k] for k in names}, y[:, None], tf.ones_like(y))
        return (tf.data.TextLineDataset(csv_path).shuffle(10_000).repeat()
                .batch(bs, drop_remainder=True)
                .map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))

    model = build_model(info, cfg)
    compile_model(model, info, cfg)

    xla_model = build_model(info, cfg)
    compile_model(xla_model, info, cfg, jit_compile=True)

    def rate(make_ds, model=model):
        return fit_rate(model, make_ds(), args.steps, args.repeats, bs, warmup=30)

    def input_only(make_ds, steps=300):
        return iterate_rate(make_ds(), steps, bs, warmup=20)

    inputs = [in_memory, tfrecord, tfrecord_cached, pandas_gen, csv_tfdata]
    alone = [input_only(f) for f in inputs]
    results = [("in-memory tensors (ceiling)", rate(in_memory)),
               ("TFRecord gzip shards (ours)", rate(tfrecord)),
               ("TFRecord, --cache (epoch 2+)", rate(tfrecord_cached)),
               ("pandas generator", rate(pandas_gen)),
               ("CSV via tf.data", rate(csv_tfdata)),
               ("in-memory tensors, --jit_compile", rate(in_memory, xla_model))]
    alone.append(alone[0])
    ceiling = results[0][1]
    print(f"train rows: {n}; batch {bs}; {args.steps} steps x best of {args.repeats}; "
          f"cores: {os.cpu_count()}; model: {cfg.model} {cfg.hidden_units}")
    print(f"{'input':<32}{'train ex/s':>12}{'vs ceiling':>12}{'input alone ex/s':>18}")
    for (name, r), a in zip(results, alone):
        print(f"{name:<32}{r:>12.0f}{r / ceiling:>12.2f}{a:>18.0f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
