"""One local emulator process on a free loopback port, shared by the Pub/Sub and BigQuery
emulators: a folder of its own (removed on stop), a log, a bounded wait until it answers
HTTP, one-line errors, and a stop that ends its whole process group."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from typing import Dict, List, Optional


class EmulatorError(RuntimeError):
    """The emulator is missing or did not start: one line saying which."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmulatorProcess:
    """Subclasses give `name`, `ready_path` and `command(port, folder)`; `host` is
    127.0.0.1:PORT. A context manager, or call stop()."""

    name = "emulator"
    ready_path = "/"  # any HTTP answer from it (even 404) means the server is up

    def command(self, port: int, folder: str) -> List[str]:
        raise NotImplementedError

    def environment(self, folder: str) -> Optional[Dict[str, str]]:
        return None

    def __init__(self, timeout: float = 60.0, port: Optional[int] = None):
        self.port = port or free_port()  # a port: the same address again after a restart
        self.host = f"127.0.0.1:{self.port}"
        self.dir = tempfile.mkdtemp(prefix=self.name.replace(" ", "_").replace("/", "") + "_")
        self.log = open(os.path.join(self.dir, "emulator.log"), "wb")
        try:
            self.proc = subprocess.Popen(
                self.command(self.port, self.dir), env=self.environment(self.dir),
                stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        except BaseException:
            self.log.close()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise EmulatorError(f"the {self.name} emulator exited at start (status "
                                    f"{self.proc.returncode}): {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://{self.host}{self.ready_path}", timeout=2):
                    return
            except urllib.error.HTTPError:
                return
            except OSError:
                time.sleep(0.2)
        raise EmulatorError(f"the {self.name} emulator did not start within {timeout:.0f} s: "
                            f"{self.log_tail()}")

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.dir, "emulator.log"), "rb") as f:
                lines = f.read().decode("utf-8", "replace").strip().splitlines()
            return lines[-1][:300] if lines else "(no output)"
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def serve(self, variable: str) -> None:
        """`python -m tools.X`: prints VARIABLE=host and waits until Ctrl-C."""
        print(f"{variable}={self.host}  (Ctrl-C stops it)", flush=True)
        try:
            self.proc.wait()
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()
