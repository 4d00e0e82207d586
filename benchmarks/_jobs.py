"""What the benchmark scripts share: timing a job's command line in a fresh process."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def time_job(module: str, args, workers: int = 1) -> float:
    """Wall seconds of `python -m <module> <args>` on the DirectRunner (multi-process when
    workers > 1), start-up included, as a user would run it."""
    return measure_job(module, args, workers)[0]


def measure_job(module: str, args, workers: int = 1) -> Tuple[float, float]:
    """(wall seconds, peak MB of the whole process tree's summed RSS) of a job run."""
    cmd = [sys.executable, "-m", module] + list(args)
    if workers > 1:
        cmd += ["--direct_num_workers", str(workers), "--direct_running_mode", "multi_processing"]
    t = time.time()
    # The job sees the project's own packages, not a benchmark's extra PYTHONPATH.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # stderr is kept (bounded) so that a failed run says why: a job's own lines are few.
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, env=env)
    peak = [0.0]

    def sample():
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss_mb(proc.pid))
            time.sleep(0.25)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rc = proc.wait()
    secs = time.time() - t
    sampler.join(timeout=1)
    if rc:
        err.seek(0, 2)
        err.seek(max(0, err.tell() - 4000))
        raise subprocess.CalledProcessError(rc, cmd, stderr=err.read().decode("utf-8", "replace"))
    err.close()
    return secs, peak[0]


def tree_rss_mb(pid: int) -> float:
    """Summed RSS (MB) of `pid` and its descendants, from /proc (0 where unavailable)."""
    children = {}
    try:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    children.setdefault(ppid, []).append(int(entry))
                except (OSError, ValueError, IndexError):
                    pass
    except OSError:
        return 0.0
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


# ---- training benchmarks (train_input.py, train_images.py) -------------------------------------
def training_setup(args, prepare, prefix: str):
    """(tmp dir, data dir, FeatureInfo, train files, TrainConfig) for a training benchmark:
    --data_dir, or data made by `prepare(tmp)`; the config at --batch_size."""
    import tempfile

    from training import data as data_lib
    from training.config import TrainConfig
    tmp = tempfile.mkdtemp(prefix=prefix)
    data_dir = args.data_dir or prepare(tmp)
    info = data_lib.load_feature_info(data_dir)
    files = data_lib.split_files(data_dir, "train")
    cfg = TrainConfig(data_dir=data_dir, job_dir=tmp, batch_size=args.batch_size, verbose=0)
    return tmp, data_dir, info, files, cfg


def fit_rate(model, ds, steps: int, repeats: int, batch_size: int, warmup: int) -> float:
    """Examples/s of model.fit on `ds`: the best of `repeats` timed runs of `steps` steps,
    after `warmup` untimed steps (tracing, XLA compilation, buffers)."""
    model.fit(ds, steps_per_epoch=warmup, epochs=1, verbose=0)
    best = 0.0
    for _ in range(max(repeats, 1)):
        t = time.perf_counter()
        model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0)
        best = max(best, steps * batch_size / (time.perf_counter() - t))
    return best


def iterate_rate(ds, steps: int, batch_size: int, warmup: int) -> float:
    """Examples/s of iterating `ds` alone (no training), after `warmup` batches."""
    it = iter(ds)
    for _ in range(warmup):
        next(it)
    t = time.perf_counter()
    for _ in range(steps):
        next(it)
    return steps * batch_size / (time.perf_counter() - t)
