"""The options every job shares (PipelineOptions subclasses), the typed configs made from
them (checked without I/O), and parsing a job's command line."""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import logging
import sys
from typing import Optional, Sequence, Union

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions

from beam_jobs.shared import beam_lookups
from beam_jobs.shared.args import JOB_ARGS, CsvArgs, ImageArgs, IOArgs, ModelArgs
from beam_jobs.shared.cli import setup_logging
from beam_jobs.shared.errors import JobError
from beam_jobs.shared.local_runner import LOCAL_RUNNER
from inference.model import versions
from inference.model.gate import GoldenSetError, read_golden
from inference.outputs.bigquery_client import parse_table
from inference.skew import feature_statistics, train_label_range
from preprocessing import flags
from preprocessing.reference.slices import SliceError, Slicer, parse_slice_by


def options_class(args_cls: type, name: str, module: str = __name__) -> type:
    """The PipelineOptions subclass of the flags `args_cls` itself declares (beam_jobs/shared/args.py),
    named `module.name` where it is bound. Beam registers every subclass in one parser, so a
    flag is defined once: a job's class holds its own flags, and the shared ones are the
    four below."""
    def _add_argparse_args(cls, parser):
        flags.add_arguments(parser, args_cls, own=True)
    return type(name, (PipelineOptions,), {
        "__module__": module, "__qualname__": name, "__doc__": args_cls.__doc__,
        "_add_argparse_args": classmethod(_add_argparse_args)})


IOOptions = options_class(IOArgs, "IOOptions")
CsvOptions = options_class(CsvArgs, "CsvOptions")
ModelOptions = options_class(ModelArgs, "ModelOptions")
ImageOptions = options_class(ImageArgs, "ImageOptions")  # images: the same bounds train and serve


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
    """What the model flags need of each other (their own ranges: flags.problem)."""
    if o.model_gate == "off" and o.golden_set:
        raise JobError(job, "--golden_set and --model_gate off contradict each other")
    if o.max_slice_regression is not None:
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


def as_options(argv: Union[Sequence[str], PipelineOptions]) -> PipelineOptions:
    """A job's command line as PipelineOptions (what parse_args reads; options as they are)."""
    return argv if isinstance(argv, PipelineOptions) else PipelineOptions(list(argv))


def typed_args(job: str, cls: type, options: PipelineOptions):
    """A job's args dataclass (beam_jobs/shared/args.py) from parsed PipelineOptions, each flag
    within its declared range (else one line naming it)."""
    o = flags.from_mapping(cls, options.get_all_options(drop_default=False))
    said = flags.problem(o)
    if said:
        raise JobError(job, said)
    return o


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


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help: the job's docstring as written, and each flag's default."""


def check_known_flags(job: str, args, args_cls: Optional[type] = None) -> None:
    """Refuses what no options class of Beam's or ours defines (Beam would drop it with one
    warning: a misspelt --golden_set switches a safety check off), naming the closest known
    flag, a word that is no flag's value, and (given the job's `args_cls`) a flag of another
    of our jobs: Beam registers every job's options in one parser, so `--delimiter` given
    to stream_predict parsed, and was ignored."""
    if args_cls is not None:
        _refuse_other_jobs_flags(job, args, args_cls)
    options = PipelineOptions(list(args))
    beams = logging.getLogger("apache_beam.options.pipeline_options")
    level = beams.level
    beams.setLevel(logging.ERROR)  # its "Discarding unparseable args": said below, in one line
    try:
        known = options.get_all_options(drop_default=False)
        unknown = [name for name in options.get_all_options(drop_default=False,
                                                            retain_unknown_options=True)
                   if name not in known]
    finally:
        beams.setLevel(level)
    stray = _stray_word(args, known)
    if stray is not None and not unknown:
        raise JobError(job, f"unexpected argument {stray!r} (flags take the form "
                            "--name value or --name=value)")
    if not unknown:
        return
    first = next((a.split("=", 1)[0] for a in args if a.startswith("-")
                  and a.lstrip("-").split("=", 1)[0].replace("-", "_") in unknown),
                 "--" + unknown[0])
    close = difflib.get_close_matches(first, [f"--{k}" for k in known], n=1)
    hint = f" (did you mean {close[0]}?)" if close else " (--help lists the flags)"
    raise JobError(job, f"unknown flag {first}{hint}")


def _refuse_other_jobs_flags(job: str, args, args_cls: type) -> None:
    mine = {f.name for f in dataclasses.fields(args_cls)}
    others: dict = {}
    for name, cls in JOB_ARGS.items():
        for f in dataclasses.fields(cls):
            if f.name not in mine:
                others.setdefault(f.name, []).append(name)
    for arg in args:
        name = arg.split("=", 1)[0][2:].replace("-", "_") if arg.startswith("--") else None
        if name in others:
            raise JobError(job, f"--{name} is not a flag of {job} (only of "
                                f"{', '.join(others[name])})")


def _stray_word(args, known: dict):
    """The first argument that is neither a flag nor the value of the flag before it (a flag
    whose default is a bool takes no value)."""
    takes_value = False
    for a in args:
        if a.startswith("-"):
            name = a.lstrip("-").split("=", 1)[0]
            takes_value = "=" not in a and not isinstance(known.get(name), bool)
        elif takes_value:
            takes_value = False
        else:
            return a
    return None


def job_options(argv, job: str, args_cls: type, doc: str, shared_help: bool = True,
                local_runner: str = LOCAL_RUNNER) -> PipelineOptions:
    """PipelineOptions from argv; `--help` prints the job's flags (`args_cls`'s fields; with
    `shared_help` off, only those it declares itself) and the usual Beam ones. With no
    --runner (or DirectRunner), `local_runner` is named explicitly: no download.

    (Beam's own --help handling shows an empty parser, because options are parsed lazily.)
    """
    from apache_beam.options import pipeline_options as po
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        parser = argparse.ArgumentParser(
            prog=f"python -m beam_jobs.{job}", description=doc,
            formatter_class=HelpFormatter)
        flags.add_arguments(parser.add_argument_group(f"{job} options"), args_cls,
                            own=not shared_help)
        for cls in (po.StandardOptions, po.DirectOptions, po.GoogleCloudOptions,
                    po.WorkerOptions, po.SetupOptions):
            cls._add_argparse_args(parser.add_argument_group(f"Beam {cls.__name__}"))
        parser.print_help()
        raise SystemExit(0)
    check_known_flags(job, args, args_cls)
    beam_lookups.install()  # before the job's graph is built
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
