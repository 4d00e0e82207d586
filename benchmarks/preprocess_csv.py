"""Rows/s of the preprocess job against a bare single-process loop, side by side, one run.

The bare loop is the floor anyone could write: csv.reader -> tf.train.Example of the raw
columns -> gzip TFRecordWriter, no validation, no split, no analyzers. The job does all of
that plus tf.transform analysis and transformation. Target: job >= 0.5x the bare loop.

    python benchmarks/preprocess_csv.py --rows 1000000
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def bare_loop(csv_path: str, out_path: str) -> int:
    import tensorflow as tf

    from preprocessing import TAXI_SPEC
    from preprocessing.schema import Schema

    schema = Schema.load(TAXI_SPEC)
    types = [c.type for c in schema.columns]
    n = 0
    opts = tf.io.TFRecordOptions(compression_type="GZIP")
    with open(csv_path, newline="") as f, tf.io.TFRecordWriter(out_path, opts) as w:
        reader = csv.reader(f)
        header = next(reader)
        for row in reader:
            if len(row) != len(header):
                continue
            feats = {}
            try:
                for name, t, v in zip(header, types, row):
                    if t == "float":
                        feats[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(v)]))
                    elif t == "int":
                        feats[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v or 1)]))
                    else:
                        feats[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
            except ValueError:
                continue
            w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
            n += 1
    return n


def run_job(csv_path: str, out_dir: str, workers: int) -> float:
    from benchmarks._jobs import time_job
    from preprocessing import TAXI_SPEC
    return time_job("beam_jobs.preprocess", ["--input", csv_path, "--output", out_dir,
                                             "--schema_spec", TAXI_SPEC], workers)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--workers", default="1,2", help="DirectRunner worker counts to time.")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    from tools.datagen import write_csv

    tmp = tempfile.mkdtemp(prefix="bench_prep_")
    csv_path = os.path.join(tmp, "taxi.csv")
    write_csv(csv_path, args.rows, seed=7)
    t = time.time()
    bare_rows = bare_loop(csv_path, os.path.join(tmp, "bare.tfrecord.gz"))
    bare_s = time.time() - t
    bare_rate = args.rows / bare_s
    print(f"rows: {args.rows} (cores: {os.cpu_count()})")
    print(f"{'variant':<34}{'seconds':>10}{'rows/s':>12}{'ratio':>8}")
    print(f"{'bare loop (1 process)':<34}{bare_s:>10.1f}{bare_rate:>12.0f}{1.0:>8.2f}")
    for w in [int(x) for x in args.workers.split(",")]:
        s = run_job(csv_path, os.path.join(tmp, f"job{w}"), w)
        rate = args.rows / s
        label = f"preprocess job, {w} worker(s)"
        print(f"{label:<34}{s:>10.1f}{rate:>12.0f}{rate / bare_rate:>8.2f}")
    print(f"(bare loop wrote {bare_rows} rows; job wall time includes start-up and analysis)")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
