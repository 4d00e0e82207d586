"""Predictions/s of the batch_predict job against a bare loop over the same model, one run.

The bare loop is the ceiling: the CSV is parsed up front into the same column batches the job
forms (numpy and Arrow columns, as the job's CSV blocks give them), then one process calls the
same `predict_raw` signature on each batch (the job's `inference.model.model_handler.predict`) and
nothing else. The job does everything else too (read CSV, validate, key, batch, write JSON
lines, dead letters), timed from launch to published output in a fresh process, as a user
runs it; with 2 workers it runs as two DirectRunner worker processes on the same cores the
bare loop's TensorFlow threads use. Each figure is the best of --repeat runs. Job figures:
  end-to-end  rows / wall seconds, start-up included (Python + TensorFlow imports, pipeline
              construction, model load: about 5 s here, paid once per run / per worker)
  steady      the marginal rate once running: (rows - small) / (wall - wall on `--small`
              rows), i.e. the throughput a long job settles at
Swept over batch sizes, and over --csv_block_mb (CSV read in blocks and parsed column-wise
with Arrow, or 0: record by record). Target: job >= 0.7x the bare loop.

    python benchmarks/batch_predict.py
    python benchmarks/batch_predict.py --model_dir out/job/export --batch_sizes 4096 --workers 2
"""
from __future__ import annotations

import argparse
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
    from tools.datagen import write_csv
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
    """Rows/s of the model calls alone, on the batches the job forms: the CSV parsed up front
    the job's way (2 MB blocks, preprocessing.parsing.fast_csv: numpy and Arrow columns), then
    `batch_size` rows per call of the job's `predict` (tensors made from those columns)."""
    from inference.inputs.rows import ServingParser
    from inference.model import model_handler as mh
    from inference.model import versions
    from preprocessing.files.csv_blocks import block_cut
    from preprocessing.parsing import fast_csv
    schema = versions.load_raw_schema(model_dir)
    with open(csv_path, "rb") as f:
        header = f.readline().decode("utf-8").strip().split(",")
        data = f.read()
    parser = ServingParser(schema).parser(tuple(header))
    batches, start = [], 0
    while start < len(data):
        cut = block_cut(data[start:start + (2 << 20)]) or len(data) - start
        block = fast_csv.parse_block(parser, data[start:start + cut])
        start += cut
        batches += [[c[i:i + batch_size] for c in block.columns]
                    for i in range(0, len(block), batch_size)]
    model = mh.SavedModelHandler(model_dir).load_model().current
    mh.predict(model, schema.names, batches[0])  # warm-up
    t = time.perf_counter()
    n = 0
    for b in batches:
        n += len(next(iter(mh.predict(model, schema.names, b).values())))
    return n, time.perf_counter() - t


def run_job(model_dir: str, csv_path: str, out: str, batch_size: int, workers: int,
            block_mb: str) -> float:
    from benchmarks._jobs import time_job
    # Worker processes share the cores: each gets its share of TensorFlow's threads.
    threads = max(1, (os.cpu_count() or 1) // workers) if workers > 1 else 0
    return time_job("beam_jobs.batch_predict", [
        "--model_dir", model_dir, "--input", csv_path, "--output", out,
        "--min_batch_size", str(batch_size), "--max_batch_size", str(batch_size),
        "--csv_block_mb", block_mb, "--model_threads", str(threads)], workers)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000,
                    help="Rows to score (the steady rate needs a run well past start-up).")
    ap.add_argument("--small", type=int, default=1000,
                    help="Rows of the start-up-only run the steady rate subtracts.")
    ap.add_argument("--model_dir", help="An export dir (default: train a small one first).")
    ap.add_argument("--batch_sizes", default="1024,4096")
    ap.add_argument("--workers", default="1,2", help="DirectRunner worker processes to try.")
    ap.add_argument("--csv_block_mb", default="2,0",
                    help="The job's --csv_block_mb values to try (0: record by record).")
    ap.add_argument("--repeat", type=int, default=2,
                    help="Runs of each measurement; the fastest counts (less noise).")
    args = ap.parse_args(argv)
    best = range(max(args.repeat, 1))
    from tools.datagen import write_csv

    tmp = tempfile.mkdtemp(prefix="bench_bp_")
    from inference.model.versions import resolve_model_dir
    model_dir = resolve_model_dir(args.model_dir or train_small_model(tmp))
    csv_path = os.path.join(tmp, "score.csv")
    small_path = os.path.join(tmp, "small.csv")
    write_csv(csv_path, args.rows, seed=9, dirty_fraction=0.0)
    write_csv(small_path, args.small, seed=9, dirty_fraction=0.0)
    workers = [int(w) for w in args.workers.split(",")]
    print(f"rows: {args.rows}; cores: {os.cpu_count()}")
    print(f"{'batch':>6}{'bare rows/s':>13}{'block MB':>9}{'workers':>8}{'job s':>8}"
          f"{'end-to-end':>12}{'ratio':>7}{'steady':>10}{'ratio':>7}")
    for bs in [int(b) for b in args.batch_sizes.split(",")]:
        bare = max(n / s for n, s in (bare_loop(model_dir, csv_path, bs) for _ in best))
        for mb in args.csv_block_mb.split(","):
            for w in workers:
                tag = f"{bs}_{mb}_{w}"
                small_s = min(run_job(model_dir, small_path, os.path.join(tmp, "small" + tag),
                                      bs, w, mb) for _ in best)
                job_s = min(run_job(model_dir, csv_path, os.path.join(tmp, "out" + tag), bs, w,
                                    mb) for _ in best)
                e2e = args.rows / job_s
                steady = (args.rows - args.small) / max(job_s - small_s, 1e-9)
                print(f"{bs:>6}{bare:>13.0f}{mb:>9}{w:>8}{job_s:>8.1f}{e2e:>12.0f}"
                      f"{e2e / bare:>7.2f}{steady:>10.0f}{steady / bare:>7.2f}", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
