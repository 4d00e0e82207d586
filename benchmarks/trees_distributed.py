"""YDF's distributed gradient boosted trees on local worker processes, reading the preprocess
job's train shards where they lie: what the trees could train on past one machine's memory
(docs/training.md, "Past one machine"). Not the trainer's path: the trainer's trees read
their rows into memory (a seeded sample past the memory bound, training/models/trees.py).

    python benchmarks/trees_distributed.py --data_dir out/prep --workers 2

The preprocess job writes GZIP TFRecords of tf.Example, which YDF reads as its `tfrecord`
format; the features are those the trainer's trees read, with the same kinds
(training/models/trees.py feature_semantics). Each worker is a `ydf.start_worker` process
on a localhost port; on a cluster they would be one per machine. Prints seconds and the
eval split's metric for the distributed learner and, beside it, for YDF's in-memory learner
on the same shards with the same settings; and for each, the largest difference between
YDF's predictions and those of its TensorFlow function (`to_tensorflow_function()`, what
the trainer's export serves) on the eval rows as the trainer reads them.
"""
from __future__ import annotations

import argparse
import glob
import multiprocessing
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _worker(port: int) -> None:
    import ydf
    ydf.start_worker(port)


def _shards(data_dir: str, split: str) -> str:
    files = sorted(glob.glob(os.path.join(data_dir, split, "*.tfrecord.gz")))
    if not files:
        raise SystemExit(f"no {split} shards under {data_dir}/{split}")
    return "tfrecord:" + ",".join(files)


def _eval_rows(data_dir: str, info) -> dict:
    """The eval split's feature columns as the trainer's trees read them."""
    from training.data import split_files
    from training.models.tree_rows import read_columns
    from training.models.trees import feature_semantics
    return read_columns(split_files(data_dir, "eval"), info, feature_semantics(info), None,
                        10**6)[0]


def _export_gap(model, rows: dict) -> float:
    """Largest |YDF's prediction - its TensorFlow function's| over `rows`."""
    import numpy as np
    import tensorflow as tf
    served = model.to_tensorflow_function()({k: tf.constant(v) for k, v in rows.items()})
    return float(np.max(np.abs(np.asarray(model.predict(rows)).reshape(-1) -
                               np.asarray(served).reshape(-1))))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data_dir", required=True, help="a preprocess job's --output")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--num_trees", type=int, default=100)
    ap.add_argument("--port", type=int, default=21000, help="the first worker's port")
    a = ap.parse_args(argv)
    import ydf

    from training.data import load_feature_info
    from training.models.trees import feature_semantics
    info = load_feature_info(a.data_dir)
    task = ydf.Task.REGRESSION if info.task == "regression" else ydf.Task.CLASSIFICATION
    features = [ydf.Feature(n, getattr(ydf.Semantic, s))
                for n, s in feature_semantics(info).items()]
    settings = dict(label=info.label, task=task, features=features, num_trees=a.num_trees,
                    max_depth=6, shrinkage=0.1)
    ports = [a.port + i for i in range(a.workers)]
    procs = [multiprocessing.Process(target=_worker, args=(p,), daemon=True) for p in ports]
    for p in procs:
        p.start()
    time.sleep(3)
    train, evaluate = _shards(a.data_dir, "train"), _shards(a.data_dir, "eval")
    rows = _eval_rows(a.data_dir, info)
    try:
        for name, learner in (
                ("distributed", ydf.DistributedGradientBoostedTreesLearner(
                    working_dir=tempfile.mkdtemp(prefix="ydf_dist_"), resume_training=False,
                    workers=[f"127.0.0.1:{p}" for p in ports], **settings)),
                ("in memory", ydf.GradientBoostedTreesLearner(
                    validation_ratio=0.0, early_stopping="NONE", **settings))):
            started = time.time()
            model = learner.train(train)
            secs = time.time() - started
            ev = model.evaluate(evaluate)
            metric = f"rmse {ev.rmse:.4g}" if task == ydf.Task.REGRESSION \
                else f"accuracy {ev.accuracy:.4f}"
            print(f"{name:<12} {a.workers if name == 'distributed' else 1} process(es) "
                  f"{model.num_trees()} trees {secs:.1f} s; eval {metric}; TF function "
                  f"vs predict on {len(next(iter(rows.values()))):,} rows: max |diff| "
                  f"{_export_gap(model, rows):.3g}", flush=True)
    finally:
        for p in procs:
            p.terminate()


if __name__ == "__main__":
    main()
