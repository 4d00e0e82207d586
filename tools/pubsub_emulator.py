"""The real Pub/Sub emulator (Debian package google-cloud-cli-pubsub-emulator, Java 17) on a
free loopback port, for the tests and `make demo-stream`. Clients reach it through
PUBSUB_EMULATOR_HOST; it keeps its data in a folder of its own, removed on stop.

    python -m tools.pubsub_emulator      # starts one, prints PUBSUB_EMULATOR_HOST=..., waits
"""
from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from typing import Optional

INSTALL_HINT = ("the Pub/Sub emulator is not installed: apt-get install "
                "google-cloud-cli-pubsub-emulator (needs Java 17), or set PUBSUB_EMULATOR_BIN")
CANDIDATES = (
    "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator",
    "/usr/share/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator",
    os.path.expanduser("~/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator"),
)


class EmulatorError(RuntimeError):
    """The emulator is missing or did not start: one line saying which."""


def find_launcher() -> Optional[str]:
    """The `cloud-pubsub-emulator` launcher: $PUBSUB_EMULATOR_BIN, the Cloud SDK's usual
    places (the Debian package, a user install), or the PATH; None if there is none."""
    env = os.environ.get("PUBSUB_EMULATOR_BIN")
    found = [env] if env else []
    found += list(CANDIDATES)
    root = os.environ.get("CLOUDSDK_ROOT_DIR")
    if root:
        found += glob.glob(os.path.join(root, "platform", "pubsub-emulator", "bin",
                                        "cloud-pubsub-emulator"))
    on_path = shutil.which("cloud-pubsub-emulator")
    found += [on_path] if on_path else []
    return next((p for p in found if p and os.access(p, os.X_OK)), None)


def available() -> bool:
    return find_launcher() is not None and shutil.which("java") is not None


class PubSubEmulator:
    """One running emulator: `host` is what PUBSUB_EMULATOR_HOST takes. Use as a context
    manager, or call stop(); the whole process group (launcher and JVM) is stopped."""

    def __init__(self, timeout: float = 60.0):
        launcher = find_launcher()
        if launcher is None or shutil.which("java") is None:
            raise EmulatorError(INSTALL_HINT)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.host = f"127.0.0.1:{self.port}"
        self.dir = tempfile.mkdtemp(prefix="pubsub_emulator_")
        self.log = open(os.path.join(self.dir, "emulator.log"), "wb")
        self.proc = subprocess.Popen(
            [launcher, "--host=127.0.0.1", f"--port={self.port}", f"--dir={self.dir}"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise EmulatorError(f"the Pub/Sub emulator exited at start (status "
                                    f"{self.proc.returncode}): {self._log_tail()}")
            try:  # it answers "Ok" over HTTP once its gRPC server is up
                with urllib.request.urlopen(f"http://{self.host}/", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise EmulatorError(f"the Pub/Sub emulator did not start within {timeout:.0f} s: "
                            f"{self._log_tail()}")

    def _log_tail(self) -> str:
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

    def __enter__(self) -> "PubSubEmulator":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    try:
        emulator = PubSubEmulator()
    except EmulatorError as e:
        raise SystemExit(f"pubsub_emulator: error: {e}")
    print(f"PUBSUB_EMULATOR_HOST={emulator.host}  (Ctrl-C stops it)", flush=True)
    try:
        emulator.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
