"""The real Pub/Sub emulator (Debian package google-cloud-cli-pubsub-emulator, Java 17) on a
free loopback port, for the tests and `make demo-stream`. Clients reach it through
PUBSUB_EMULATOR_HOST; it keeps its data in a folder of its own, removed on stop.

    python -m tools.pubsub_emulator      # starts one, prints PUBSUB_EMULATOR_HOST=..., waits
"""
from __future__ import annotations

import glob
import os
import shutil
import time
from typing import List, Optional

from tools.emulator_process import EmulatorError, EmulatorProcess

__all__ = ["EmulatorError", "PubSubEmulator", "Topics", "available", "find_launcher",
           "INSTALL_HINT"]

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

    def __init__(self, timeout: float = 60.0, port: Optional[int] = None):
        self.launcher = find_launcher()
        if self.launcher is None or shutil.which("java") is None:
            raise EmulatorError(INSTALL_HINT)
        super().__init__(timeout, port)

    def command(self, port: int, folder: str) -> List[str]:
        return [self.launcher, "--host=127.0.0.1", f"--port={port}", f"--dir={folder}"]


class Topics:
    """Topics `<prefix>-<name>` (default: in, out, dead, mon) with a subscription each, on
    the emulator PUBSUB_EMULATOR_HOST names."""

    def __init__(self, project: str, prefix: str, names=("in", "out", "dead", "mon"),
                 ack_deadline_secs: int = 10):
        from google.cloud import pubsub_v1
        self.pub, self.sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        self.topics = {n: self.pub.topic_path(project, f"{prefix}-{n}") for n in names}
        self.subs = {n: self.sub.subscription_path(project, f"{prefix}-{n}-sub")
                     for n in self.topics}
        for n, t in self.topics.items():
            self.pub.create_topic(name=t)
            self.sub.create_subscription(name=self.subs[n], topic=t,
                                         ack_deadline_seconds=ack_deadline_secs)

    def publish(self, name: str, data: bytes, **attributes) -> None:
        self.pub.publish(self.topics[name], data, **attributes).result(timeout=30)

    def pull_once(self, name: str, max_messages: int = 500, timeout: float = 2.0) -> list:
        """What `name`'s subscription has now (acked): at most one pull."""
        try:
            resp = self.sub.pull(subscription=self.subs[name], max_messages=max_messages,
                                 timeout=timeout)
        except Exception as e:  # an empty pull may end in DeadlineExceeded
            if type(e).__name__ == "DeadlineExceeded":
                return []
            raise
        if resp.received_messages:
            self.sub.acknowledge(subscription=self.subs[name],
                                 ack_ids=[m.ack_id for m in resp.received_messages])
        return list(resp.received_messages)

    def pull(self, name: str, want: int, timeout: float, proc=None) -> list:
        """Messages of `name`'s subscription (acked), until `want` or `timeout` (or `proc`,
        the job publishing them, has exited)."""
        got, deadline = [], time.time() + timeout
        while len(got) < want and time.time() < deadline and (proc is None or proc.poll() is None):
            got.extend(self.pull_once(name, 100, 5))
        return got


def main() -> None:
    try:
        emulator = PubSubEmulator()
    except EmulatorError as e:
        raise SystemExit(f"pubsub_emulator: error: {e}")
    emulator.serve("PUBSUB_EMULATOR_HOST")


if __name__ == "__main__":
    main()
