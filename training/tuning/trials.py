"""One tuning trial: the unchanged `training.task` in a process of its own (never a thread: a
trainer holds the GIL), with its flags, its own job folder and its metric file in the
cloudml-hypertune convention, stopped when the tuner dies (kill -9 included)."""
from __future__ import annotations

import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import time
from typing import List, Optional, Tuple

METRIC_FILE = "hypertune.metrics"
LOG_FILE = "trial.log"
_PR_SET_PDEATHSIG = 1


def _die_with_parent():  # runs in the child before exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
    os.setpgid(0, 0)  # its own process group: a stop reaches what it started


def trial_dir(tuning_dir: str, number: int) -> str:
    return os.path.join(tuning_dir, "trials", f"{number:04d}")


class TrialProcess:
    """A running trial. `measurements()` reads what it reported so far; `outcome()` after it
    exits: (metric, None) or (None, the one-line reason it failed)."""

    def __init__(self, number: int, directory: str, data_dir: str, metric: str,
                 args: List[str], timeout: Optional[float] = None):
        self.number, self.dir, self.metric = number, directory, metric
        os.makedirs(directory, exist_ok=True)
        self.metric_file = os.path.join(directory, METRIC_FILE)
        self.log_path = os.path.join(directory, LOG_FILE)
        self.started = time.time()
        self.deadline = self.started + timeout if timeout else None
        self.timed_out = False
        env = dict(os.environ, CLOUD_ML_HP_METRIC_FILE=self.metric_file)
        env.pop("CLOUD_ML_TRIAL_ID", None)  # the tuner gives each trial its job folder
        cmd = [sys.executable, "-m", "training.task", "--data_dir", data_dir,
               "--job_dir", directory, "--hypertune_metric", metric, "--verbose", "0", *args]
        with open(self.log_path, "ab") as log:
            log.write(("$ " + " ".join(cmd) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    def poll(self) -> Optional[int]:
        if self.proc.poll() is None and self.deadline and time.time() > self.deadline:
            self.timed_out = True
            self.stop()
        return self.proc.poll()

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def measurements(self) -> List[Tuple[int, float]]:
        """(step, value) of each finite report of the metric, in the order written."""
        out = []
        try:
            with open(self.metric_file) as f:
                lines = f.read(1 << 20).splitlines()
        except OSError:
            return out
        for line in lines:
            try:
                rec = json.loads(line)
                value = float(rec[self.metric])
                step = int(rec.get("global_step") or 0)
            except (ValueError, KeyError, TypeError):
                continue  # a line being written, or another tag
            if math.isfinite(value):
                out.append((step, value))
        return out

    def outcome(self) -> Tuple[Optional[float], Optional[str]]:
        code = self.proc.returncode
        if self.timed_out:
            return None, f"timed out after {self.deadline - self.started:.0f} s"
        if code == 0:
            found = self.measurements()
            if not found:
                return None, f"exited 0 but reported no finite {self.metric} ({self.metric_file})"
            return found[-1][1], None
        if code < 0:
            return None, f"killed by signal {-code}"
        return None, f"exit {code}: {last_error(self.log_path)}"


def last_error(log_path: str) -> str:
    """The line of a trainer's log that says why it failed."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.path.getsize(log_path) - 65536))
            lines = [x.strip() for x in f.read().decode("utf-8", "replace").splitlines()
                     if x.strip()]
    except OSError:
        return "no log"
    for marks in ((": error: ",), ("Error", "error")):
        for line in reversed(lines):
            if any(m in line for m in marks):
                return line[:300]
    return (lines[-1] if lines else "no output")[:300]
