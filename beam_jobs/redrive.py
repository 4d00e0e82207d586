"""Redrive a batch prediction run's dead letters into its published output.

A user fixes the `raw` of rows in OUTPUT/rejects/*.jsonl (or in a copy, `--rejects`), or
changes nothing after a model or schema fix, and runs:

    python -m beam_jobs.redrive --output out/predictions/2026-11-24 [--model_dir ...]

Each dead letter from a CSV or JSON-lines source is parsed again (a CSV row with the header
the run recorded for its source in OUTPUT/sources.json: never the file as it is now, which
may have changed) and scored; the predictions are merged into the output by key (a key that is
already predicted, or comes twice, is a `duplicate_key` dead letter: no key twice), and the
rows that still fail stay dead letters with their reason. Dead letters that cannot be
replayed (tf.Example and image rows, rows cut at a bound, file-level failures) are kept as
they are. The output is published as every run's is: atomically, or not at all (a killed or
failed redrive leaves the previous output as it was). The summary reconciles the original
input: rows read = predictions (earlier + redriven) + the dead letters that remain.
Reports of the earlier run (metrics.json, skew.json, shadow.json) are kept, not recomputed;
report.html is redrawn with the redrive's counts and the earlier run's.
A model whose task or prediction columns differ from the output's is refused at launch;
published keys are read from whichever format the run wrote; a `--rejects` letter is used
only where it replaces a published one (same source and line), once.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple, Union

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import RunInference
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

from beam_jobs.redrive_config import RedriveConfig
from beam_jobs.shared import cli, common_options, errors, publish
from beam_jobs.shared.args import RedriveArgs
from beam_jobs.shared.finalize import Finalize, OutputSpec
from inference.batch import SOURCES_FILE, FormatPredictions, ParseInputs
from inference.model import model_handler as mh
from inference.model import versions
from inference.outputs import sinks
from inference.outputs.batch_report import redrive_report
from inference.outputs.predictions import Prediction, PredictionBlock
from inference.redrive_steps import (  # noqa: F401 (LETTER_MAX_BYTES: the bound, for readers)
    LETTER_MAX_BYTES,
    CarriedKeys,
    CopyFile,
    FixedFirst,
    MergeByKey,
    ReadLetterLines,
    SourceChunks,
    SplitLetters,
    letter_place,
)
from preprocessing.accounting import counting, rejects
from preprocessing.accounting.tagged import typed_outputs
from preprocessing.contract.schema import Schema
from preprocessing.files import filesys
from preprocessing.files.reading import Chunk

JOB = "redrive"  # the metrics namespace of this job's steps

OUTPUTS = OutputSpec(JOB, managed=("predictions-*", "rejects", SOURCES_FILE),
                     outputs={"rows_predicted": "rows_written"}, report=redrive_report)


RedriveOptions = common_options.options_class(RedriveArgs, "RedriveOptions", __name__)



class RedriveOutputs(NamedTuple):
    """What build_pipeline returns."""
    predictions: beam.PCollection    # the redriven rows' Predictions, merged by key
    dead_letters: beam.PCollection   # the letters that remain, every reason
    summary: beam.PCollection        # one: the published summary (Finalize)


def parse_args(argv: Union[Sequence[str], PipelineOptions]) -> RedriveArgs:
    """The job's typed arguments, checked without any I/O."""
    options = common_options.as_options(argv)
    o = common_options.typed_args(JOB, RedriveArgs, options)
    if not o.output:
        raise errors.JobError(JOB, "--output is required")
    if o.slice_by or o.max_slice_regression is not None:
        raise errors.JobError(JOB, "--slice_by / --max_slice_regression do not apply: a redrive "
                                   "neither evaluates nor gates a model version")
    return dataclasses.replace(o, output=o.output.rstrip("/"))


def launch(o: RedriveArgs, options: PipelineOptions) -> RedriveConfig:
    """The launch step (all of the job's I/O checks, one-line errors) -> the job's config."""
    output = o.output
    summary_path = FileSystems.join(output, "summary.json")
    if not FileSystems.exists(FileSystems.join(output, publish.SUCCESS)) or \
            not FileSystems.exists(summary_path):
        raise errors.JobError(JOB, f"{output} is not a published batch_predict output (no "
                                f"{publish.SUCCESS} or summary.json)")
    previous = json.loads(filesys.read_text(summary_path))
    if previous.get("job") not in ("batch_predict", JOB):
        raise errors.JobError(JOB, f"{output} was written by {previous.get('job')}, not "
                                "batch_predict")
    model_dir = o.model_dir or previous.get("model_dir")
    try:
        model_path = versions.resolve_model_dir(model_dir)
        schema = versions.load_raw_schema(model_path)
    except Exception as e:
        raise errors.JobError(JOB, f"cannot read the model at {model_dir}: "
                                f"{str(e).splitlines()[0][:300]}") from None
    if any(c.transform == "image" for c in schema.columns):
        raise errors.JobError(JOB, "image dead letters name files, not rows: run batch_predict "
                                "again over the images instead")
    _check_same_shape(previous, schema)
    rejects_glob = FileSystems.join(output, "rejects", "*.jsonl")
    for pattern in (rejects_glob, o.rejects):
        if pattern and not filesys.match_by_pattern([pattern])[0]:
            raise errors.JobError(JOB, f"no dead letters match {pattern}")
    files = [m.path for m in FileSystems.match(
        [FileSystems.join(output, "predictions-*")])[0].metadata_list]
    cli.check_writable(JOB, output)
    return RedriveConfig(
        output=output, rejects=rejects_glob, fixed=o.rejects, model_dir=model_dir,
        model_path=model_path,
        schema=schema,
        staging=publish.new_staging(output), key=previous.get("key", schema.key),
        passthrough=tuple(previous.get("passthrough", ())), label=previous.get("label"),
        prediction_files=tuple(sorted(f for f in files if f.endswith(".jsonl"))),
        csv_files=tuple(sorted(f for f in files if f.endswith(".csv"))), previous=previous,
        rows_per_chunk=o.max_batch_size, **_recorded_sources(output))


def _check_same_shape(previous: dict, schema: Schema) -> None:
    """The redriving model must write records of the output's shape: its task and
    prediction columns (one output, one record shape, one CSV header)."""
    task = previous.get("task")
    if task and task != schema.task:
        raise errors.JobError(JOB, f"the model is a {schema.task} model; the output holds "
                                f"{task} predictions: redrive with the run's model")
    recorded = previous.get("prediction_columns")
    columns = sinks.prediction_columns(schema.task, "key", previous.get("passthrough", ()),
                                       bool(previous.get("label")))
    if recorded and list(recorded) != list(columns):
        raise errors.JobError(JOB, f"the model writes the columns {columns}; the output has "
                                f"{list(recorded)}")


def _recorded_sources(output: str) -> Dict[str, Any]:
    """RedriveConfig's `headers` (the header the run parsed each CSV source with) and
    `delimiter` (theirs), from OUTPUT/sources.json."""
    path = FileSystems.join(output, SOURCES_FILE)
    if not FileSystems.exists(path):
        logging.warning("%s: %s has no %s (written before runs recorded their CSV headers): "
                        "its CSV dead letters stay dead letters", JOB, output, SOURCES_FILE)
        return {}
    recorded = json.loads(filesys.read_text(path))
    headers = recorded.get("csv_headers") or {}
    return {"headers": {str(k): tuple(v) for k, v in headers.items()},
            "delimiter": str(recorded.get("csv_delimiter") or ",")}


def read_letters(p, cfg: RedriveConfig):
    """The dead letters to redrive: the published ones, each replaced by its fixed copy
    from --rejects where there is one (so none is lost). Returns (letters, the reads'
    results with their `rejects` and counts, further counts)."""
    reads = [p | f"{name}Pattern" >> beam.Create([pattern])
             | f"Read{name}" >> typed_outputs(beam.ParDo(ReadLetterLines(JOB)), str, "rejects",
                                              counting.COUNTS, main="lines")
             for name, pattern in (("Letters", cfg.rejects), ("Fixed", cfg.fixed)) if pattern]
    published = reads[0].lines
    if not cfg.fixed:
        return published, reads, ()
    chosen = ({"published": published | "PlacePublished" >> beam.Map(
                  lambda x: (letter_place(x), x)).with_output_types(Tuple[Any, str]),
               "fixed": reads[1].lines | "PlaceFixed" >> beam.Map(
                   lambda x: (letter_place(x), x)).with_output_types(Tuple[Any, str])}
              | "ByPlace" >> beam.CoGroupByKey()
              | "FixedFirst" >> typed_outputs(beam.ParDo(FixedFirst(JOB)), str,
                                              counting.COUNTS, main="letters"))
    return chosen.letters, reads, (chosen[counting.COUNTS],)


def build_pipeline(p: beam.Pipeline, cfg: RedriveConfig) -> RedriveOutputs:
    """Pure wiring: dead letters -> parse -> score -> merge by key; the published
    predictions are copied into staging beside the new ones, and Finalize publishes."""
    lines, reads, letter_counts = read_letters(p, cfg)
    # Replay: (source, (line, raw)) pairs, grouped by source.
    letters = lines | "Split" >> typed_outputs(
        beam.ParDo(SplitLetters(JOB)), Tuple[str, Tuple[Any, str]], "kept", "rejects",
        counting.COUNTS, main="replay", kept=rejects.DeadLetter)
    chunks = (letters.replay | "BySource" >> beam.GroupByKey()
              | "Chunks" >> typed_outputs(
                  beam.ParDo(SourceChunks(JOB, cfg.rows_per_chunk, cfg.headers)), Chunk,
                  "rejects", main="chunks"))
    parsed = chunks.chunks | "Parse" >> typed_outputs(
        beam.ParDo(ParseInputs(JOB, cfg.schema, cfg.key, cfg.passthrough,
                               delimiter=cfg.delimiter)), mh.RowBatch,
        "rejects", counting.COUNTS, main="batches")
    handler = mh.SavedModelHandler(cfg.model_path, rows_per_call=cfg.rows_per_chunk)
    formatted = (parsed.batches | "RunInference" >> RunInference(handler)
                 | "Format" >> typed_outputs(
                     beam.ParDo(FormatPredictions(JOB, cfg.label)), PredictionBlock,
                     "rejects", counting.COUNTS, main="predictions"))
    new = (formatted.predictions
           | "Records" >> beam.FlatMap(PredictionBlock.predictions).with_output_types(
               Prediction)
           | "KeyNew" >> beam.Map(lambda r: (r.key, r)).with_output_types(
               Tuple[Any, Prediction]))
    # Published keys from the format the run wrote (JSON lines, else CSV: same rows).
    fmt = "jsonl" if cfg.prediction_files else "csv"
    published = (p | "Published" >> beam.Create(list(cfg.prediction_files or cfg.csv_files))
                 | "ReadPublished" >> beam.io.ReadAllFromText(
                     skip_header_lines=1 if fmt == "csv" else 0)
                 | "KeysPublished" >> typed_outputs(
                     beam.ParDo(CarriedKeys(JOB, fmt)), Tuple[Any, None], counting.COUNTS,
                     main="keys"))
    merged = ({"old": published.keys, "new": new} | "ByKey" >> beam.CoGroupByKey()
              | "Merge" >> typed_outputs(
                  beam.ParDo(MergeByKey(JOB, cfg.rejects)), Prediction, "rejects",
                  counting.COUNTS, main="records"))
    dead = ((letters.kept, letters.rejects, chunks.rejects, parsed.rejects,
             formatted.rejects, merged.rejects) + tuple(r.rejects for r in reads)
            | "AllRejects" >> beam.Flatten())
    written = [dead | "DeadLetters" >> rejects.WriteDeadLetters(
        FileSystems.join(cfg.staging, "rejects"))]
    kept = list(cfg.prediction_files + cfg.csv_files)
    if cfg.headers:  # the run's record of its CSV headers stays with the output
        kept.append(FileSystems.join(cfg.output, SOURCES_FILE))
    written.append(p | "KeptFiles" >> beam.Create(kept)
                   | "CopyKept" >> beam.ParDo(CopyFile(cfg.staging)).with_output_types(str))
    prefix = FileSystems.join(cfg.staging, "predictions-redrive-" +
                              cfg.staging.rstrip("/").rsplit("-", 2)[-2])
    records = merged.records  # Predictions, serialised by the sinks
    written.append(records | "ToJson" >> beam.Map(lambda r: json.dumps(r.to_dict()))
                   .with_output_types(str)
                   | "WriteJsonl" >> beam.io.WriteToText(prefix, file_name_suffix=".jsonl"))
    if cfg.csv_files:
        columns = sinks.prediction_columns(cfg.schema.task, "key", cfg.passthrough,
                                           bool(cfg.label))
        written.append(records | "ToCsv" >> beam.Map(
                           lambda r: sinks.csv_line(r.to_dict(), columns)).with_output_types(str)
                       | "WriteCsv" >> beam.io.WriteToText(
                           prefix, file_name_suffix=".csv",
                           header=sinks.csv_line(dict(zip(columns, columns)), columns)))
    tallies = ((letters[counting.COUNTS], parsed[counting.COUNTS], published[counting.COUNTS],
                merged[counting.COUNTS]) + tuple(r[counting.COUNTS] for r in reads)
               + tuple(letter_counts)
               | "AllTallies" >> beam.Flatten())
    info = {"job": JOB, "output": cfg.output, "rejects": cfg.fixed or cfg.rejects,
            "model_dir": cfg.model_dir, "model_path": cfg.model_path,
            "model_version": versions.model_version(cfg.model_path),
            "key": cfg.key, "passthrough": list(cfg.passthrough), "label": cfg.label,
            "previous_run": {k: cfg.previous.get(k) for k in (
                "job", "run_date", "input", "model_version", "rows_read", "rows_predicted",
                "rejected")}}
    summary = (tallies, dead) | "Finalize" >> Finalize(OUTPUTS, cfg.staging, cfg.output,
                                                      written, info)
    return RedriveOutputs(merged.records, dead, summary)


def run(argv=None, save_main_session=True, test_pipeline=None) -> Optional[dict]:
    """Runs the redrive; returns its summary."""
    # --help: the docstring names --output and --model_dir; the other shared flags do not apply.
    options = common_options.job_options(argv, JOB, RedriveArgs, __doc__, shared_help=False)
    options.view_as(SetupOptions).save_main_session = save_main_session
    cfg = launch(parse_args(options), options)
    logging.info("Redriving %s with model version %s", cfg.rejects,
                 versions.model_version(cfg.model_path))
    p = test_pipeline or beam.Pipeline(options=options)
    build_pipeline(p, cfg)
    return cli.run_and_read_summary(p, None, cfg.output, cleanup=(cfg.staging,))


if __name__ == "__main__":
    cli.main(JOB, run)
