"""What the benchmark scripts share: timing a job's command line in a fresh process."""
from __future__ import annotations

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def time_job(module: str, args, workers: int = 1) -> float:
    """Wall seconds of `python -m <module> <args>` on the DirectRunner (multi-process when
    workers > 1), start-up included, as a user would run it."""
    cmd = [sys.executable, "-m", module] + list(args)
    if workers > 1:
        cmd += ["--direct_num_workers", str(workers), "--direct_running_mode", "multi_processing"]
    t = time.time()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.time() - t
