"""The options every job shares (PipelineOptions subclasses), the typed configs made from
them (checked without I/O), and parsing a job's command line."""
from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import types
from typing import Optional

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions

from beam_jobs.shared.cli import setup_logging
from beam_jobs.shared.errors import JobError
from beam_jobs.shared.local_runner import LOCAL_RUNNER
from beam_jobs.shared.publish import STALE_STAGING_HOURS
from inference.model import versions
from inference.model.gate import DEFAULT_MAX_METRIC_REGRESSION, GoldenSetError, read_golden
from inference.outputs.bigquery_client import parse_table
from inference.skew import DEFAULT_THRESHOLD as DEFAULT_SKEW_THRESHOLD
from inference.skew import feature_statistics, train_label_range
from preprocessing import quiet
from preprocessing.images.checks import ImageLimits
from preprocessing.reference.slices import SliceError, Slicer, parse_slice_by


class IOOptions(PipelineOptions):
    """Flags every job shares. Beam registers all PipelineOptions subclasses in one parser,
    so a flag may be defined once only: jobs read these through `merged_options`."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--input", help="Input path or glob (local or gs://); "
                            "comma-separate several. Required.")
        parser.add_argument("--output", help="Output directory (local or gs://). Required. "
                            "What an earlier run wrote there is replaced when this run "
                            "succeeds (never before).")
        parser.add_argument("--key_column", help="Column identifying a row (default: the "
                            "schema's key).")
        parser.add_argument("--max_record_bytes", type=int, default=1 << 20,
                            help="CSV/JSON lines: a longer line is rejected (record_too_large) "
                                 "and a quoted field may span at most this many bytes.")
        parser.add_argument("--max_record_lines", type=int, default=1000,
                            help="CSV: a quoted field may span at most this many lines; past "
                                 "that its first line is rejected (unterminated_quote) and "
                                 "reading resumes on the next line.")
        parser.add_argument("--csv_block_mb", type=float, default=2.0,
                            help="CSV files are read in blocks of this many MB and parsed "
                                 "column-wise with Arrow (the same rows, values and rejects "
                                 "as record by record); 0: record by record.")
        parser.add_argument("--stale_staging_hours", type=float, default=STALE_STAGING_HOURS,
                            help="Batch jobs: a `_staging-*` folder under --output whose run "
                                 "started longer ago than this is a killed run's and is removed "
                                 "when a run finishes; a younger one may be a live run's.")
        parser.add_argument("--log_level", default="WARNING",
                            choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                            help="Log level (default WARNING: progress lines and the summary "
                                 "only; INFO shows Beam's own log).")
        quiet.add_verbosity_flag(parser)


class ModelOptions(PipelineOptions):
    """Flags of the jobs that run the exported model."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--model_dir", help="An export dir, or the base holding numeric "
                            "versions (the newest is used). Required.")
        parser.add_argument("--min_batch_size", type=int, default=32,
                            help="Smallest batch RunInference forms.")
        parser.add_argument("--max_batch_size", type=int, default=1024,
                            help="Largest batch RunInference forms.")
        parser.add_argument("--golden_set", help="Labelled raw rows (TFRecord of raw "
                            "tf.Examples, or CSV with a header) a newer model version must "
                            "predict before it serves. Default: the golden set each export "
                            "carries (training copies preprocess's eval sample).")
        parser.add_argument("--max_metric_regression", type=float,
                            default=DEFAULT_MAX_METRIC_REGRESSION,
                            help="How much worse than the serving version a newer one may "
                            "do on the golden set: RMSE relatively (0.05 = 5%% higher), "
                            "accuracy absolutely (0.05 = 5 points lower).")
        parser.add_argument("--slice_by", action="append",
                            help="COL[,COL...] (repeatable): metrics by slice of these columns "
                            "(a number by its train split's quintiles), with --evaluate_label "
                            "or a labelled stream, and in the model gate.")
        parser.add_argument("--max_slice_regression", type=float,
                            help="The gate also refuses a newer version when a --slice_by "
                            "slice with at least 30 golden rows is worse than the serving "
                            "version's by more than this (as --max_metric_regression). "
                            "Default: off.")
        parser.add_argument("--model_gate", default="on", choices=["on", "off"],
                            help="off: serve a newer version without checking it on a "
                            "golden set.")
        parser.add_argument("--shadow_model_dir", help="A second model (export or base of "
                            "versions) that scores the same rows; its outputs never reach the "
                            "prediction sinks, only a comparison (batch: summary.json's "
                            "`shadow`; streaming: a monitoring record per window).")
        parser.add_argument("--skew_report", default="on", choices=["on", "off"],
                            help="Compare what is served with the train split's statistics "
                            "(the export's): batch, summary.json's `skew`; streaming, a "
                            "monitoring record per window.")
        parser.add_argument("--skew_threshold", type=float, default=DEFAULT_SKEW_THRESHOLD,
                            help="A feature is flagged past this distance (Jensen-Shannon for "
                            "numbers, L-infinity for strings).")
        parser.add_argument("--output_table", help="Also write predictions to BigQuery "
                            "PROJECT:DATASET.TABLE (batch: the run date's day partition, "
                            "replaced on a re-run; streaming: appended).")


class ImageOptions(PipelineOptions):
    """Image normalisation flags: preprocess applies them to training images, and the
    prediction jobs apply the same ones to the images they score (no train/serve skew)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--max_side", type=int, default=ImageLimits.max_side,
                            help="images: longest side after resizing (aspect kept).")
        parser.add_argument("--jpeg_quality", type=int, default=ImageLimits.jpeg_quality,
                            help="images: JPEG quality of the re-encoded images.")
        parser.add_argument("--max_pixels", type=int, default=ImageLimits.max_pixels,
                            help="images: larger images are rejected (decompression bombs).")
        parser.add_argument("--max_image_bytes", type=int, default=ImageLimits.max_image_bytes,
                            help="images: larger files are rejected (image_too_large); only "
                                 "this much of a file is ever read.")


def gate_settings(o) -> Optional[tuple]:
    """The model gate's (golden set, tolerance, slice columns, slice tolerance), or None
    with --model_gate off."""
    return None if o.model_gate == "off" else (o.golden_set, o.max_metric_regression,
                                                 parse_slice_by(o.slice_by),
                                                 o.max_slice_regression)


def train_statistics(o, model_path: str, stats: Optional[dict], schema,
                     passthrough=()) -> Optional[dict]:
    """Of the export's train statistics (`stats`, load_train_statistics) those of the model's
    features, for the skew report (None: off, or none kept). The label, the key and
    passthrough columns are not features of what is served (serving rows carry no label: it
    would be flagged on every run)."""
    if o.skew_report == "off":
        return None
    if stats is None:
        logging.warning("model %s has no train statistics: no skew report", model_path)
        return None
    return feature_statistics(stats, schema, passthrough)


def check_model_options(job: str, o) -> None:
    if not 0 < o.skew_threshold <= 1:
        raise JobError(job, f"--skew_threshold must be in (0, 1], got {o.skew_threshold}")
    if not 0 <= o.max_metric_regression < 10:
        raise JobError(job, "--max_metric_regression must be >= 0 (and < 10), got "
                            f"{o.max_metric_regression}")
    if o.model_gate == "off" and o.golden_set:
        raise JobError(job, "--golden_set and --model_gate off contradict each other")
    if o.max_slice_regression is not None:
        if not 0 <= o.max_slice_regression < 10:
            raise JobError(job, "--max_slice_regression must be >= 0 (and < 10), got "
                                f"{o.max_slice_regression}")
        if not parse_slice_by(o.slice_by):
            raise JobError(job, "--max_slice_regression needs --slice_by: the columns to "
                                "slice the golden set by")
        if o.model_gate == "off":
            raise JobError(job, "--max_slice_regression and --model_gate off contradict "
                                "each other")


def check_slice_by(job: str, o, schema, train_stats: Optional[dict],
                   by_label: Optional[str] = None) -> Optional[Slicer]:
    """The launch step's check of --slice_by against the model (its columns, a number's train
    quintiles): the slicer of the metrics by `by_label` (None without one, or without
    --slice_by). Without a label, --slice_by serves the model gate only, so it needs
    --max_slice_regression."""
    columns = parse_slice_by(o.slice_by)
    if not columns:
        return None
    if not by_label and o.max_slice_regression is None:
        needs = ("--evaluate_label (metrics by slice) or " if job == "batch_predict" else "")
        raise JobError(job, f"--slice_by needs {needs}--max_slice_regression (the model gate "
                            "by slice)")
    try:
        slicer = Slicer.of(columns, schema, train_stats)
    except SliceError as e:
        raise JobError(job, str(e))
    return slicer if by_label else None


def check_golden_set(job: str, o, schema, train_stats: Optional[dict] = None) -> None:
    """The launch step's check of --golden_set: readable, bounded, with labelled rows whose
    labels the model could have learnt (regression: within one train-label range of the
    train split's [min, max], from the export's `train_stats` (load_train_statistics); one
    1e9 label would make every RMSE huge and let a much worse model pass the relative
    tolerance)."""
    if o.model_gate == "off" or not o.golden_set:
        return
    try:
        rows = read_golden(o.golden_set, schema)
    except GoldenSetError as e:
        raise JobError(job, str(e)) from None
    if not len(rows):
        raise JobError(job, f"the golden set {o.golden_set} has no row with a "
                            f"'{schema.label}' label")
    if schema.task != "regression":
        return
    labels = train_label_range(train_stats, schema.label)
    if labels is None:
        return
    low, high = labels
    span = max(high - low, abs(high), 1e-9)
    bound = (low - span, high + span)
    outside = [v for v in rows.labels if not bound[0] <= v <= bound[1]]
    if outside:
        raise JobError(job, f"the golden set {o.golden_set} has {len(outside)} label(s) far "
                            f"outside what the model was trained on (e.g. {outside[0]:g}; "
                            f"train labels {low:g}..{high:g}, allowed {bound[0]:g}.."
                            f"{bound[1]:g}): fix or drop those rows")


def resolve_shadow(job: str, o, schema) -> Optional[str]:
    """The launch step's check of --shadow_model_dir: its version, which must take only
    columns the serving model's rows have and solve the same task."""
    if not o.shadow_model_dir:
        return None
    try:
        path = versions.resolve_model_dir(o.shadow_model_dir)
        shadow = versions.load_raw_schema(path)
    except Exception as e:
        raise JobError(job, f"cannot read the shadow model at {o.shadow_model_dir}: "
                            f"{str(e).splitlines()[0][:300]}") from None
    missing = [c.name for c in shadow.serving_columns() if c.name not in schema.names]
    if missing:
        raise JobError(job, f"the shadow model needs columns the serving model's rows lack: "
                            f"{', '.join(missing)}")
    if shadow.task != schema.task:
        raise JobError(job, f"the shadow model is a {shadow.task} model, the serving one a "
                            f"{schema.task} model")
    return path


def check_image_options(job: str, o) -> None:
    if (o.max_side < 8 or not 1 <= o.jpeg_quality <= 100 or o.max_pixels < 1
            or o.max_image_bytes < 1):
        raise JobError(job, "need --max_side >= 8, 1 <= --jpeg_quality <= 100, --max_pixels >= 1, "
                            "--max_image_bytes >= 1")


def typed_args(cls: type, options: PipelineOptions, option_classes, **overrides):
    """A job's args dataclass (beam_jobs/args.py) filled from parsed PipelineOptions."""
    merged = merged_options(options, *option_classes)
    values = {f.name: getattr(merged, f.name) for f in dataclasses.fields(cls)}
    values.update(overrides)
    return cls(**values)


def check_output_table(job: str, o, options: PipelineOptions, file_loads: bool) -> None:
    """--output_table names a table BigQuery takes, with a project; batch writes (file loads)
    stage their files in Cloud Storage, so they need a gs:// --temp_location."""
    if not o.output_table:
        return
    try:
        project = parse_table(o.output_table)[0]
    except ValueError as e:
        raise JobError(job, f"--output_table: {e}")
    cloud = options.view_as(GoogleCloudOptions)
    if not (project or cloud.project):
        raise JobError(job, "--output_table without a project needs --project")
    if file_loads and not (cloud.temp_location or "").startswith("gs://"):
        raise JobError(job, "--output_table is loaded into BigQuery from files in Cloud "
                            "Storage: give --temp_location gs://BUCKET/tmp")


def check_record_bounds(job: str, o) -> None:
    if o.max_record_bytes < 1 or o.max_record_lines < 1:
        raise JobError(job, "need --max_record_bytes >= 1 and --max_record_lines >= 1")
    if o.stale_staging_hours < 0:
        raise JobError(job, "need --stale_staging_hours >= 0")
    if o.csv_block_mb < 0:
        raise JobError(job, "--csv_block_mb must be >= 0")


def merged_options(options: PipelineOptions, *classes):
    """One namespace with the attributes of several option views (see IOOptions)."""
    merged = {}
    for cls in classes:
        merged.update(options.view_as(cls).get_all_options(drop_default=False,
                                                           retain_unknown_options=False))
    return types.SimpleNamespace(**merged)


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help: the job's docstring as written, and each flag's default."""


def check_known_flags(job: str, args) -> None:
    """Refuses what no options class of Beam's or ours defines (Beam would drop it with one
    warning: a misspelt --golden_set switches a safety check off), naming the closest known
    flag. The parser is Beam's own, over every PipelineOptions subclass, as Beam parses."""
    import difflib

    from apache_beam.options.pipeline_options import _BeamArgumentParser
    parser = _BeamArgumentParser(allow_abbrev=False)
    classes = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        cls._add_argparse_args(parser)
    _, unknown = parser.parse_known_args(list(args))
    if not unknown:
        return
    known = [o for a in parser._actions for o in a.option_strings]
    flags = [a for a in unknown if a.startswith("-")]
    if not flags:
        raise JobError(job, f"unexpected argument {unknown[0]!r} (flags take the form "
                            "--name value or --name=value)")
    name = flags[0].split("=", 1)[0]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else " (--help lists the flags)"
    raise JobError(job, f"unknown flag {name}{hint}")


def job_options(argv, job: str, options_cls, doc: str, shared=(),
                local_runner: str = LOCAL_RUNNER) -> PipelineOptions:
    """PipelineOptions from argv; `--help` prints the job's options and the usual Beam ones.
    With no --runner (or DirectRunner), `local_runner` is named explicitly: no download.

    (Beam's own --help handling shows an empty parser, because options are parsed lazily.)
    """
    from apache_beam.options import pipeline_options as po
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        parser = argparse.ArgumentParser(
            prog=f"python -m beam_jobs.{job}", description=doc,
            formatter_class=HelpFormatter)
        group = parser.add_argument_group(f"{job} options")
        for cls in tuple(shared) + (options_cls,):
            cls._add_argparse_args(group)
        for cls in (po.StandardOptions, po.DirectOptions, po.GoogleCloudOptions,
                    po.WorkerOptions, po.SetupOptions):
            cls._add_argparse_args(parser.add_argument_group(f"Beam {cls.__name__}"))
        parser.print_help()
        raise SystemExit(0)
    check_known_flags(job, args)
    options = PipelineOptions(args)
    standard = options.view_as(StandardOptions)
    if standard.runner in (None, "DirectRunner"):
        standard.runner = local_runner
    check_dataflow_options(job, options)
    setup_logging(options.view_as(IOOptions).log_level)
    return options


def check_dataflow_options(job: str, options: PipelineOptions) -> None:
    """On Dataflow: a project, a region and Cloud Storage locations, said at launch in one
    line (without a project, the launch looked for credentials for about 2 minutes, then
    printed a traceback)."""
    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, (str, type(None))) else type(runner).__name__
    if "Dataflow" not in str(name or ""):
        return
    cloud = options.view_as(GoogleCloudOptions)
    missing = [f for f, v in (("--project", cloud.project), ("--region", cloud.region)) if not v]
    if missing:
        raise JobError(job, f"--runner {name} needs {' and '.join(missing)}")
    for flag, path in (("--temp_location", cloud.temp_location),
                       ("--staging_location", cloud.staging_location)):
        if path and not path.startswith("gs://"):
            raise JobError(job, f"{flag} {path}: Dataflow's workers read Cloud Storage; give "
                                "gs://BUCKET/...")
    if not (cloud.temp_location or cloud.staging_location):
        raise JobError(job, f"--runner {name} needs --temp_location gs://BUCKET/tmp")
