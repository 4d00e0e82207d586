"""Publishing a run's staged outputs over the previous ones: the filesystem protocol, with no
Beam in it (the Finalize step calls it; tests call it directly).

A run writes only under its own `OUTPUT/_staging-<started>-<run>/`. `publish()` moves what
was staged to the same place under OUTPUT, replacing what an earlier run wrote under the
job's managed names: `_SUCCESS` is removed first (and written last), so a reader that waits
for it never sees a mix. Files are moved following a manifest written first in the staging
folder (what to move, and whether the run ends in `_SUCCESS`), so a publish that a kill
interrupts is completed by the next run that takes the lock (`recover`), and a retried step
resumes. Two runs into one output publish one at a time under `OUTPUT/_PUBLISH_LOCK`
(created exclusively: O_EXCL locally, a generation-0 precondition on Cloud Storage). Its
holder renews it every few seconds; a lock whose process is gone (same host) or that has not
been renewed for LEASE_SECS is taken over; an empty, unreadable or half-written one (a kill
between its create and its write, a full disk) once it is older than UNREADABLE_LOCK_SECS. A
run waiting on a live holder says so (whose lock, for how long) and gives up after
MAX_WAIT_SECS with one line (LockWaitTimeout). Staging folders older than --stale_staging_hours
are a killed run's and are removed; younger ones may be a live run's, unless (local folders)
the process their OWNER names is gone (`abandoned`).
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import time
import uuid
from typing import Iterable, List, Optional, Sequence

from apache_beam.io.filesystems import FileSystems

from beam_jobs.shared.publish_lock import LOCK, LockWaitTimeout, PublishLock  # noqa: F401
from preprocessing.accounting import counting
from preprocessing.files import filesys

STAGING_PREFIX = "_staging-"
STAGING_RE = re.compile(re.escape(STAGING_PREFIX) + r"(\d+)-")
MANIFEST = "_MANIFEST"
OWNER = "_OWNER"  # a local staging folder's run: host, pid and that process's start time
CLAIM_SUFFIX = ".claim"  # a local staging folder while its OWNER is written (new_staging)
CLAIM_SECS = 60.0  # a claim takes milliseconds: one this old was killed mid-claim
STALE_STAGING_HOURS = 24.0  # a staging folder this old is an abandoned run's (--stale_staging_hours)
SUCCESS = "_SUCCESS"
FAILED_RUN = "_FAILED_RUN"  # what explains the last failed run (summary, dead letters)
SUMMARY = "summary.json"


def _list(pattern: str) -> List[str]:
    try:
        return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
    except Exception:  # nothing there yet (a first run)
        return []


def _files_under(path: str) -> List[str]:
    """The files at or below `path`: a file, a folder (a prefix on object stores), or a glob."""
    found = _list(FileSystems.join(path, "**"))
    found += [f for f in _list(path) if filesys.is_remote_path(f) or os.path.isfile(f)]
    return found


def _relative(root: str, path: str) -> str:
    return path[len(root):].lstrip("/").replace(os.sep, "/")


def publish(staging: str, output: str, managed: Sequence[str], success: bool = True) -> None:
    """Moves everything under `staging` to the same place under `output`, replacing what an
    earlier run wrote under the `managed` names (files or folders), then writes `_SUCCESS`
    (when `success`) and removes the staging folder. Safe to repeat, and to complete from
    another process (`recover`): the manifest says what to move and how to end."""
    manifest_path = FileSystems.join(staging, MANIFEST)
    if FileSystems.exists(manifest_path):  # a retry: the manifest names what was staged
        manifest = json.loads(filesys.read_text(manifest_path))
        if isinstance(manifest, list):  # an earlier version's: the files only
            manifest = {"files": manifest, "managed": [], "success": False}
    else:
        staged = [r for r in (_relative(staging, p) for p in
                              _list(FileSystems.join(staging, "**"))) if r != OWNER]
        if not staged:  # a retry after an attempt that published and removed the staging
            return
        manifest = {"files": staged, "managed": list(managed), "success": success}
        filesys.write_text(manifest_path, json.dumps(manifest))
    _move(staging, output, manifest["files"], manifest["managed"])
    if manifest["success"]:
        filesys.write_text(FileSystems.join(output, SUCCESS), "")
    remove_tree(staging)


def recover(output: str, job: str) -> List[str]:
    """Completes the publishes that a kill interrupted (staging folders holding a manifest),
    oldest first; the caller holds the lock. Returns the staging folders completed."""
    done = []
    for staging in staging_dirs(output):
        if FileSystems.exists(FileSystems.join(staging, MANIFEST)):
            counting.emit(f"{job}: completing the publish of {staging}, interrupted earlier")
            publish(staging, output, ())
            done.append(staging)
    return done


def discard(staging: str, output: str, keep: Sequence[str] = (SUMMARY, "rejects")) -> str:
    """A failed run: moves what explains the failure (its summary, dead letters) to
    OUTPUT/_FAILED_RUN/ (replacing an earlier failure's) and removes the rest of its staging.
    The published output is not touched. Returns the folder."""
    failed = FileSystems.join(output, FAILED_RUN)
    remove_tree(failed)
    for rel in [_relative(staging, p) for p in _list(FileSystems.join(staging, "**"))]:
        if rel.split("/")[0] in keep:
            dst = FileSystems.join(failed, rel)
            if not filesys.is_remote_path(dst):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
            FileSystems.rename([FileSystems.join(staging, rel)], [dst])
    remove_tree(staging)
    return failed


def _move(staging: str, output: str, staged: Sequence[str], managed: Sequence[str]) -> None:
    keep = set(staged)
    success = FileSystems.join(output, SUCCESS)
    if FileSystems.exists(success):
        FileSystems.delete([success])
    old = []
    for name in managed:
        path = FileSystems.join(output, name)
        old += [p for p in _files_under(path) if _relative(output, p) not in keep]
    if old:
        FileSystems.delete(sorted(set(old)))
    if not filesys.is_remote_path(output):  # object stores have no empty folders
        for name in managed:
            _remove_empty_folders(os.path.join(output, name))
    for rel in staged:
        src, dst = FileSystems.join(staging, rel), FileSystems.join(output, rel)
        if not FileSystems.exists(src):
            continue  # moved by an earlier attempt
        if not filesys.is_remote_path(dst):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
        if FileSystems.exists(dst):
            FileSystems.delete([dst])
        FileSystems.rename([src], [dst])


def _remove_empty_folders(path: str) -> None:
    """Removes `path` and the folders below it that hold no file (an earlier run's split that
    this run does not write)."""
    if not os.path.isdir(path):
        return
    for folder, _, _ in sorted(os.walk(path), key=lambda w: -len(w[0])):
        try:
            os.rmdir(folder)  # only succeeds when empty
        except OSError:
            pass


def new_staging(output: str) -> str:
    """This run's staging folder under `output`; its name carries the start time, which is
    how a later run tells a live run's folder from one a killed run left. A local one is
    made now and names its run's process (OWNER): a later run removes it as soon as that
    process is gone, not only after --stale_staging_hours."""
    staging = FileSystems.join(output, f"{STAGING_PREFIX}{int(time.time())}-"
                                       f"{uuid.uuid4().hex[:8]}")
    if not filesys.is_remote_path(output):
        _claim(staging)
    return staging


def _claim(staging: str) -> None:
    """Makes the local folder with its OWNER already written: made under a claim name and
    renamed, so no run ever sees it without its owner (a kill between the folder and the file
    left one that could not be told from a live run's). A kill mid-claim leaves a claim
    folder, removed once CLAIM_SECS old."""
    claim = staging + CLAIM_SUFFIX
    try:
        os.makedirs(claim)
        with open(os.path.join(claim, OWNER), "w") as f:
            json.dump(_this_process(), f)
        os.rename(claim, staging)
    except OSError:  # the writable check at launch says why; the age rule still holds
        pass


def _this_process() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "started": _process_start(os.getpid())}


def _process_start(pid: int) -> Optional[str]:
    """The process's start time in clock ticks since boot (/proc), which tells it from a
    later process that reuses its pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_gone(staging: str) -> bool:
    """True when the local staging folder's run was a process of this host that no longer
    runs (killed); False when it may still run, or cannot be told."""
    try:
        with open(os.path.join(staging, OWNER)) as f:
            owner = json.load(f)
        if owner.get("host") != socket.gethostname():
            return False
        pid = int(owner["pid"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    started = _process_start(pid)
    return started is None or (owner.get("started") is not None and
                               started != owner["started"])


def staging_age_secs(path: str, now: Optional[float] = None) -> float:
    """Seconds since the run of a staging folder started (infinite for names without a
    start time, which earlier versions wrote)."""
    m = STAGING_RE.match(path.rstrip("/").rsplit("/", 1)[-1])
    return float("inf") if not m else (now or time.time()) - int(m.group(1))


def abandoned(staging: str, hours: float = STALE_STAGING_HOURS) -> bool:
    """True when no live run can be writing into the staging folder: its run started
    `hours` ago or more, or (local folders) its process is gone, or it is a claim folder
    older than CLAIM_SECS."""
    age = staging_age_secs(staging)
    if age >= hours * 3600:
        return True
    if filesys.is_remote_path(staging):
        return False
    if staging.endswith(CLAIM_SUFFIX):
        return age >= CLAIM_SECS
    return owner_gone(staging)


def warn_if_shared(job: str, output: str, hours: float = STALE_STAGING_HOURS) -> None:
    """Launch-time: says so when another run may be writing into `output` now."""
    live = [t for t in staging_dirs(output) if not abandoned(t, hours)]
    if live:
        counting.emit(f"{job}: warning: {len(live)} other run(s) started in the last {hours:g} h "
                     f"may be writing into {output} ({live[0]}); runs publish one at a time "
                     f"and the one that finishes last wins")


def staging_dirs(output: str) -> List[str]:
    """The `_staging-*` folders under `output`."""
    tops = {FileSystems.join(output, _relative(output, p).split("/")[0])
            for p in _list(FileSystems.join(output, STAGING_PREFIX + "*", "**"))}
    if not filesys.is_remote_path(output):  # local folders may hold only empty folders
        try:
            tops |= {os.path.join(output, n) for n in os.listdir(output)
                     if n.startswith(STAGING_PREFIX)}
        except OSError:
            pass
    return sorted(t.rstrip("/") for t in tops)


def remove_staging_dirs(output: str, keep: Iterable[str] = (),
                        older_than_hours: float = STALE_STAGING_HOURS) -> List[str]:
    """Deletes `_staging-*` folders under `output` whose run started more than
    `older_than_hours` ago, or whose local run's process is gone (what killed runs left; a
    younger one may be a live run's), except `keep`."""
    keep = {k.rstrip("/") for k in keep}
    removed = [t for t in staging_dirs(output)
               if t not in keep and abandoned(t, older_than_hours)]
    for top in removed:
        remove_tree(top)
    return removed


def remove_tree(top: str) -> None:
    try:
        if filesys.is_remote_path(top):  # a trailing slash: the whole prefix
            FileSystems.delete([top.rstrip("/") + "/"])
        elif os.path.isdir(top):
            shutil.rmtree(top)
        else:
            os.remove(top)
    except FileNotFoundError:
        pass
    except Exception as e:  # a permission: not fatal
        logging.warning("could not remove %s: %s", top, e)
