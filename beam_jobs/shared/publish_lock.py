"""The publish lock: two runs into one output publish one at a time under
`OUTPUT/_PUBLISH_LOCK`, created exclusively (O_EXCL locally, a generation-0 precondition on
Cloud Storage). Its holder renews it every few seconds, replacing its record whole; a lock
whose process is gone (same host) or that has not been renewed for LEASE_SECS is taken over;
an empty, unreadable or half-written one (a kill between its create and its write, a full
disk) once it is older than UNREADABLE_LOCK_SECS. A run waiting on a live holder says so
(whose lock, for how long) and gives up after MAX_WAIT_SECS with one line (LockWaitTimeout).
No Beam pipeline in it: publish.py's protocol and the Finalize step use it."""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import Optional

from apache_beam.io.filesystems import FileSystems

from preprocessing.accounting import counting
from preprocessing.files import filesys

LOCK = "_PUBLISH_LOCK"
LEASE_SECS = 30.0  # a lock not renewed for this long is a dead holder's
UNREADABLE_LOCK_SECS = 10.0  # a lock file no one can read, this old: its writer is gone
MAX_WAIT_SECS = 1800.0  # how long a run waits for another to finish publishing
WAIT_NOTICE_SECS = 60.0  # how often a waiting run says it is still waiting


def _create_exclusive(path: str, text: str) -> bool:
    """Creates `path` holding `text` only if it does not exist; False if it does."""
    if path.startswith("gs://"):
        from apache_beam.io.gcp.gcsio import GcsIO
        from google.api_core.exceptions import PreconditionFailed
        bucket, name = path[len("gs://"):].split("/", 1)
        try:
            GcsIO().client.bucket(bucket).blob(name).upload_from_string(
                text, if_generation_match=0)
            return True
        except PreconditionFailed:
            return False
    if filesys.is_remote_path(path):  # other stores: no atomic create in Beam's API
        if FileSystems.exists(path):
            return False
        filesys.write_text(path, text)
        return True
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return True


def _rewrite(path: str, text: str) -> None:
    """Replaces the lock's record whole: a reader sees the old one or the new one, never a
    truncated file (Cloud Storage replaces an object so; a local file is written beside it
    and renamed over it)."""
    if filesys.is_remote_path(path):
        filesys.write_text(path, text)
        return
    scratch = f"{path}.renewal-{os.getpid()}"
    with open(scratch, "w") as f:
        f.write(text)
    os.replace(scratch, path)


class LockWaitTimeout(RuntimeError):
    """Another run held the publish lock for longer than this run would wait."""


def _read_lock(path: str) -> Optional[dict]:
    try:
        held = json.loads(filesys.read_text(path))
    except Exception:  # released meanwhile, or empty / half written: look again
        return None
    return held if isinstance(held, dict) else None


def _age_secs(path: str) -> Optional[float]:
    """Seconds since `path` was last written; None when it is gone."""
    try:
        found = FileSystems.match([path])[0].metadata_list
    except Exception:
        return None
    return time.time() - found[0].last_updated_in_seconds if found else None


def _holder_gone(held: dict, lease_secs: float) -> bool:
    """Whether the process that holds a lock is gone: on this host, its pid is not running;
    anywhere, it has not renewed the lock for `lease_secs`."""
    if held.get("host") == socket.gethostname() and held.get("pid"):
        try:
            os.kill(int(held["pid"]), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, OSError, ValueError):
            pass
    renewed = float(held.get("renewed", held.get("since", 0)))
    return time.time() - renewed > lease_secs


class PublishLock:
    """`with PublishLock(output, owner, job):` holds OUTPUT/_PUBLISH_LOCK (see the module
    docstring): waits while another live run publishes, takes over the lock of one that is
    gone, renews its own every lease_secs / 4 while held, and is re-entrant for the same
    owner (a retried step)."""

    def __init__(self, output: str, owner: str, job: str, lease_secs: float = LEASE_SECS,
                 poll_secs: float = 1.0, max_wait_secs: float = MAX_WAIT_SECS,
                 unreadable_secs: float = UNREADABLE_LOCK_SECS):
        self.path = FileSystems.join(output, LOCK)
        self.owner, self.job, self.lease, self.poll = owner, job, lease_secs, poll_secs
        self.max_wait, self.unreadable = max_wait_secs, unreadable_secs
        self._stop = self._renewer = None

    def _record(self) -> str:
        now = time.time()
        return json.dumps({"owner": self.owner, "since": now, "renewed": now,
                           "host": socket.gethostname(), "pid": os.getpid()})

    def __enter__(self):
        started, told = time.monotonic(), None
        while not _create_exclusive(self.path, self._record()):
            held = _read_lock(self.path)
            if held is None:
                age = _age_secs(self.path)
                if age is not None and age > self.unreadable:
                    self._take_over(f"an unreadable lock file {age:.0f} s old: its writer "
                                    "is gone")
                    continue
                held = {"owner": "unknown (its lock file is empty or half written)"}
            elif held.get("owner") == self.owner:
                break
            elif _holder_gone(held, self.lease):
                self._take_over(f"run {held.get('owner')}'s process is gone")
                continue
            waited = time.monotonic() - started
            holder = (f"run {held.get('owner')}" + (f" (host {held['host']}, pid {held['pid']})"
                                                     if held.get("host") else ""))
            if waited > self.max_wait:
                raise LockWaitTimeout(
                    f"{self.job}: {holder} has held the publish lock {self.path} for over "
                    f"{self.max_wait:.0f} s: nothing was published; if that run is gone, "
                    f"remove the lock file and run again")
            if told is None or waited - told >= WAIT_NOTICE_SECS:
                counting.emit(f"{self.job}: waiting for {holder} to finish publishing into "
                              f"the same output ({waited:.0f} s so far; giving up after "
                              f"{self.max_wait:.0f} s)")
                told = waited
            time.sleep(self.poll)
        self._renew_in_background()
        return self

    def _take_over(self, why: str) -> None:
        logging.warning("%s: taking over the publish lock %s (%s)", self.job, self.path, why)
        try:
            FileSystems.delete([self.path])
        except Exception:  # another waiter took it over first
            pass

    def _renew_in_background(self):
        self._stop = threading.Event()

        def renew():
            while not self._stop.wait(self.lease / 4):
                held = _read_lock(self.path)
                if held is None or held.get("owner") != self.owner:
                    return
                _rewrite(self.path, json.dumps(dict(held, renewed=time.time())))
        self._renewer = threading.Thread(target=renew, daemon=True, name="publish-lock")
        self._renewer.start()

    def __exit__(self, *exc):
        if self._stop is not None:
            self._stop.set()
            # A renewal under way would write the lock again after its release.
            self._renewer.join(timeout=self.lease)
        held = _read_lock(self.path)
        if held is not None and held.get("owner") == self.owner:
            FileSystems.delete([self.path])
        return False
