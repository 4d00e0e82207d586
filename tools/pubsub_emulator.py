"""The real Pub/Sub emulator (Debian package google-cloud-cli-pubsub-emulator, Java 17) on a
free loopback port, for the tests and `make demo-stream`. Clients reach it through
PUBSUB_EMULATOR_HOST; it keeps its data in a folder of its own, removed on stop.

    python -m tools.pubsub_emulator      # starts one, prints PUBSUB_EMULATOR_HOST=..., waits
"""
from __future__ import annotations

import glob
import os
import shutil
from typing import List, Optional

from tools.emulator_process import EmulatorError, EmulatorProcess

__all__ = ["EmulatorError", "PubSubEmulator", "available", "find_launcher", "INSTALL_HINT"]

INSTALL_HINT = ("the Pub/Sub emulator is not installed: apt-get install "
                "google-cloud-cli-pubsub-emulator (needs Java 17), or set PUBSUB_EMULATOR_BIN")
CANDIDATES = (
    "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator",
    "/usr/share/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator",
    os.path.expanduser("~/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator"),
)


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


class PubSubEmulator(EmulatorProcess):
    """One running emulator: `host` is what PUBSUB_EMULATOR_HOST takes (it answers "Ok"
    over HTTP once its gRPC server is up)."""

    name = "Pub/Sub"

    def __init__(self, timeout: float = 60.0):
        self.launcher = find_launcher()
        if self.launcher is None or shutil.which("java") is None:
            raise EmulatorError(INSTALL_HINT)
        super().__init__(timeout)

    def command(self, port: int, folder: str) -> List[str]:
        return [self.launcher, "--host=127.0.0.1", f"--port={port}", f"--dir={folder}"]


def main() -> None:
    try:
        emulator = PubSubEmulator()
    except EmulatorError as e:
        raise SystemExit(f"pubsub_emulator: error: {e}")
    emulator.serve("PUBSUB_EMULATOR_HOST")


if __name__ == "__main__":
    main()
