"""The last step of every batch job, inside the pipeline: publish, summarise, mark success.

A Dataflow Flex Template launch (and `--template_location`) only builds the graph: code after
`p.run()` never runs there. So completion is a step of the graph itself. After every sink
has written (their written-file PCollections are this step's side inputs: Beam's "wait on"
pattern), one element runs `finalize()`, which

1. sums the job's tallies, counted in the graph from the data itself (rows read, rows in each
   output, dead letters by reason), into `summary.json`;
2. fails the job (nothing is published) when input != outputs + rejects, or when an output
   that must have rows has none (preprocess's train split);
3. publishes the staged outputs (`OUTPUT/_staging-<run>/`) over the earlier ones: `_SUCCESS`
   is removed first and written last, so a reader that waits for it never sees a mix; files
   are moved following a manifest, so a retried step (Dataflow retries failed work) resumes;
4. removes stale `_staging-*` folders that killed runs left behind;
5. when an input file was cut short or corrupt (truncated_file / corrupt_file dead letters),
   publishes what was read with `"complete": false` in the summary, writes no `_SUCCESS`,
   and fails the job: a partial input never ends as a plain success.

A failed or killed run never touches the previous output: until step 3 it writes only under
its own staging folder.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from typing import Dict, Iterable, List, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from beam_jobs import runtime
from preprocessing.rejects import FILE_REASONS

STAGING_PREFIX = "_staging-"
MANIFEST = "_MANIFEST"
SUCCESS = "_SUCCESS"
SUMMARY = "summary.json"


class NotReconciled(RuntimeError):
    """Rows read != rows written + rows rejected: the run is not published."""


class PartialInput(RuntimeError):
    """An input file was cut short or corrupt: what was read is published, without _SUCCESS,
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
    found += [f for f in _list(path) if runtime.is_remote_path(f) or os.path.isfile(f)]
    return found


def _relative(root: str, path: str) -> str:
    return path[len(root):].lstrip("/").replace(os.sep, "/")


def publish(staging: str, output: str, managed: Sequence[str]) -> None:
    """Moves everything under `staging` to the same place under `output`, replacing what an
    earlier run wrote under the `managed` names (files or folders). Safe to repeat."""
    manifest_path = FileSystems.join(staging, MANIFEST)
    if FileSystems.exists(manifest_path):  # a retry: the manifest names what was staged
        staged = json.loads(runtime.read_text(manifest_path))
    else:
        staged = [_relative(staging, p) for p in _list(FileSystems.join(staging, "**"))]
        runtime.write_text(manifest_path, json.dumps(staged))
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
    if not runtime.is_remote_path(output):  # object stores have no empty folders
        for name in managed:
            _remove_empty_folders(os.path.join(output, name))
    for rel in staged:
        src, dst = FileSystems.join(staging, rel), FileSystems.join(output, rel)
        if not FileSystems.exists(src):
            continue  # moved by an earlier attempt
        if not runtime.is_remote_path(dst):
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


def remove_staging_dirs(output: str, keep: Iterable[str] = ()) -> List[str]:
    """Deletes `_staging-*` folders under `output` (what killed runs left), except `keep`."""
    keep = {k.rstrip("/") for k in keep}
    tops = {FileSystems.join(output, _relative(output, p).split("/")[0])
            for p in _list(FileSystems.join(output, STAGING_PREFIX + "*", "**"))}
    if not runtime.is_remote_path(output):  # local folders may hold only empty folders
        try:
            tops |= {os.path.join(output, n) for n in os.listdir(output)
                     if n.startswith(STAGING_PREFIX)}
        except OSError:
            pass
    removed = sorted(t for t in tops if t.rstrip("/") not in keep)
    for top in removed:
        try:
            if runtime.is_remote_path(top):  # a trailing slash: the whole prefix
                FileSystems.delete([top.rstrip("/") + "/"])
            else:
                shutil.rmtree(top)
        except Exception as e:  # another writer removed it, or a permission: not fatal
            logging.warning("could not remove stale %s: %s", top, e)
    return removed


def finalize(_, tallies, *written, job: str, staging: str, output: str,
             managed: Sequence[str], info: dict, outputs: Dict[str, str],
             outputs_key: Optional[str], started: float, attach: Dict[str, str],
             require: Sequence[str] = ()):
    """The body of the Finalize step (see the module docstring). Returns the summary."""
    del written  # side inputs only so that this runs after every sink has finished
    summary = summarize(info, dict(tallies), outputs, outputs_key, time.time() - started)
    for key, name in attach.items():  # small JSON files a sink wrote, e.g. metrics.json
        path = FileSystems.join(staging, name)
        if FileSystems.exists(path):
            summary[key] = json.loads(runtime.read_text(path))
    partial = {r: n for r, n in summary["rejected"]["by_reason"].items() if r in FILE_REASONS}
    summary["complete"] = not partial
    text = runtime.dumps_json(summary)
    if not summary["reconciled"]:
        runtime.write_text(FileSystems.join(staging, SUMMARY), text)
        raise NotReconciled(f"{job}: counts do not reconcile, nothing was published "
                            f"(staged under {staging}): {json.dumps(summary)}")
    written_rows = summary.get(outputs_key, {}) if outputs_key else summary
    empty = [name for name in require if not written_rows.get(name)]
    if empty:
        runtime.write_text(FileSystems.join(staging, SUMMARY), text)
        raise EmptyOutput(f"{job}: no rows reached {', '.join(empty)} ({summary['rows_read']} "
                          f"rows read, {summary['rejected']['total']} rejected "
                          f"{summary['rejected']['by_reason']}); nothing was published")
    publish(staging, output, list(managed) + [SUMMARY])
    runtime.write_text(FileSystems.join(output, SUMMARY), text)
    if partial:
        remove_staging_dirs(output)
        raise PartialInput(f"{job}: input files were cut short or corrupt {partial} (see "
                           f"{output}/rejects/): what was read is published in {output}, "
                           f"without {SUCCESS}")
    runtime.write_text(FileSystems.join(output, SUCCESS), "")
    remove_staging_dirs(output)
    runtime.emit(f"{job}: finished: {summary_line(summary, outputs_key)}")
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


class SumTallies(beam.CombineFn):
    """(name, n) pairs -> {name: total}, in one combine (an empty dict when there are none)."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, tally):
        name, n = tally
        acc[name] = acc.get(name, 0) + n
        return acc

    def merge_accumulators(self, accs):
        out = {}
        for acc in accs:
            for name, n in acc.items():
                out[name] = out.get(name, 0) + n
        return out

    def extract_output(self, acc):
        return acc


class Tallies(beam.PTransform):
    """Sums (name, n) tallies, plus one `rejected_<reason>` per dead-letter record, into one
    {name: total} dict."""

    def expand(self, inputs):
        counts, rejects = inputs
        by_reason = rejects | "RejectReasons" >> beam.Map(
            lambda rec: ("rejected_" + json.loads(rec)["reason"], 1))
        return ((counts, by_reason) | "AllTallies" >> beam.Flatten()
                | "SumTallies" >> beam.CombineGlobally(SumTallies()))


class Finalize(beam.PTransform):
    """Runs `finalize` once, after every PCollection in `written` is complete (each is a side
    input of the step, so the runner must finish it first).

    Input: (tallies, rejects): `tallies` are (name, n) pairs counted in the graph, `rejects`
    the dead-letter JSON lines. `written`: each sink's output (file names)."""

    def __init__(self, job: str, staging: str, output: str, written: Sequence,
                 managed: Sequence[str], info: dict, outputs: Dict[str, str],
                 outputs_key: Optional[str] = None, attach: Optional[Dict[str, str]] = None,
                 started: Optional[float] = None, require: Sequence[str] = ()):
        super().__init__()
        self.written = list(written)
        self.kw = dict(job=job, staging=staging, output=output, managed=tuple(managed),
                       info=dict(info), outputs=dict(outputs), outputs_key=outputs_key,
                       started=time.time() if started is None else started,
                       attach=dict(attach or {}), require=tuple(require))

    def expand(self, inputs):
        counts, rejects = inputs
        totals = (counts, rejects) | "Tallies" >> Tallies()
        waits = [beam.pvalue.AsList(w) for w in self.written]
        return (counts.pipeline | "Once" >> beam.Create([None])
                | "Publish" >> beam.Map(finalize, beam.pvalue.AsSingleton(totals), *waits,
                                        **self.kw))
