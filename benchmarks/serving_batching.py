"""Server-side request batching for TF Serving, measured on this machine: the values
training/exporting/serving_config.py writes to batching_parameters.txt.

1. Cost of the export's serving signature (tf.Examples in) per batch size: `--threads` threads
   (num_batch_threads, default the cores) call it back to back with batches of that size;
   latency p50/p99 per call and rows/s. `max_batch_size` is the largest size whose p99 stays
   within `--latency_budget_ms`: the most throughput a batch may buy within the budget.
2. The batch scheduler itself: the signature behind TensorFlow's BatchFunction op (the in-graph
   form of the shared batch scheduler TF Serving's batching uses), single-row requests sent
   back to back by client threads (rows from the export's golden set), under a light load
   (`--light` clients) and a heavy one (`--heavy`), per `max_batch_size` and timeout; "none"
   is the signature called directly. `batch_timeout_micros` is the one with the best
   heavy-load throughput at the chosen size among those whose light-load p50 stays within
   `--latency_slack_ms` of no batching (a lone caller must not wait out the timeout); of
   throughputs within 5% of the best (noise), the shortest timeout.
   Python client threads cost ~0.3 ms each per request (the GIL): they cannot offer the load a
   C++ gRPC front end does, so batches form less often here than in TF Serving.

    python benchmarks/serving_batching.py --model_dir demo_output/job/export
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _requests(export: str, limit: int = 2000) -> list:
    import tensorflow as tf

    from preprocessing.reference.golden import EXPORT_GOLDEN
    path = os.path.join(export, EXPORT_GOLDEN)
    if not tf.io.gfile.exists(path):
        sys.exit(f"{path} is missing: train after a preprocess that kept a golden set")
    rows = [r.numpy() for r in tf.data.TFRecordDataset(path).take(limit)]
    if not rows:
        sys.exit(f"{path} holds no rows")
    return rows


def _served(export: str, batching):
    """A callable taking one serialized tf.Example, and a counter of batches run."""
    import tensorflow as tf
    loaded = tf.saved_model.load(export)  # kept alive by `run`: it owns the variables
    signature = loaded.signatures["serving_default"]
    batches = tf.Variable(0, dtype=tf.int64)
    output = sorted(signature.structured_outputs)[0]

    def run(examples):
        batches.assign_add(1)
        assert loaded is not None
        return signature(examples=examples)[output]

    if batching is not None:
        max_batch, timeout, threads = batching
        run = tf.nondifferentiable_batch_function(
            threads, max_batch, timeout, max_enqueued_batches=10_000)(run)
    fn = tf.function(run, input_signature=[tf.TensorSpec([None], tf.string)])
    return (lambda row: fn(tf.constant([row]))), batches


def _closed_loop(request, clients: int, seconds: float) -> tuple:
    """Client threads each sending `request(client, k)` back to back for `seconds`:
    (latencies in ms, wall seconds)."""
    import numpy as np
    latencies, stop = [[] for _ in range(clients)], time.perf_counter() + seconds

    def client(i):
        k = 0
        while time.perf_counter() < stop:
            t = time.perf_counter()
            request(i, k)
            latencies[i].append(time.perf_counter() - t)
            k += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    return np.concatenate([np.asarray(x) for x in latencies]) * 1000, wall


def _load(call, rows: list, clients: int, seconds: float) -> dict:
    import numpy as np
    for i in range(min(clients, 4)):  # warm-up: trace, and the first batches
        call(rows[i])
    every, wall = _closed_loop(lambda i, k: call(rows[(i + k * clients) % len(rows)]),
                               clients, seconds)
    return {"requests": len(every), "rps": len(every) / wall,
            "p50": float(np.percentile(every, 50)), "p99": float(np.percentile(every, 99))}


def _cost(export: str, rows: list, sizes: list, threads: int, seconds: float) -> list:
    """(size, p50 ms, p99 ms, rows/s) of the signature called with batches of each size."""
    import numpy as np
    import tensorflow as tf
    loaded = tf.saved_model.load(export)
    signature = loaded.signatures["serving_default"]
    out = []
    for size in sizes:
        batch = tf.constant([rows[i % len(rows)] for i in range(size)])
        signature(examples=batch)
        every, wall = _closed_loop(lambda i, k: signature(examples=batch), threads, seconds)
        out.append((size, float(np.percentile(every, 50)), float(np.percentile(every, 99)),
                    len(every) * size / wall))
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model_dir", required=True, help="An export or a base of versions.")
    ap.add_argument("--cost_sizes", default="1,4,16,64,128,256,512,1024")
    ap.add_argument("--latency_budget_ms", type=float, default=5.0,
                    help="The p99 a batch's computation may take.")
    ap.add_argument("--batch_sizes", default="8,32,128")
    ap.add_argument("--timeouts_micros", default="0,1000,5000")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="num_batch_threads (default: the cores).")
    ap.add_argument("--light", type=int, default=1, help="Clients under light load.")
    ap.add_argument("--heavy", type=int, default=32, help="Clients under heavy load.")
    ap.add_argument("--seconds", type=float, default=4.0, help="Per setting and load.")
    ap.add_argument("--latency_slack_ms", type=float, default=2.0)
    args = ap.parse_args(argv)
    from inference.model.versions import resolve_model_dir
    export = resolve_model_dir(args.model_dir)
    rows = _requests(export)
    print(f"serving signature of {export}, num_batch_threads={args.threads}")
    print("1. cost per batch size")
    print(f"{'batch':>6} {'p50 ms':>7} {'p99 ms':>7} {'rows/s':>9}")
    cost = _cost(export, rows, [int(x) for x in args.cost_sizes.split(",")], args.threads,
                 args.seconds)
    for size, p50, p99, rate in cost:
        print(f"{size:6d} {p50:7.2f} {p99:7.2f} {rate:9.0f}", flush=True)
    within = [c for c in cost if c[2] <= args.latency_budget_ms] or cost[:1]
    max_batch, _, _, max_rate = within[-1]
    sizes = sorted({int(x) for x in args.batch_sizes.split(",")} | {max_batch})
    settings = [None] + [(b, t, args.threads) for b, t in itertools.product(
        sizes, [int(x) for x in args.timeouts_micros.split(",")])]
    print(f"2. single-row requests through the batch scheduler: {args.light} / {args.heavy} "
          f"clients, {args.seconds:g} s each")
    print(f"{'max_batch':>9} {'timeout_us':>10} | {'light p50':>9} {'p99':>7} {'req/s':>7} | "
          f"{'heavy p50':>9} {'p99':>7} {'req/s':>7} {'batch':>6}")
    results = []
    for setting in settings:
        call, batches = _served(export, setting)
        light = _load(call, rows, args.light, args.seconds)
        before = int(batches.numpy())
        heavy = _load(call, rows, args.heavy, args.seconds)
        mean_batch = heavy["requests"] / max(1, int(batches.numpy()) - before)
        results.append((setting, light, heavy, mean_batch))
        b, t = ("none", "-") if setting is None else setting[:2]
        print(f"{b:>9} {t:>10} | {light['p50']:9.2f} {light['p99']:7.2f} {light['rps']:7.0f} | "
              f"{heavy['p50']:9.2f} {heavy['p99']:7.2f} {heavy['rps']:7.0f} {mean_batch:6.1f}",
              flush=True)
    base_p50 = results[0][1]["p50"]
    at_size = [r for r in results[1:] if r[0][0] == max_batch]
    fits = [r for r in at_size if r[1]["p50"] <= base_p50 + args.latency_slack_ms]
    top = max(r[2]["rps"] for r in fits or at_size)
    # Throughputs within 5% are one figure here (run-to-run noise): the shortest timeout wins.
    best = min((r for r in fits or at_size if r[2]["rps"] >= 0.95 * top),
               key=lambda r: r[0][1])
    timeout = best[0][1]
    queue = max(1, round(max_rate / max_batch))  # about one second of work at full batches
    chosen = {"max_batch_size": max_batch, "batch_timeout_micros": timeout,
              "num_batch_threads": args.threads, "max_enqueued_batches": queue}
    print("chosen: " + ", ".join(f"{k} {v}" for k, v in chosen.items())
          + f" (p99 of a full batch within {args.latency_budget_ms:g} ms: {max_rate:.0f} rows/s; "
          f"lone-caller p50 {best[1]['p50']:.2f} ms vs {base_p50:.2f} ms unbatched)")
    return {"chosen": chosen, "cost": cost}


if __name__ == "__main__":
    main()
