"""What the benchmark scripts share: timing a job's command line in a fresh process."""
from __future__ import annotations

import os
import subprocess
import sys
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
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
        raise subprocess.CalledProcessError(rc, cmd)
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
