"""A real local Cloud Storage (gcp-storage-emulator, requirements-dev.txt) on loopback, for the
tests and the offline Dataflow check. Beam's GCS IO talks to it through STORAGE_EMULATOR_HOST
with anonymous credentials."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Optional, Tuple


def storage_root(data_dir: str) -> str:
    """Where an emulator started with `data_dir` keeps gs://BUCKET/PATH: ROOT/BUCKET/PATH
    (the BigQuery emulator's load jobs read their gs:// files from there)."""
    from gcp_storage_emulator.settings import STORAGE_DIR
    return os.path.join(data_dir, STORAGE_DIR)


def start(default_bucket: Optional[str] = None, timeout: float = 30.0,
          data_dir: Optional[str] = None) -> Tuple[subprocess.Popen, str]:
    """Starts the emulator on a free port (in memory, or on disk under `data_dir`); returns
    (process, endpoint URL) once it accepts connections. Raises RuntimeError if it does not
    start within `timeout` seconds."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = os.path.join(os.path.dirname(sys.executable), "gcp-storage-emulator")
    cmd = [exe] + (["--data-dir", data_dir] if data_dir else []) + [
        "start", "--host", "127.0.0.1", "--port", str(port)] + ([] if data_dir else ["--in-memory"])
    if default_bucket:
        cmd += ["--default-bucket", default_bucket]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the GCS emulator did not start")
