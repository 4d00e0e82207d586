"""The last step of every batch job, inside the pipeline: publish, summarise, mark success.

A Dataflow Flex Template launch (and `--template_location`) only builds the graph: code after
`p.run()` never runs there. So completion is a step of the graph itself. After every sink
has written (their written-file PCollections are this step's side inputs: Beam's "wait on"
pattern), one element runs `finalize()`, which

1. sums the job's tallies, counted in the graph from the data itself (rows read, rows in each
   output, dead letters by reason), into `summary.json`;
2. fails the job (nothing is published) when input != outputs + rejects, or when an output
   that must have rows has none (preprocess's train split);
3. publishes the staged outputs over the earlier ones (beam_jobs/shared/publish.py: `_SUCCESS`
   removed first and written last, a manifest for retries, one publish at a time);
4. removes `_staging-*` folders older than --stale_staging_hours (what killed runs left);
5. when an input file was cut short, corrupt or unreadable (truncated_file / corrupt_file /
   unreadable_file dead letters), publishes what was read with `"complete": false` in the
   summary, writes no `_SUCCESS`, and fails the job: a partial input never ends as a plain
   success.

Each job declares what it writes once, as an OutputSpec. A failed or killed run never
touches the previous output: until step 3 it writes only under its own staging folder.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from beam_jobs.shared.errors import EmptyOutput, NotPublished, NotReconciled, PartialInput
from beam_jobs.shared.publish import (
    STALE_STAGING_HOURS,
    SUCCESS,
    SUMMARY,
    LockWaitTimeout,
    PublishLock,
    discard,
    publish,
    recover,
    remove_staging_dirs,
    remove_tree,
)
from preprocessing.accounting import counting
from preprocessing.accounting.counting import FirstRejects, Tallies
from preprocessing.accounting.rejects import FILE_REASONS
from preprocessing.files import filesys

REPORT = "report.html"  # a run's page for a person (OutputSpec.report)


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """What a batch job writes, declared once per job.

    managed: the names under --output a run owns (files, folders or globs): a publish
      replaces what an earlier run wrote under them, and nothing else there;
    outputs: summary name -> the tally counting rows written to that output (read = the
      sum of these + rejects);
    outputs_key: nest those counts under this summary key (preprocess: "splits");
    attach: summary key -> a small JSON file a sink staged (batch_predict's metrics.json);
    require: outputs that must get rows, or nothing is published (preprocess: train);
    sized: globs under the output whose files' byte sizes the summary lists (`files`), so a
      reader can tell a file cut or replaced after the run: preprocess's TFRecord shards,
      which TensorFlow reads without error when cut exactly between two records.
    """
    job: str
    managed: Tuple[str, ...]
    outputs: Mapping[str, str]
    outputs_key: Optional[str] = None
    attach: Mapping[str, str] = dataclasses.field(default_factory=dict)
    require: Tuple[str, ...] = ()
    sized: Tuple[str, ...] = ()
    report: Optional[Callable[[dict, str], str]] = None  # (summary, staging) -> report.html


def file_sizes(staging: str, globs: Sequence[str]) -> Dict[str, int]:
    """Byte size of each file under `staging` matching `globs`, by its path relative to it."""
    root = staging.rstrip("/") + "/"
    return {m.path[len(root):]: m.size_in_bytes
            for g in globs for m in FileSystems.match([root + g])[0].metadata_list}


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
    ignored = {k[len("ignored_"):]: v for k, v in sorted(tallies.items())
               if k.startswith("ignored_") and v}
    if ignored:  # lines that are no row of the input (redrive's --rejects strangers)
        summary["ignored"] = ignored
    summary.update({
        "rejected": {"total": total, "by_reason": rejected},
        "reconciled": read == sum(written.values()) + total,
        "wall_seconds": round(wall_seconds, 2),
        "rows_per_second": round(read / wall_seconds, 1) if wall_seconds > 0 else None,
    })
    return summary


def finalize(_, tallies, *written, spec: OutputSpec, staging: str, output: str, info: dict,
             started: float, stale_staging_hours: float = STALE_STAGING_HOURS,
             scratch: Sequence[str] = (), first_rejects: Optional[Mapping[str, str]] = None):
    """The body of the Finalize step (see the module docstring). Returns the summary.
    `scratch`: this run's temporary folders, removed whatever the outcome; `first_rejects`:
    each reason's first dead letter (FirstRejects)."""
    del written  # side inputs only so that this runs after every sink has finished
    try:
        return _finalize(tallies, spec, staging, output, info, started, stale_staging_hours,
                         dict(first_rejects or {}))
    finally:
        for path in scratch:
            remove_tree(path)


def _finalize(tallies, spec, staging, output, info, started, stale_staging_hours,
              first_rejects):
    job, outputs_key = spec.job, spec.outputs_key
    summary = summarize(info, dict(tallies), dict(spec.outputs), outputs_key,
                        time.time() - started)
    if first_rejects:
        summary["first_rejects"] = dict(sorted(first_rejects.items()))
    for key, name in spec.attach.items():
        path = FileSystems.join(staging, name)
        if FileSystems.exists(path):
            summary[key] = json.loads(filesys.read_text(path))
    partial = {r: n for r, n in summary["rejected"]["by_reason"].items() if r in FILE_REASONS}
    summary["complete"] = not partial
    if spec.sized:
        summary["files"] = file_sizes(staging, spec.sized)
    filesys.write_text(FileSystems.join(staging, SUMMARY), filesys.dumps_json(summary))
    published = list(spec.managed) + [SUMMARY]
    if spec.report is not None and _write_report(spec, staging, summary):
        published.append(REPORT)
    if not summary["reconciled"]:
        failed = discard(staging, output)
        raise NotReconciled(f"{job}: counts do not reconcile, nothing was published "
                            f"(summary and dead letters in {failed}): {json.dumps(summary)}")
    written_rows = summary.get(outputs_key, {}) if outputs_key else summary
    empty = [name for name in spec.require if not written_rows.get(name)]
    if empty or not summary["rows_read"]:
        failed = discard(staging, output)
        what = f"no rows reached {', '.join(empty)}" if summary["rows_read"] else "no rows read"
        by_reason = summary["rejected"]["by_reason"]
        top = max(by_reason, key=by_reason.get) if by_reason else None
        why = f"; the first {top}: {first_rejects[top]}" if top in first_rejects else ""
        raise EmptyOutput(f"{job}: {what} ({summary['rows_read']} rows read, "
                          f"{summary['rejected']['total']} rejected {by_reason}{why}); nothing "
                          f"was published, the previous output stays (summary and dead "
                          f"letters in {failed})")
    try:
        with PublishLock(output, staging.rstrip("/").rsplit("/", 1)[-1], job):
            recover(output, job)  # a publish a kill interrupted: completed before this one
            publish(staging, output, published, success=not partial)
    except LockWaitTimeout as e:
        failed = discard(staging, output)
        raise NotPublished(f"{e} (summary and dead letters in {failed})") from None
    remove_staging_dirs(output, older_than_hours=stale_staging_hours)
    if partial:
        raise PartialInput(f"{job}: input files were cut short, corrupt or unreadable {partial} (see "
                           f"{output}/rejects/): what was read is published in {output}, "
                           f"without {SUCCESS}")
    counting.emit(f"{job}: finished: {summary_line(summary, outputs_key)}")
    return summary


def _write_report(spec: OutputSpec, staging: str, summary: dict) -> bool:
    """report.html beside summary.json. A report that cannot be drawn is a warning, never a
    failed run: the outputs and the summary are the run's promise."""
    try:
        page = spec.report(summary, staging)
    except Exception as e:  # noqa: BLE001
        logging.warning("%s: no report.html (%s: %s)", spec.job, type(e).__name__, e)
        return False
    filesys.write_text(FileSystems.join(staging, REPORT), page)
    return True


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
    the dead-letter JSON lines. `written`: each sink's output (file names); `info`: what the
    summary says of the run besides its counts."""

    def __init__(self, spec: OutputSpec, staging: str, output: str, written: Sequence,
                 info: Optional[dict] = None, started: Optional[float] = None,
                 stale_staging_hours: float = STALE_STAGING_HOURS, scratch: Sequence[str] = ()):
        super().__init__()
        self.written = list(written)
        self.kw = dict(spec=spec, staging=staging, output=output, info=dict(info or {}),
                       started=time.time() if started is None else started,
                       stale_staging_hours=stale_staging_hours, scratch=tuple(scratch))

    def expand(self, inputs):
        counts, rejects = inputs
        totals = (counts, rejects) | "Tallies" >> Tallies()
        waits = [beam.pvalue.AsList(w) for w in self.written]
        first = rejects | "FirstRejects" >> FirstRejects()
        return (counts.pipeline | "Once" >> beam.Create([None])
                | "Publish" >> beam.Map(finalize, beam.pvalue.AsSingleton(totals), *waits,
                                        first_rejects=beam.pvalue.AsDict(first), **self.kw))
