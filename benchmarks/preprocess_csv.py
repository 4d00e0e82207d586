"""Rows/s of the preprocess job against its two peers, side by side, one run, same clean data.

- bare loop: the floor anyone could write: csv.reader -> tf.train.Example of the raw columns
  -> gzip TFRecordWriter, one process, no validation, no split, no analyzers;
- canonical tf.transform pattern (benchmarks/canonical_tft.py, as tf.transform's census
  example): ReadFromText -> BeamRecordCsvTFXIO -> AnalyzeAndTransformDataset -> Encode ->
  WriteToTFRecord, the same transforms, same runner and worker count as the job;
- the job: validation, split, dead letters, analysis on train, transform, finalize.

Each is timed end to end in a fresh process (start-up included), with the peak RSS of its
process tree. Targets (issue 18): job >= 1.0x bare and >= 2x canonical on 2 cores; the last
line compares each at its fastest worker count (the job's one process uses both cores: its
file writers encode and compress on threads of their own).

    python benchmarks/preprocess_csv.py --rows 1000000
    python benchmarks/preprocess_csv.py --rows 5000000 --workers 2

With --infer (the default) the job is also timed with no spec (--label_column fare_amount): the
whole-input profile at launch plus the inferred transforms (z-score + quantile buckets, imputed
means), against the same canonical figure.
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def bare_loop(csv_path: str, out_path: str) -> int:
    import tensorflow as tf

    from preprocessing import TAXI_SPEC
    from preprocessing.contract.schema import Schema

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


def run_job(csv_path: str, out_dir: str, workers: int, infer: bool = False):
    """The job with the taxi spec, or (infer) with the schema inferred from the whole input."""
    from benchmarks._jobs import measure_job
    from preprocessing import TAXI_SPEC
    schema = ["--label_column", "fare_amount", "--key_column", "key"] if infer else [
        "--schema_spec", TAXI_SPEC]
    return measure_job("beam_jobs.preprocess", ["--input", csv_path, "--output", out_dir]
                       + schema, workers)


def run_canonical(csv_path: str, out_dir: str, workers: int):
    from benchmarks._jobs import measure_job
    return measure_job("benchmarks.canonical_tft", ["--input", csv_path, "--output", out_dir],
                       workers)


def profile_seconds(csv_path: str) -> float:
    """Seconds of the inference step alone: the whole-input column profile the launch reads."""
    import time

    from preprocessing.schema_inference.profile import profile_csv
    t = time.perf_counter()
    profile_csv([(csv_path, lambda: open(csv_path, "rb"))])
    return time.perf_counter() - t


def bare_in_process(csv_path: str, out_path: str):
    """(seconds, peak MB) of the bare loop in a fresh process, like the others."""
    from benchmarks._jobs import measure_job
    return measure_job("benchmarks.preprocess_csv", ["--bare_only", csv_path, out_path])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--workers", default="1,2", help="DirectRunner worker counts to time.")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--infer", action=argparse.BooleanOptionalAction, default=True,
                    help="Also time the job with its schema inferred from the whole input "
                         "(--label_column, no spec): the cost of inference.")
    ap.add_argument("--bare_only", nargs=2, metavar=("CSV", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.bare_only:
        bare_loop(*args.bare_only)
        return
    from tools.datagen import write_csv

    tmp = tempfile.mkdtemp(prefix="bench_prep_")
    csv_path = os.path.join(tmp, "taxi.csv")
    write_csv(csv_path, args.rows, seed=7, dirty_fraction=0.0)  # the canonical pattern needs it
    print(f"rows: {args.rows} (cores: {os.cpu_count()})")
    print(f"{'variant':<38}{'seconds':>9}{'rows/s':>10}{'vs bare':>9}{'vs canon':>10}"
          f"{'peak MB':>9}")
    bare_s, bare_mb = bare_in_process(csv_path, os.path.join(tmp, "bare.tfrecord.gz"))
    bare_rate = args.rows / bare_s
    print(f"{'bare loop (1 process)':<38}{bare_s:>9.1f}{bare_rate:>10.0f}{1.0:>9.2f}"
          f"{'':>10}{bare_mb:>9.0f}", flush=True)
    best = {}  # variant -> (rows/s, workers): each at its fastest worker count
    for w in [int(x) for x in args.workers.split(",")]:
        c_s, c_mb = run_canonical(csv_path, os.path.join(tmp, f"canon{w}"), w)
        c_rate = args.rows / c_s
        best["canonical"] = max(best.get("canonical", (0, 0)), (c_rate, w))
        print(f"{f'canonical tf.transform, {w} worker(s)':<38}{c_s:>9.1f}{c_rate:>10.0f}"
              f"{c_rate / bare_rate:>9.2f}{1.0:>10.2f}{c_mb:>9.0f}", flush=True)
        try:
            s, mb = run_job(csv_path, os.path.join(tmp, f"job{w}"), w)
        except subprocess.CalledProcessError:  # e.g. the run's own reconciliation check
            print(f"{f'preprocess job, {w} worker(s)':<38} FAILED (run it alone to see why)",
                  flush=True)
            continue
        rate = args.rows / s
        best["job"] = max(best.get("job", (0, 0)), (rate, w))
        print(f"{f'preprocess job, {w} worker(s)':<38}{s:>9.1f}{rate:>10.0f}"
              f"{rate / bare_rate:>9.2f}{rate / c_rate:>10.2f}{mb:>9.0f}", flush=True)
        if args.infer:
            i_s, i_mb = run_job(csv_path, os.path.join(tmp, f"inferred{w}"), w, infer=True)
            i_rate = args.rows / i_s
            print(f"{f'  same, schema inferred, {w} worker(s)':<38}{i_s:>9.1f}{i_rate:>10.0f}"
                  f"{i_rate / bare_rate:>9.2f}{i_rate / c_rate:>10.2f}{i_mb:>9.0f}"
                  f"   (inference + its richer transforms: {i_s / s - 1:+.0%} time)", flush=True)
    if args.infer and "job" in best:
        p_s = profile_seconds(csv_path)
        job_s = args.rows / best["job"][0]
        print(f"schema inference alone (the whole-input profile at launch): {p_s:.1f} s = "
              f"{p_s / job_s:.0%} of the job's {job_s:.1f} s; the rest of the inferred run's "
              f"extra time is its richer transforms (quantile buckets: one more analyzer pass)")
    if len(best) == 2:
        (j_rate, j_w), (c_rate, c_w) = best["job"], best["canonical"]
        print(f"each at its fastest worker count on these {os.cpu_count()} cores: job "
              f"{j_rate:.0f} rows/s ({j_w} worker(s)) vs canonical {c_rate:.0f} ({c_w}): "
              f"{j_rate / c_rate:.2f}x; vs bare {j_rate / bare_rate:.2f}x")
    print("(wall time end to end in a fresh process each, start-up and analysis included; "
          "peak MB: the process tree's summed RSS)")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
