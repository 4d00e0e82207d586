"""Predictions/s of the batch_predict job against a bare loop over the same model, one run.

The bare loop is the ceiling: the rows are parsed up front, then one process builds each
batch's tensors and calls the same `predict_raw` signature the job's model handler calls.
The job does everything else too (read CSV, validate, key, batch, write JSON, dead letters),
timed from launch to published output. Swept over batch sizes. Target: job >= 0.7x.

    python benchmarks/batch_predict.py --rows 200000
    python benchmarks/batch_predict.py --model_dir out/job/export --rows 200000
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


def train_small_model(tmp: str) -> str:
    from beam_jobs import preprocess
    from preprocessing import TAXI_SPEC
    from preprocessing.datagen import write_csv
    from training import train_and_evaluate
    from training.config import TrainConfig
    src = os.path.join(tmp, "train.csv")
    write_csv(src, 20_000, seed=1)
    prep = os.path.join(tmp, "prep")
    preprocess.run(["--input", src, "--output", prep, "--schema_spec", TAXI_SPEC])
    m = train_and_evaluate(TrainConfig(data_dir=prep, job_dir=os.path.join(tmp, "job"),
                                       epochs=1, verbose=0))
    return m["export_dir"]


def bare_loop(model_dir: str, csv_path: str, batch_size: int) -> tuple:
    from inference import model_handler as mh
    from preprocessing import parsing
    schema = mh.load_raw_schema(model_dir)
    with open(csv_path, newline="") as f:
        reader = csv.reader(f)
        parser = parsing.RowParser(schema, next(reader), (schema.label, schema.key))
        rows = []
        for fields in reader:
            try:
                rows.append(parser.parse(fields))
            except parsing.RowError:
                pass
    model = mh.SavedModelHandler(model_dir).load_model().current
    batches = [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]
    mh.predict(model, schema.names, batches[0])  # warm-up
    t = time.perf_counter()
    n = 0
    for b in batches:
        n += len(mh.predict(model, schema.names, b))
    return n, time.perf_counter() - t


def run_job(model_dir: str, csv_path: str, out: str, batch_size: int, workers: int) -> float:
    from benchmarks._jobs import time_job
    return time_job("beam_jobs.batch_predict", [
        "--model_dir", model_dir, "--input", csv_path, "--output", out,
        "--min_batch_size", str(batch_size), "--max_batch_size", str(batch_size)], workers)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--model_dir", help="An export dir (default: train a small one first).")
    ap.add_argument("--batch_sizes", default="64,256,1024")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    from preprocessing.datagen import write_csv

    tmp = tempfile.mkdtemp(prefix="bench_bp_")
    model_dir = args.model_dir or train_small_model(tmp)
    csv_path = os.path.join(tmp, "score.csv")
    write_csv(csv_path, args.rows, seed=9, dirty_fraction=0.0)
    print(f"rows: {args.rows}; cores: {os.cpu_count()}; job workers: {args.workers}")
    print(f"{'batch':>6}{'bare rows/s':>14}{'job s':>9}{'job rows/s':>13}{'ratio':>8}")
    for bs in [int(b) for b in args.batch_sizes.split(",")]:
        n, bare_s = bare_loop(model_dir, csv_path, bs)
        job_s = run_job(model_dir, csv_path, os.path.join(tmp, f"out{bs}"), bs, args.workers)
        bare, job = n / bare_s, args.rows / job_s
        print(f"{bs:>6}{bare:>14.0f}{job_s:>9.1f}{job:>13.0f}{job / bare:>8.2f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
