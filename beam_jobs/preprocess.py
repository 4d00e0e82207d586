"""Preprocess raw CSV into sharded gzip TFRecords through one shared tf.transform graph.

Reads CSV (local paths or gs:// globs), parses rows against the schema (a spec file, a schema
inferred from the data, and optionally a TFX-style module file's `preprocessing_fn`), splits them
deterministically into train/eval/test by hashing the key, analyzes on train only, transforms
every split with the same transform_fn, and writes:

    OUTPUT/train|eval|test/part-*.tfrecord.gz    tf.Example of transformed features
    OUTPUT/transform_fn/, transformed_metadata/  the tf.transform output (TFTransformOutput)
    OUTPUT/raw_schema.json                       the raw schema serving needs
    OUTPUT/rejects/rejects-*.jsonl               dead letters: source, line, raw, reason, detail
    OUTPUT/summary.json                          counts per split, rejects by reason, timing

Locally, on the DirectRunner (one process: CSV blocks are parsed, encoded and compressed in
C++, and on 2 cores this measured faster than `--direct_num_workers 2
--direct_running_mode multi_processing`, whose workers exchange every batch with the runner):

    python -m beam_jobs.preprocess --input data/taxi.csv --output out/taxi \\
        --schema_spec preprocessing/specs/taxi.yaml

    python -m beam_jobs.preprocess --input 'data/*.csv' --output out/inferred --label_column fare_amount

On Dataflow:

    python -m beam_jobs.preprocess --runner DataflowRunner --project P --region us-central1 \\
        --temp_location gs://B/tmp --setup_file ./setup.py \\
        --input 'gs://B/raw/*.csv' --output gs://B/prep --schema_spec gs://B/taxi.yaml
"""
from __future__ import annotations

import dataclasses
import time
import uuid
from typing import NamedTuple, Optional, Sequence, Union

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, SetupOptions

from beam_jobs import preprocess_steps as pp
from beam_jobs.preprocess_config import (
    ImageSplits,
    PreprocessConfig,
    PreprocessSink,
    PreprocessSource,
)
from beam_jobs.preprocess_inputs import JOB, InputsFound
from beam_jobs.shared import cli, common_options, errors, local_runner, publish
from beam_jobs.shared.args import PreprocessArgs
from beam_jobs.shared.finalize import Finalize, OutputSpec
from preprocessing.accounting import counting
from preprocessing.accounting.rejects import WriteDeadLetters
from preprocessing.accounting.tagged import typed_outputs
from preprocessing.contract.schema import RAW_SCHEMA_FILE
from preprocessing.contract.split import SPLITS, parse_fractions
from preprocessing.files import filesys
from preprocessing.images.checks import ImageLimits
from preprocessing.parsing import record_batches
from preprocessing.reference.golden import GOLDEN_DIR
from preprocessing.reference.statistics import STATISTICS_FILE
from preprocessing.reports.preprocess_report import preprocess_report

# What a run writes and publishes (replacing an earlier run's), and how it is counted.
OUTPUTS = OutputSpec(
    JOB, managed=("train", "eval", "test", "transform_fn", "transformed_metadata", "rejects",
                  GOLDEN_DIR, STATISTICS_FILE, RAW_SCHEMA_FILE),
    outputs={s: f"rows_{s}" for s in SPLITS}, outputs_key="splits", require=("train",),
    sized=tuple(f"{s}/*" for s in SPLITS), report=preprocess_report)


PreprocessOptions = common_options.options_class(PreprocessArgs, "PreprocessOptions", __name__)

REQUIRED_OPTIONS = ("input", "output")




def parse_args(argv: Union[Sequence[str], PipelineOptions]) -> PreprocessArgs:
    """The job's typed arguments, checked without any I/O (output without a trailing slash).
    Bad arguments fail here, before any file is listed or read."""
    options = common_options.as_options(argv)
    o = common_options.typed_args(JOB, PreprocessArgs, options)
    for name in REQUIRED_OPTIONS:
        if not getattr(o, name):
            raise errors.JobError(JOB, f"--{name} is required")
    try:
        parse_fractions(o.split)
    except ValueError as e:
        raise errors.JobError(JOB, str(e))
    if o.format == "csv" and not o.schema_spec and not o.label_column:
        raise errors.JobError(JOB, "give --schema_spec, or --label_column to infer the schema")
    if o.format == "images" and o.task == "regression":
        raise errors.JobError(JOB, "--task regression: image labels are classes")
    return dataclasses.replace(o, output=o.output.rstrip("/"))


class PreprocessOutputs(NamedTuple):
    """What build_pipeline returns: each split's transformed (RecordBatch, passthrough)
    batches (None for a split of fraction 0), the dead letters, and the published summary."""
    train: beam.PCollection
    eval: Optional[beam.PCollection]
    test: Optional[beam.PCollection]
    dead_letters: beam.PCollection
    summary: beam.PCollection        # one: the published run's summary (Finalize)


def launch(o: PreprocessArgs, options: PipelineOptions) -> PreprocessConfig:
    """The launch step (all of the job's I/O checks, one-line errors) -> the job's config."""
    found = InputsFound(o)
    local = local_runner.is_local_runner(options)
    # tf.transform's scratch: a folder of this run's own, removed whatever the outcome.
    if o.tft_temp_dir or not local:
        base = o.tft_temp_dir or options.view_as(GoogleCloudOptions).temp_location
        if not base:
            raise errors.JobError(JOB, "--temp_location is required on remote runners")
        tft_temp = FileSystems.join(base, f"tft_tmp-{int(time.time())}-{uuid.uuid4().hex[:8]}")
    else:
        tft_temp = filesys.local_tmp_dir("tft_tmp_")
    publish.warn_if_shared(JOB, found.output, o.stale_staging_hours)
    images = ImageSplits(found.image_mode == "labels_csv", found.classes, found.labels_header,
                         ImageLimits.of(o)) if o.format == "images" else None
    return PreprocessConfig(
        found.schema, found.preprocessing_fn, tft_temp,
        PreprocessSource(o.input, tuple(found.patterns), tuple(parse_fractions(o.split)),
                         o.delimiter, o.rows_per_batch, filesys.megabytes(o.csv_block_mb),
                         o.max_record_bytes, o.max_record_lines, found.input_bytes, images,
                         found.encoding),
        PreprocessSink(found.output, publish.new_staging(found.output), o.num_shards,
                       o.gzip_level, o.golden_rows,
                       local and filesys.is_remote_path(found.output), o.stale_staging_hours),
        found.columns_report, local_runner.runner_name(options))


def build_pipeline(p: beam.Pipeline, cfg: PreprocessConfig) -> PreprocessOutputs:
    """Adds the preprocess graph to `p` (pure wiring: tests build it from a config they
    construct): everything is written under the sink's staging folder, and the Finalize step
    publishes it to its output."""
    import tensorflow_transform.beam as tft_beam

    schema, src, sink, staging = cfg.schema, cfg.source, cfg.sink, cfg.sink.staging
    if src.images:
        labels_csv = src.images.labels_csv
        parsed = p | "ReadImages" >> pp.ReadImageSplits(
            schema, src.fractions, src.images.limits, src.images.classes,
            list_files=src.patterns if labels_csv else (),
            image_patterns=() if labels_csv else src.patterns, header=src.images.labels_header)
    else:
        parsed = p | "ReadCsv" >> pp.ReadCsvSplits(
            schema, src.patterns, src.fractions, src.delimiter, src.rows_per_batch,
            block_bytes=src.block_bytes, total_bytes=src.total_bytes,
            record_bounds=(src.max_record_bytes, src.max_record_lines), encoding=src.encoding)
    dead = parsed.rejects
    written = [dead | "DeadLetters" >> WriteDeadLetters(
        FileSystems.join(staging, "rejects"))]
    written.append(p | "RawSchema" >> pp.WriteRawSchema(schema, staging))
    written += pp.write_references(parsed, schema, staging, src.fractions, sink.golden_rows)
    tallies, transformed = [parsed.counts], dict.fromkeys(SPLITS)

    tac = record_batches.tensor_adapter_config(schema)
    with tft_beam.Context(temp_dir=cfg.tft_temp_dir):
        transform_fn = ((parsed.train, tac)
                        | "Analyze" >> tft_beam.AnalyzeDataset(cfg.preprocessing_fn))
        for split, fraction in zip(SPLITS, src.fractions):
            if fraction <= 0:
                continue
            data, metadata = (((parsed.split(split), tac), transform_fn)
                              | f"Transform_{split}" >> tft_beam.TransformDataset(
                                  output_record_batches=True))
            counted = data | f"Count_{split}" >> typed_outputs(
                beam.ParDo(pp.CountTransformed(split)), pp.TRANSFORMED, counting.COUNTS,
                main="batches")
            tallies.append(counted[counting.COUNTS])
            transformed[split] = counted.batches
            written.append((counted.batches, metadata)
                           | f"Write_{split}" >> pp.WriteSplit(staging, split, sink.num_shards,
                                                                sink.gzip_level))
        written.append(transform_fn
                       | "WriteTransform" >> pp.WriteTransformOutput(staging, sink.stage_locally))
    info = {"job": JOB, "runner": cfg.runner, "input": src.input,
            "output": sink.output, "split_fractions": list(src.fractions), "key": schema.key,
            "label": schema.label, "task": schema.task}
    if cfg.columns_report:
        info["inferred_columns"] = cfg.columns_report
    all_tallies = tuple(tallies) | "AllTallies" >> beam.Flatten()
    summary = (all_tallies, dead) | "Finalize" >> Finalize(
        OUTPUTS, staging, sink.output, written, info,
        stale_staging_hours=sink.stale_staging_hours,
        scratch=(cfg.tft_temp_dir,))
    return PreprocessOutputs(transformed["train"], transformed["eval"], transformed["test"],
                             dead, summary)


def run(argv=None, save_main_session=True, test_pipeline=None) -> Optional[dict]:
    """Runs the job; returns the run summary (None when only a template was built)."""
    options = common_options.job_options(argv, JOB, PreprocessArgs, __doc__)
    options.view_as(SetupOptions).save_main_session = save_main_session
    cfg = launch(parse_args(options), options)
    template = getattr(options.view_as(GoogleCloudOptions), "template_location", None)
    p = test_pipeline or beam.Pipeline(options=options)
    build_pipeline(p, cfg)
    # Everything the job promises happens inside the pipeline (Finalize): here only wait.
    return cli.run_and_read_summary(p, template, cfg.sink.output,
                                    cleanup=(cfg.sink.staging, cfg.tft_temp_dir))


if __name__ == "__main__":
    cli.main(JOB, run)  # a finished job skips the ~2 s interpreter teardown
