"""The last step of every batch job, inside the pipeline: publish, summarise, mark success.

A Dataflow Flex Template launch (and `--template_location`) only builds the graph: code after
`p.run()` never runs there. So completion is a step of the graph itself. After every sink
has written (their written-file PCollections are this step's side inputs: Beam's "wait on"
pattern), one element runs `finalize()`, which

1. sums the job's tallies, counted in the graph from the data itself (rows read, rows in each
   output, dead letters by reason), into `summary.json`;
2. fails the job (nothing is published) when input != outputs + rejects, or when an output
   that must have rows has none (preprocess's train split);
3. publishes the staged outputs (`OUTPUT/_staging-<started>-<run>/`) over the earlier ones:
   `_SUCCESS` is removed first and written last, so a reader that waits for it never sees a
   mix; files are moved following a manifest, so a retried step (Dataflow retries failed
   work) resumes;
4. removes `_staging-*` folders older than --stale_staging_hours (what killed runs left).

Two runs into one output: each writes only its own staging folder, and a publish holds
`OUTPUT/_PUBLISH_LOCK` (created exclusively: O_EXCL locally, a generation-0 precondition on
Cloud Storage), so publishes happen one at a time and the output is always exactly one
run's files; the run that finishes last wins. A lock older than LOCK_STALE_SECS belongs to
a killed publish and is taken over. A staging folder younger than --stale_staging_hours may
be a live run's and is left alone.
5. when an input file was cut short, corrupt or unreadable (truncated_file / corrupt_file /
   unreadable_file dead letters),
   publishes what was read with `"complete": false` in the summary, writes no `_SUCCESS`,
   and fails the job: a partial input never ends as a plain success.

A failed or killed run never touches the previous output: until step 3 it writes only under
its own staging folder.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import uuid
from typing import Dict, Iterable, List, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from beam_jobs import common_options
from preprocessing import counting, filesys
from preprocessing.counting import Tallies
from preprocessing.rejects import FILE_REASONS

STAGING_PREFIX = "_staging-"
STAGING_RE = re.compile(re.escape(STAGING_PREFIX) + r"(\d+)-")
MANIFEST = "_MANIFEST"
LOCK = "_PUBLISH_LOCK"
LOCK_STALE_SECS = 1800  # a publish moves files for seconds or minutes; older is a dead one
STALE_STAGING_HOURS = common_options.STALE_STAGING_HOURS
SUCCESS = "_SUCCESS"
SUMMARY = "summary.json"


class NotReconciled(RuntimeError):
    """Rows read != rows written + rows rejected: the run is not published."""


class PartialInput(RuntimeError):
    """An input file was cut short, corrupt or unreadable: what was read is published, without _SUCCESS,
    and the job fails, so no schedule takes it for a complete run."""


class EmptyOutput(RuntimeError):
    """An output the job cannot do without (preprocess's train split) got no rows."""


def summarize(info: dict, tallies: Dict[str, int], outputs: Dict[str, str],
              outputs_key: Optional[str], wall_seconds: float) -> dict:
    """The run summary from the tallies summed in the graph. `outputs` maps a summary name to
    the tally counting rows in that output (e.g. train -> rows_train); with `outputs_key` they
    are nested under that key."""
    rejected = {k[len("rejected_"):]: v for k, v in sorted(tallies.items())
                if k.startswith("rejected_") and v}
    read = tallies.get("rows_read", 0)
    written = {name: tallies.get(tally, 0) for name, tally in outputs.items()}
    summary = dict(info)
    summary.update({"files_read": tallies.get("files_read", 0), "rows_read": read})
    if outputs_key:
        summary[outputs_key] = written
    else:
        summary.update(written)
    total = sum(rejected.values())
    summary.update({
        "rejected": {"total": total, "by_reason": rejected},
        "reconciled": read == sum(written.values()) + total,
        "wall_seconds": round(wall_seconds, 2),
        "rows_per_second": round(read / wall_seconds, 1) if wall_seconds > 0 else None,
    })
    return summary


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


def publish(staging: str, output: str, managed: Sequence[str]) -> None:
    """Moves everything under `staging` to the same place under `output`, replacing what an
    earlier run wrote under the `managed` names (files or folders). Safe to repeat."""
    manifest_path = FileSystems.join(staging, MANIFEST)
    if FileSystems.exists(manifest_path):  # a retry: the manifest names what was staged
        staged = json.loads(filesys.read_text(manifest_path))
    else:
        staged = [_relative(staging, p) for p in _list(FileSystems.join(staging, "**"))]
        if not staged:  # a retry after an attempt that published and removed the staging
            return
        filesys.write_text(manifest_path, json.dumps(staged))
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
    how a later run tells a live run's folder from one a killed run left."""
    return FileSystems.join(output, f"{STAGING_PREFIX}{int(time.time())}-{uuid.uuid4().hex[:8]}")


def staging_age_secs(path: str, now: Optional[float] = None) -> float:
    """Seconds since the run of a staging folder started (infinite for names without a
    start time, which earlier versions wrote)."""
    m = STAGING_RE.match(path.rstrip("/").rsplit("/", 1)[-1])
    return float("inf") if not m else (now or time.time()) - int(m.group(1))


def warn_if_shared(job: str, output: str, hours: float = STALE_STAGING_HOURS) -> None:
    """Launch-time: says so when another run may be writing into `output` now."""
    live = [t for t in staging_dirs(output) if staging_age_secs(t) < hours * 3600]
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
    `older_than_hours` ago (what killed runs left; a younger one may be a live run's),
    except `keep`."""
    keep = {k.rstrip("/") for k in keep}
    removed = [t for t in staging_dirs(output)
               if t not in keep and staging_age_secs(t) >= older_than_hours * 3600]
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


def _read_lock(path: str) -> Optional[dict]:
    try:
        return json.loads(filesys.read_text(path))
    except Exception:  # released meanwhile, or half written: look again
        return None


class PublishLock:
    """`with PublishLock(output, owner, job):` holds OUTPUT/_PUBLISH_LOCK (see the module
    docstring); waits while another run publishes, takes over a lock older than
    `stale_secs`, and is re-entrant for the same owner (a retried step)."""

    def __init__(self, output: str, owner: str, job: str, stale_secs: float = LOCK_STALE_SECS,
                 poll_secs: float = 1.0):
        self.path = FileSystems.join(output, LOCK)
        self.owner, self.job, self.stale, self.poll = owner, job, stale_secs, poll_secs

    def __enter__(self):
        told = False
        while not _create_exclusive(self.path, json.dumps({"owner": self.owner,
                                                             "since": time.time()})):
            held = _read_lock(self.path)
            if held is None:
                time.sleep(self.poll / 10)
                continue
            if held.get("owner") == self.owner:
                break
            if time.time() - float(held.get("since", 0)) > self.stale:
                logging.warning("%s: taking over a publish lock of %s held since %s (a killed "
                                "run's)", self.job, held.get("owner"), held.get("since"))
                try:
                    FileSystems.delete([self.path])
                except Exception:  # another waiter took it over first
                    pass
                continue
            if not told:
                counting.emit(f"{self.job}: waiting for run {held.get('owner')} to finish "
                             f"publishing into the same output")
                told = True
            time.sleep(self.poll)
        return self

    def __exit__(self, *exc):
        held = _read_lock(self.path)
        if held is not None and held.get("owner") == self.owner:
            FileSystems.delete([self.path])
        return False


def finalize(_, tallies, *written, job: str, staging: str, output: str,
             managed: Sequence[str], info: dict, outputs: Dict[str, str],
             outputs_key: Optional[str], started: float, attach: Dict[str, str],
             require: Sequence[str] = (), stale_staging_hours: float = STALE_STAGING_HOURS):
    """The body of the Finalize step (see the module docstring). Returns the summary."""
    del written  # side inputs only so that this runs after every sink has finished
    summary = summarize(info, dict(tallies), outputs, outputs_key, time.time() - started)
    for key, name in attach.items():  # small JSON files a sink wrote, e.g. metrics.json
        path = FileSystems.join(staging, name)
        if FileSystems.exists(path):
            summary[key] = json.loads(filesys.read_text(path))
    partial = {r: n for r, n in summary["rejected"]["by_reason"].items() if r in FILE_REASONS}
    summary["complete"] = not partial
    text = filesys.dumps_json(summary)
    if not summary["reconciled"]:
        filesys.write_text(FileSystems.join(staging, SUMMARY), text)
        raise NotReconciled(f"{job}: counts do not reconcile, nothing was published "
                            f"(staged under {staging}): {json.dumps(summary)}")
    written_rows = summary.get(outputs_key, {}) if outputs_key else summary
    empty = [name for name in require if not written_rows.get(name)]
    if empty:
        filesys.write_text(FileSystems.join(staging, SUMMARY), text)
        raise EmptyOutput(f"{job}: no rows reached {', '.join(empty)} ({summary['rows_read']} "
                          f"rows read, {summary['rejected']['total']} rejected "
                          f"{summary['rejected']['by_reason']}); nothing was published")
    with PublishLock(output, staging.rstrip("/").rsplit("/", 1)[-1], job):
        publish(staging, output, list(managed) + [SUMMARY])
        filesys.write_text(FileSystems.join(output, SUMMARY), text)
        if not partial:
            filesys.write_text(FileSystems.join(output, SUCCESS), "")
    remove_tree(staging)
    remove_staging_dirs(output, older_than_hours=stale_staging_hours)
    if partial:
        raise PartialInput(f"{job}: input files were cut short, corrupt or unreadable {partial} (see "
                           f"{output}/rejects/): what was read is published in {output}, "
                           f"without {SUCCESS}")
    counting.emit(f"{job}: finished: {summary_line(summary, outputs_key)}")
    return summary


def summary_line(summary: dict, outputs_key: Optional[str] = None) -> str:
    written = summary.get(outputs_key, {}) if outputs_key else {
        k: v for k, v in summary.items() if k.startswith("rows_") and k != "rows_read"
        and k != "rows_per_second"}
    parts = ", ".join(f"{k} {v:,}" for k, v in written.items())
    rejected = summary["rejected"]
    return (f"{summary['rows_read']:,} rows read -> {parts}, rejected {rejected['total']:,} "
            f"{rejected['by_reason'] or ''}; {summary['wall_seconds']} s"
            + (f" ({summary['rows_per_second']:,} rows/s)" if summary["rows_per_second"] else ""))



class Finalize(beam.PTransform):
    """Runs `finalize` once, after every PCollection in `written` is complete (each is a side
    input of the step, so the runner must finish it first).

    Input: (tallies, rejects): `tallies` are (name, n) pairs counted in the graph, `rejects`
    the dead-letter JSON lines. `written`: each sink's output (file names)."""

    def __init__(self, job: str, staging: str, output: str, written: Sequence,
                 managed: Sequence[str], info: dict, outputs: Dict[str, str],
                 outputs_key: Optional[str] = None, attach: Optional[Dict[str, str]] = None,
                 started: Optional[float] = None, require: Sequence[str] = (),
                 stale_staging_hours: float = STALE_STAGING_HOURS):
        super().__init__()
        self.written = list(written)
        self.kw = dict(job=job, staging=staging, output=output, managed=tuple(managed),
                       info=dict(info), outputs=dict(outputs), outputs_key=outputs_key,
                       started=time.time() if started is None else started,
                       attach=dict(attach or {}), require=tuple(require),
                       stale_staging_hours=stale_staging_hours)

    def expand(self, inputs):
        counts, rejects = inputs
        totals = (counts, rejects) | "Tallies" >> Tallies()
        waits = [beam.pvalue.AsList(w) for w in self.written]
        return (counts.pipeline | "Once" >> beam.Create([None])
                | "Publish" >> beam.Map(finalize, beam.pvalue.AsSingleton(totals), *waits,
                                        **self.kw))
