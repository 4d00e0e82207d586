"""Batch (bounded) prediction with RunInference over the model `training.task` exports.

Inputs: CSV with the raw columns (label optional, extra columns allowed), JSON lines (an object
per line, or `{"instances": [...]}`), or TFRecords of raw tf.Example; local or gs://.
For an image model: image files (a glob; class folders give labels), CSVs with a `uri` column,
JSON lines with a `uri` or base64 bytes (`{"image_bytes": {"b64": ...}}`), mixed freely; each
image is normalised as preprocess does (inference/inputs/image_sources.py) and scored by class.
`{date}` in --input/--output is replaced by --run_date (default: today, UTC), so a daily
schedule writes one partition per day and a re-run of a day replaces that day's output.

Outputs under --output, published only when the run succeeds (staged, then moved into place):
    predictions-*.jsonl   key, prediction (or class/class_id/probabilities), model_version,
                          passthrough columns, label (with --evaluate_label)
    predictions-*.csv     the same as CSV (--output_format csv|both)
    rejects/rejects-*.jsonl  dead letters: source, line, raw, reason, detail
    metrics.json          with --evaluate_label: RMSE/MAE or accuracy over labelled rows
    summary.json, _SUCCESS

Locally (DirectRunner):

    python -m beam_jobs.batch_predict --model_dir out/job/export \\
        --input 'data/new/*.csv' --output out/predictions/{date}

On Dataflow:

    python -m beam_jobs.batch_predict --runner DataflowRunner --project P --region us-central1 \\
        --temp_location gs://B/tmp --setup_file ./setup.py \\
        --model_dir gs://B/job/export --input 'gs://B/incoming/{date}/*.csv' \\
        --output gs://B/predictions/{date} --output_table P:ds.predictions
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from typing import NamedTuple, Optional, Sequence, Union

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import RunInference
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, SetupOptions

from beam_jobs import batch_predict_inputs as batch_inputs
from beam_jobs.batch_predict_config import (
    BatchPredictConfig,
    Model,
    Reports,
    Sink,
    Source,
)
from beam_jobs.shared import cli, common_options, errors, publish
from beam_jobs.shared.args import BatchPredictArgs
from beam_jobs.shared.finalize import Finalize, OutputSpec
from inference.batch import (
    OUTPUT_FORMATS,
    SOURCES_FILE,
    EvalMetrics,
    FormatPredictions,
    ReadInputs,
    RecordSources,
)
from inference.inputs.image_batches import ReadImageInputs
from inference.model import model_handler as mh
from inference.model import versions
from inference.model.serving_model import choose_version
from inference.model.shadow import CombineShadow, ShadowScore
from inference.outputs import sinks
from inference.outputs.batch_report import batch_report
from inference.outputs.predictions import Prediction, PredictionBlock
from inference.skew import SkewOfBatches, load_train_statistics, train_label_range
from preprocessing.accounting import counting
from preprocessing.accounting.rejects import WriteDeadLetters
from preprocessing.accounting.tagged import typed_outputs
from preprocessing.files import encodings, filesys
from preprocessing.reference.evaluation import metrics_table
from preprocessing.reference.slices import slice_table

JOB = "batch_predict"  # the metrics namespace of this job's steps

REQUIRED_OPTIONS = ("model_dir", "input", "output")
# What a run publishes (replacing an earlier run's): see beam_jobs/shared/finalize.py.
# What a run writes and publishes (replacing an earlier run's), and how it is counted.
OUTPUTS = OutputSpec(JOB, managed=("predictions-*", "rejects", "metrics.json", "shadow.json",
                                   "skew.json", SOURCES_FILE),
                     outputs={"rows_predicted": "rows_predicted"},
                     # A run whose every row is a dead letter publishes nothing: the previous
                     # predictions stay (--allow_empty_output publishes it anyway).
                     require=("rows_predicted",),
                     attach={"metrics": "metrics.json", "shadow": "shadow.json",
                             "skew": "skew.json"},
                     report=batch_report)


BatchPredictOptions = common_options.options_class(BatchPredictArgs, "BatchPredictOptions",
                                                    __name__)



def _date(text: Optional[str]) -> str:
    if not text:
        return datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    try:
        return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        raise errors.JobError(JOB, f"--run_date must be YYYY-MM-DD, got {text!r}")




def parse_args(argv: Union[Sequence[str], PipelineOptions]) -> BatchPredictArgs:
    """The job's typed arguments, checked without any I/O ({date} resolved in input/output,
    --rows_per_chunk defaulted). Bad arguments fail here, before a model or file is read."""
    options = common_options.as_options(argv)
    o = common_options.typed_args(JOB, BatchPredictArgs, options)
    for name in REQUIRED_OPTIONS:
        if not getattr(o, name):
            raise errors.JobError(JOB, f"--{name} is required")
    rows_per_chunk = o.max_batch_size if o.rows_per_chunk is None else o.rows_per_chunk
    if o.max_batch_size < o.min_batch_size:
        raise errors.JobError(JOB, "need --min_batch_size <= --max_batch_size")
    common_options.check_model_options(JOB, o)
    run_date = _date(o.run_date)
    common_options.check_output_table(JOB, o, options, file_loads=True)
    return dataclasses.replace(
        o, run_date=run_date, rows_per_chunk=rows_per_chunk,
        input=o.input.replace("{date}", run_date),
        output=o.output.replace("{date}", run_date).rstrip("/"))


class BatchPredictOutputs(NamedTuple):
    """What build_pipeline returns: the job's PCollections a test (or a larger pipeline) reads."""
    predictions: beam.PCollection    # PredictionBlocks, one per scored batch
    dead_letters: beam.PCollection   # the dead-letter records, every reason
    summary: beam.PCollection        # one: the published run's summary (Finalize)


def launch(o: BatchPredictArgs, options: PipelineOptions) -> BatchPredictConfig:
    """The launch step: the checked arguments plus what only I/O can tell (the model version
    and its raw schema, the input files, an output that can be written) -> the job's config;
    fails fast with one line naming the problem."""
    model_path, gate_record, schema, train_stats = _model(o)
    common_options.check_golden_set(JOB, o, schema, train_stats)
    shadow_path = common_options.resolve_shadow(JOB, o, schema)
    passthrough = tuple(c.strip() for c in o.passthrough_columns.split(",") if c.strip())
    label = o.evaluate_label
    if label and label != schema.label and label not in schema.names:
        raise errors.JobError(JOB, f"--evaluate_label {label} is not a column of the model's "
                                    f"schema (its label is {schema.label})")
    slicer = common_options.check_slice_by(JOB, o, schema, train_stats, by_label=label)
    patterns = tuple(filesys.split_patterns(o.input))
    try:
        per_pattern = filesys.match_by_pattern(patterns)
    except Exception as e:
        raise errors.JobError(JOB, f"cannot list --input {o.input}: {str(e).splitlines()[0]}")
    files = sorted({f for found in per_pattern for f in found})
    if not files:
        raise errors.JobError(JOB, f"no files match --input {o.input}")
    image = next((c.name for c in schema.columns if c.transform == "image"), None)
    images = batch_inputs.image_inputs(o, image, files, patterns, per_pattern, passthrough) \
        if image else None
    encoding = encodings.UTF8 if image else batch_inputs.checked_csv_encoding(
        o, files, schema, passthrough)
    cli.check_output_apart(JOB, patterns, o.output)
    cli.check_writable(JOB, o.output)
    version = versions.model_version(model_path)
    logging.info("Using model version %s (%s); run date %s", version, model_path, o.run_date)
    publish.warn_if_shared(JOB, o.output, o.stale_staging_hours)
    return BatchPredictConfig(
        schema=schema,
        source=Source(o.input, patterns, o.rows_per_chunk, o.input_format,
                      delimiter=o.delimiter, key=o.key_column or schema.key,
                      passthrough=passthrough,
                      block_bytes=filesys.megabytes(o.csv_block_mb),
                      max_record_bytes=o.max_record_bytes, max_record_lines=o.max_record_lines,
                      total_bytes=filesys.total_size(patterns), images=images,
                      encoding=encoding),
        model=Model(o.model_dir, model_path, version, o.max_batch_size,
                    threads=o.model_threads or None, gate_record=gate_record,
                    shadow_path=shadow_path),
        sink=Sink(o.output, publish.new_staging(o.output), o.run_date, o.output_format,
                  o.output_table, allow_empty=o.allow_empty_output == "on",
                  stale_staging_hours=o.stale_staging_hours),
        reports=Reports(
            label, train_label_range(train_stats, label)
            if label and schema.task == "regression" else None, slicer,
            common_options.train_statistics(o, model_path, train_stats, schema, passthrough),
            o.skew_threshold))


def _model(o: BatchPredictArgs) -> tuple:
    """(the version to serve, the gate's record, its raw schema, its train statistics): the
    statistics are read once, for the golden set's label check, the skew report and the
    label range."""
    try:
        model_path, gate_record = choose_version(o.model_dir, common_options.gate_settings(o))
        return (model_path, gate_record, versions.load_raw_schema(model_path),
                load_train_statistics(model_path))
    except FileNotFoundError as e:
        raise errors.JobError(JOB, str(e))
    except Exception as e:
        raise errors.JobError(JOB, f"cannot read the model at {o.model_dir}: "
                                    f"{str(e).splitlines()[0][:300]}")


def build_pipeline(p: beam.Pipeline, cfg: BatchPredictConfig) -> BatchPredictOutputs:
    """Adds the batch-prediction graph to `p` (pure wiring: tests build it from a config they
    construct): everything is written under the sink's staging folder, and the Finalize step
    publishes it to its output."""
    src, model, sink, label = cfg.source, cfg.model, cfg.sink, cfg.reports.label
    written = []
    if src.images:
        batches, read_rejects, parse_rejects, read_counts = p | "Images" >> ReadImageInputs(
            JOB, src.images.list_files, src.images.patterns, src.rows_per_chunk,
            src.input_format, src.images.key_column, label, model.max_batch_size,
            src.images.limits)
        read_rejects = (read_rejects, parse_rejects) | "ImageRejects" >> beam.Flatten()
        tallies = [read_counts]
    else:
        inputs = p | "Read" >> ReadInputs(
            JOB, cfg.schema, src.patterns, src.key, src.passthrough, src.rows_per_chunk,
            src.input_format, block_bytes=src.block_bytes, total_bytes=src.total_bytes,
            record_bounds=(src.max_record_bytes, src.max_record_lines),
            delimiter=src.delimiter, encoding=src.encoding)
        batches, read_rejects = inputs.batches, inputs.rejects
        tallies = [inputs.counts]
        written.append(inputs.chunks | "Sources" >> RecordSources(sink.staging, src.delimiter))
    # Each element is already a chunk of rows (see RowBatch), scored max_batch_size at a time.
    handler = mh.SavedModelHandler(model.path, rows_per_call=model.max_batch_size,
                                   intra_op_threads=model.threads)
    results = batches | "RunInference" >> RunInference(handler)
    formatted = results | "Format" >> typed_outputs(
        beam.ParDo(FormatPredictions(JOB, label, cfg.reports.slicer)), PredictionBlock,
        "rejects", counting.COUNTS, main="predictions")
    tallies.append(formatted[counting.COUNTS])
    dead = (read_rejects, formatted.rejects) | "AllRejects" >> beam.Flatten()
    written.append(dead | "DeadLetters" >> WriteDeadLetters(
        FileSystems.join(sink.staging, "rejects")))
    preds = formatted.predictions  # PredictionBlocks, one per batch
    columns = sinks.prediction_columns(cfg.schema.task, "key", src.passthrough, bool(label))
    written += _sinks(sink, preds, columns)
    written += _reports(cfg, batches, results, preds)
    info = {"job": JOB, "run_date": sink.run_date, "input": src.input, "output": sink.output,
            "model_dir": model.model_dir, "model_path": model.path,
            "model_version": model.version, "key": src.key,
            "passthrough": list(src.passthrough), "label": label, "task": cfg.schema.task,
            "output_formats": OUTPUT_FORMATS[sink.output_format],
            "prediction_columns": columns}  # what a redrive reproduces
    if model.gate_record:  # version_accepted, or version_refused with both metrics
        info["model_gate"] = model.gate_record
    all_tallies = tuple(tallies) | "AllTallies" >> beam.Flatten()
    summary = (all_tallies, dead) | "Finalize" >> Finalize(
        dataclasses.replace(OUTPUTS, require=() if sink.allow_empty else OUTPUTS.require),
        sink.staging, sink.output, written, info,
        stale_staging_hours=sink.stale_staging_hours)
    return BatchPredictOutputs(preds, dead, summary)


def _sinks(sink: Sink, preds, columns) -> list:
    """The predictions written: JSON lines and/or CSV under staging, a BigQuery table."""
    written = []
    prefix = FileSystems.join(sink.staging, "predictions")
    if sink.output_format in ("jsonl", "both"):
        # One text element per batch (lines joined): the sink adds the final newline.
        written.append(preds | "ToJson" >> beam.Map(PredictionBlock.json_bytes)
                       .with_output_types(bytes)
                       | "WriteJsonl" >> beam.io.WriteToText(prefix, file_name_suffix=".jsonl"))
    if sink.output_format in ("csv", "both"):
        header = sinks.csv_line(dict(zip(columns, columns)), columns)
        written.append(preds | "ToCsv" >> beam.Map(
                lambda block: "\n".join(sinks.csv_line(r, columns) for r in block.records()))
                .with_output_types(str)
            | "WriteCsv" >> beam.io.WriteToText(prefix, file_name_suffix=".csv", header=header))
    if sink.output_table:
        # Its output (the finished load jobs) is a Finalize input: _SUCCESS waits for the loads.
        written.append(preds | "Unbatch" >> beam.FlatMap(PredictionBlock.predictions)
                       .with_output_types(Prediction)
                       | "WriteBigQuery" >> sinks.WriteBigQuery(sink.output_table, columns,
                                                                sink.run_date))
    return written


def _metrics_json(metrics: dict, label: str, version: str) -> str:
    """metrics.json's text; rows whose label lies outside the train labels' range are also
    named in the log (a bounded model cannot reach them: they can dominate the RMSE)."""
    outside = metrics.get("labels_outside_train_range")
    if outside:
        others = outside["rmse_of_the_others"]
        logging.warning("%s: %d row(s) have their %s outside the train split's range [%g, %g]; "
                        "they carry %.0f%% of the squared error (RMSE of the other rows: %s)",
                        JOB, outside["examples"], label, *outside["train_range"],
                        100 * outside["share_of_squared_error"],
                        "none" if others is None else f"{others:.4g}")
    return filesys.dumps_json(dict(metrics, label=label, model_version=version), sort_keys=False)


def _reports(cfg: BatchPredictConfig, batches, results, preds) -> list:
    """The small JSON reports Finalize attaches to the summary: metrics.json (labels),
    skew.json (train/serve skew of the rows served), shadow.json (the shadow model)."""
    r, model, staging, written = cfg.reports, cfg.model, cfg.sink.staging, []
    if r.label:
        written.append(preds | "Metrics" >> beam.CombineGlobally(
                           EvalMetrics(cfg.schema.task, r.label_range,
                                       slices=r.slicer is not None))
             | "MetricsJson" >> beam.Map(_metrics_json, r.label, model.version)
             .with_output_types(str)
             | "WriteMetrics" >> beam.io.WriteToText(FileSystems.join(staging, "metrics"),
                                                     file_name_suffix=".json",
                                                     shard_name_template=""))
    if r.train_statistics:  # train/serve skew of the rows served, one report per run
        report = batches | "Skew" >> SkewOfBatches(r.train_statistics, r.skew_threshold)
        written.append(filesys.write_json_file(report, staging, "skew"))
    if model.shadow_path:  # the shadow model's comparison, one per run
        compared = (results | "Shadow" >> beam.ParDo(ShadowScore(
            model.shadow_path, cfg.schema.task, r.label, model.max_batch_size))
            | "ShadowCompare" >> beam.CombineGlobally(CombineShadow(
                cfg.schema.task, model.version, versions.model_version(model.shadow_path))))
        written.append(filesys.write_json_file(compared, staging, "shadow"))
    return written


def _sample(output: str, n: int = 5):
    try:
        files = sorted(m.path for m in FileSystems.match(
            [FileSystems.join(output, "predictions-*.jsonl")])[0].metadata_list)
        out = []
        for f in files:  # only each file's head: outputs may be many GB
            for line in filesys.read_head(f).splitlines():
                out.append(json.loads(line))
                if len(out) >= n:
                    return out
        return out
    except Exception:
        return []


def run(argv=None, save_main_session=True, test_pipeline=None) -> Optional[dict]:
    """Runs the job; returns the run summary (None when only a template was built)."""
    options = common_options.job_options(argv, JOB, BatchPredictArgs, __doc__)
    options.view_as(SetupOptions).save_main_session = save_main_session
    cfg = launch(parse_args(options), options)
    template = getattr(options.view_as(GoogleCloudOptions), "template_location", None)
    p = test_pipeline or beam.Pipeline(options=options)
    build_pipeline(p, cfg)
    # Everything the job promises happens inside the pipeline (Finalize): here only wait.
    output = cfg.sink.output
    summary = cli.run_and_read_summary(p, template, output, cleanup=(cfg.sink.staging,))
    if summary is not None:
        # (The counts were printed by the pipeline's Finalize step.)
        print(f"{JOB}: model version {cfg.model.version}; outputs in {output}/")
        if "metrics" in summary:
            metrics = dict(summary["metrics"])
            by_slice = metrics.pop("slices", None)
            for drawn in ("residual_sample", "confusion_matrix"):  # report.html draws them
                metrics.pop(drawn, None)
            print(f"{JOB}: metrics\n{metrics_table(metrics)}")
            if by_slice:
                print(f"{JOB}: metrics by slice\n{slice_table(by_slice)}")
        for rec in _sample(output):
            print(f"  {json.dumps(rec)}")

    return summary


if __name__ == "__main__":
    cli.main(JOB, run)  # a finished job skips the ~2 s interpreter teardown
