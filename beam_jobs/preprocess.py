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
import logging
import time
import uuid
from typing import Callable, Optional, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, SetupOptions

from beam_jobs import preprocess_steps as pp
from beam_jobs.args import PreprocessArgs
from beam_jobs.shared import cli, common_options, errors, local_runner, publish
from beam_jobs.shared.finalize import Finalize, OutputSpec
from preprocessing.accounting import counting
from preprocessing.accounting.rejects import WriteDeadLetters
from preprocessing.contract.schema import RAW_SCHEMA_FILE, Schema, SchemaError
from preprocessing.contract.split import SPLITS, parse_fractions
from preprocessing.files import filesys, reading
from preprocessing.files.tfrecords import GZIP_LEVEL
from preprocessing.images.checks import ImageLimits
from preprocessing.images.sources import ReadImageItems
from preprocessing.parsing import record_batches
from preprocessing.reference import golden
from preprocessing.reference.golden import GOLDEN_DIR
from preprocessing.reference.statistics import STATISTICS_FILE
from preprocessing.schema_inference.infer import image_schema, infer_from_profile, parse_csv_sample, report
from preprocessing.schema_inference.profile import profile_csv

JOB = "preprocess"
MAX_COLUMNS = 2000  # --max_columns: an inferred schema's columns (each costs ~5 MB at launch)
# What a run writes and publishes (replacing an earlier run's), and how it is counted.
OUTPUTS = OutputSpec(
    JOB, managed=("train", "eval", "test", "transform_fn", "transformed_metadata", "rejects",
                  GOLDEN_DIR, STATISTICS_FILE, RAW_SCHEMA_FILE),
    outputs={s: f"rows_{s}" for s in SPLITS}, outputs_key="splits", require=("train",),
    sized=tuple(f"{s}/*" for s in SPLITS))


class PreprocessOptions(PipelineOptions):
    """Preprocess flags; --input (CSV), --output and --key_column (hashed for the split; default:
    the spec's key, a column named key/id, or the whole record) come from common_options.IOOptions."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--format", default="csv", choices=["csv", "images"],
                            help="csv: raw CSV rows. images: --input is a labels CSV of "
                            "uri,label lines (relative uris resolve against its folder) or a "
                            "folder with one sub-folder of images per class.")
        parser.add_argument("--classes", default="",
                            help="images: comma-separated allowed labels; others are rejected "
                            "as unknown_label (default: any non-empty label).")
        parser.add_argument("--schema_spec", help="Declarative spec file (JSON or YAML). "
                            "Without it the schema is inferred from the header and a sample.")
        parser.add_argument("--label_column", help="Target column (needed when no spec is given). "
                            "Not --label: Beam's Dataflow options own that flag (job labels).")
        parser.add_argument("--module_file", help="TFX-style module file whose "
                            "preprocessing_fn replaces the one generated from the schema.")
        parser.add_argument("--split", default="0.8,0.1,0.1",
                            help="train,eval[,test] fractions (default 0.8,0.1,0.1).")
        parser.add_argument("--num_shards", type=int, default=0,
                            help="TFRecord shards per split; 0 lets the runner decide.")
        parser.add_argument("--rows_per_batch", type=int, default=2000,
                            help="Record-by-record reading (--csv_block_mb 0, or a delimiter "
                                 "other than a comma): rows per Arrow RecordBatch handed to "
                                 "tf.transform. Blocks give one RecordBatch per split each.")
        parser.add_argument("--gzip_level", type=int, default=GZIP_LEVEL,
                            help="zlib level of the gzip TFRecords, 1 (fastest, the default) "
                                 "to 9 (smallest).")
        parser.add_argument("--delimiter", default=",", help="CSV field delimiter.")
        parser.add_argument("--infer_scan_mb", type=int, default=0,
                            help="Schema inference profiles every row of every input file "
                            "at launch (types never narrower than the data). A bound in MB "
                            "of rows for very large inputs: past it numeric columns are "
                            "typed float, and text in them is rejected. 0: the whole input.")
        parser.add_argument("--max_columns", type=int, default=MAX_COLUMNS, help=(
            "Most columns a header may have when the schema is inferred: the transform's "
            "graph, and the launch's memory, grow with them (1,108 columns: 6.2 GB, 4 min; "
            "docs/performance.md). A longer header is refused at launch; a --schema_spec "
            "names its columns and is not bounded."))
        parser.add_argument("--golden_rows", type=int, default=golden.DEFAULT_ROWS, help=(
            "Labelled raw eval (else test) rows kept in OUTPUT/golden/: the golden set a new "
            f"model version must predict before it serves (0: none; at most {golden.MAX_ROWS:,}); "
            "as many train rows go to OUTPUT/golden/calibration.tfrecord (training.optimize)."))
        parser.add_argument("--tft_temp_dir", help="tf.transform's scratch directory "
                            "(default: a local temp dir on local runners, else temp_location).")


OPTION_CLASSES = (common_options.IOOptions, common_options.ImageOptions, PreprocessOptions)
REQUIRED_OPTIONS = ("input", "output")




def parse_args(options: PipelineOptions) -> PreprocessArgs:
    """The job's typed arguments, checked without any I/O (output without a trailing slash).
    Bad arguments fail here, before any file is listed or read."""
    o = common_options.typed_args(PreprocessArgs, options, OPTION_CLASSES)
    for name in REQUIRED_OPTIONS:
        if not getattr(o, name):
            raise errors.JobError(JOB, f"--{name} is required")
    try:
        parse_fractions(o.split)
    except ValueError as e:
        raise errors.JobError(JOB, str(e))
    common_options.check_image_options(JOB, o)
    common_options.check_record_bounds(JOB, o)
    if o.format == "csv" and not o.schema_spec and not o.label_column:
        raise errors.JobError(JOB, "give --schema_spec, or --label_column to infer the schema")
    if not 0 <= o.golden_rows <= golden.MAX_ROWS:
        raise errors.JobError(JOB, f"--golden_rows must be 0..{golden.MAX_ROWS}")
    if o.rows_per_batch < 1 or o.num_shards < 0 or o.infer_scan_mb < 0 or o.max_columns < 2:
        raise errors.JobError(JOB, "--rows_per_batch must be >= 1, --num_shards and "
                                    "--infer_scan_mb >= 0, --max_columns >= 2")
    if not 1 <= o.gzip_level <= 9:
        raise errors.JobError(JOB, f"--gzip_level must be 1..9, got {o.gzip_level}")
    if len(o.delimiter) != 1:
        raise errors.JobError(JOB, "--delimiter must be one character")
    return dataclasses.replace(o, output=o.output.rstrip("/"))


@dataclasses.dataclass(frozen=True)
class PreprocessConfig:
    """Everything `build_pipeline` reads, as plain values: `launch()` makes one from the
    command line (with I/O); a test can construct one directly."""
    args: PreprocessArgs
    schema: Schema
    preprocessing_fn: Callable
    patterns: Tuple[str, ...]           # inputs (CSV) or the image source's pattern
    staging: str                        # this run's staging folder under args.output
    tft_temp_dir: str
    stage_locally: bool = False         # write the transform locally, then copy (gs:// output)
    input_bytes: Optional[int] = None   # for progress ETAs
    columns_report: Optional[list] = None  # what schema inference decided, per column
    image_mode: Optional[str] = None    # images: "labels_csv" or "folders"
    classes: Tuple[str, ...] = ()       # images: --classes
    labels_header: Optional[tuple] = None

    @property
    def output(self) -> str:
        return self.args.output

    @property
    def fractions(self) -> Tuple[float, ...]:
        return tuple(parse_fractions(self.args.split))


# ---- launch-time resolution (fails fast, before any pipeline runs) -------------------------------
class _Launch:
    """The launch step: the checked arguments plus what only I/O can tell (the input files,
    the schema from a spec or the data, the preprocessing_fn, an output that can be written).
    `launch()` turns it into the plain PreprocessConfig the pipeline is built from."""

    def __init__(self, options: PipelineOptions):
        o = self.args = parse_args(options)
        self.output = o.output
        self.columns_report = None  # what schema inference decided, per column
        self.input_bytes = None
        self.image_mode, self.classes, self.labels_header = None, (), None  # images only
        if o.format == "images":
            self._init_images(o)
            return
        self.patterns = filesys.split_patterns(o.input)
        self.files = self._match(o.input, f"no files match --input {o.input}")
        self.input_bytes = filesys.total_size(self.patterns)
        # The header and sample come from the first readable file (a device or FIFO in the
        # glob is the pipeline's unreadable_file dead letter, not a launch failure).
        first = next((f for f in self.files if filesys.is_readable_input(f)), self.files[0])
        try:
            header, _ = parse_csv_sample(filesys.read_head(first), o.delimiter, 0)
        except SchemaError as e:
            raise errors.JobError(JOB, f"{first}: {e}")
        except Exception as e:
            raise errors.JobError(JOB, f"cannot read {first}: {str(e).splitlines()[0]}")
        self.schema = self._resolve_schema(o, header)
        self.preprocessing_fn = self._resolve_preprocessing_fn(o)
        cli.check_output_apart(JOB, self.patterns, self.output)
        cli.check_writable(JOB, self.output)

    def _init_images(self, o):
        from preprocessing.features.transform import make_preprocessing_fn
        self.schema = image_schema()
        self.preprocessing_fn = make_preprocessing_fn(self.schema)
        self.classes = tuple(c.strip() for c in o.classes.split(",") if c.strip())
        src = o.input.rstrip("/")
        if src.lower().endswith(".csv"):
            self.image_mode = "labels_csv"
            self.patterns = [src]
            self.files = self._match(src, f"no labels CSV at --input {src}")
            try:
                header = parse_csv_sample(filesys.read_head(self.files[0]), max_rows=1)[0]
            except SchemaError as e:
                raise errors.JobError(JOB, f"{self.files[0]}: {e}")
            # A header is recognised by its names; without one (tensorflow/tpu's
            # jpeg_to_tf_record.py format) every line is `path,label`.
            self.labels_header = None
            if not {"uri", "label"} <= set(header):
                if len(header) != 2:
                    raise errors.JobError(
                        JOB, f"{self.files[0]}: a labels CSV is `uri,label` lines, with or "
                             f"without a header naming uri and label; found {header}")
                self.labels_header = ("uri", "label")
        else:
            self.image_mode = "folders"
            self.patterns = [FileSystems.join(src, "*", "*")]
            self.files = self._match(src, f"no <class>/<image> files under --input {src}")
            self.labels_header = None
        cli.check_output_apart(JOB, self.patterns, self.output)
        cli.check_writable(JOB, self.output)

    def _match(self, shown: str, none_message: str):
        """The files matching self.patterns; fails fast when listing fails or finds none."""
        try:
            files = filesys.match_files(self.patterns)
        except Exception as e:
            raise errors.JobError(JOB, f"cannot list --input {shown}: {str(e).splitlines()[0]}")
        if not files:
            raise errors.JobError(JOB, none_message)
        return files

    def _profile(self, o):
        """Statistics of every column over the whole input (or --infer_scan_mb of it)."""
        readable = [f for f in self.files if filesys.is_readable_input(f)]
        progress = counting.Progress.of(JOB, "profiled for schema inference")
        prof = profile_csv([(f, lambda f=f: filesys.open_input(f)) for f in readable],
                           o.delimiter, (o.infer_scan_mb << 20) or None, progress.add)
        progress.show()
        if prof.note:
            logging.warning("preprocess: schema inference %s", prof.note)
        return prof

    def _resolve_schema(self, o, header) -> Schema:
        header = [h.strip() for h in header]
        try:
            if o.schema_spec:
                schema = Schema.load(o.schema_spec)
                if o.label_column and o.label_column != schema.label:
                    raise SchemaError(f"--label_column {o.label_column} differs from the "
                                      f"spec's label {schema.label}")
                if o.key_column and o.key_column != schema.key:
                    schema = schema.with_overrides(key=o.key_column)
            else:
                if len(header) > o.max_columns:  # before profiling a column of each
                    raise SchemaError(f"the header of {self.files[0]} has {len(header):,} "
                                      f"columns, over --max_columns {o.max_columns:,}: raise "
                                      f"it to infer a schema over them all, or give a "
                                      f"--schema_spec of the columns to use")
                if o.label_column not in header:  # before reading the whole input
                    raise SchemaError(f"label column '{o.label_column}' is not in the header "
                                      f"{header}")
                prof = self._profile(o)
                schema, decisions = infer_from_profile(prof, o.label_column, o.key_column)
                self.columns_report = report(prof, decisions, schema)
                for r in self.columns_report:
                    counting.emit(f"{JOB}: column {r['column']!r}: {r['role']}, {r['type']}, "
                                 f"{r['transform']} ({r['why']}; missing "
                                 f"{r['missing_rate']:.1%}, distinct {r['distinct']})")
                logging.info("Inferred schema (save it, edit it, pass it as --schema_spec):\n%s",
                             schema.dumps())
        except SchemaError as e:
            raise errors.JobError(JOB, str(e))
        if schema.label not in header:
            raise errors.JobError(JOB, f"label column '{schema.label}' is not in the header of "
                                       f"{self.files[0]}: {header}")
        missing = [c.name for c in schema.columns if c.required and c.name not in header]
        if missing:
            raise errors.JobError(JOB, f"columns {missing} of the spec are not in the header of "
                                       f"{self.files[0]}: {header}")
        return schema

    def _resolve_preprocessing_fn(self, o):
        from preprocessing.features.transform import load_module_preprocessing_fn, make_preprocessing_fn
        if not o.module_file:
            return make_preprocessing_fn(self.schema)
        try:
            return load_module_preprocessing_fn(o.module_file)
        except Exception as e:
            raise errors.JobError(JOB, f"--module_file {o.module_file}: {e}")


def launch(options: PipelineOptions) -> PreprocessConfig:
    """The launch step (all of the job's I/O checks, one-line errors) -> the job's config."""
    found = _Launch(options)
    o = found.args
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
    return PreprocessConfig(
        args=o, schema=found.schema, preprocessing_fn=found.preprocessing_fn,
        patterns=tuple(found.patterns), staging=publish.new_staging(found.output),
        tft_temp_dir=tft_temp, stage_locally=local and filesys.is_remote_path(found.output),
        input_bytes=found.input_bytes, columns_report=found.columns_report,
        image_mode=found.image_mode, classes=found.classes, labels_header=found.labels_header)


def build_pipeline(p: beam.Pipeline, cfg: PreprocessConfig):
    """Adds the preprocess graph to `p` (pure wiring: tests build it from a config they
    construct): everything is written under cfg.staging, and the Finalize step publishes it
    to --output."""
    import tensorflow_transform.beam as tft_beam

    schema, o, staging = cfg.schema, cfg.args, cfg.staging
    if o.format == "images":
        labels_csv = cfg.image_mode == "labels_csv"
        items, read_rejects, counts = p | "ReadImageItems" >> ReadImageItems(
            JOB, list_files=cfg.patterns if labels_csv else (),
            image_patterns=() if labels_csv else cfg.patterns, input_format="csv",
            label="label", header=cfg.labels_header)
        parsed = (items
                  | "Redistribute" >> beam.Reshuffle()
                  | "Batch" >> beam.BatchElements(min_batch_size=8, max_batch_size=64)
                  | "ProcessImages" >> beam.ParDo(pp.ProcessImages(
                      schema, cfg.fractions, cfg.classes, ImageLimits.of(o))).with_outputs(
                      "rejects", *SPLITS))
    else:
        # Blocks are parsed column-wise (fast_csv), which reads comma-separated CSV only.
        block_bytes = int(o.csv_block_mb * (1 << 20)) if o.delimiter == "," else 0
        chunks, read_rejects, counts = p | "ReadCsv" >> reading.ReadChunks(
            JOB, cfg.patterns, o.rows_per_batch, block_bytes=block_bytes or None,
            total_bytes=cfg.input_bytes, max_bytes=o.max_record_bytes,
            max_lines=o.max_record_lines)
        parsed = chunks | "ParseAndSplit" >> beam.ParDo(
            pp.ParseAndSplit(schema, cfg.fractions, o.delimiter,
                             (o.max_record_bytes, o.max_record_lines))).with_outputs(
            "rejects", counting.COUNTS, *SPLITS)
        counts = (counts, parsed[counting.COUNTS]) | "ReadCounts" >> beam.Flatten()
    dead = (read_rejects, parsed.rejects) | "AllRejects" >> beam.Flatten()
    written = [dead | "DeadLetters" >> WriteDeadLetters(
        FileSystems.join(staging, "rejects"))]
    written.append(p | "RawSchema" >> pp.WriteRawSchema(schema, staging))
    written += pp.write_references(parsed, schema, staging, cfg.fractions, o.golden_rows)
    tallies = [counts]

    tac = record_batches.tensor_adapter_config(schema)
    with tft_beam.Context(temp_dir=cfg.tft_temp_dir):
        transform_fn = ((parsed.train, tac)
                        | "Analyze" >> tft_beam.AnalyzeDataset(cfg.preprocessing_fn))
        for split, fraction in zip(SPLITS, cfg.fractions):
            if fraction <= 0:
                continue
            data, metadata = (((parsed[split], tac), transform_fn)
                              | f"Transform_{split}" >> tft_beam.TransformDataset(
                                  output_record_batches=True))
            counted = data | f"Count_{split}" >> beam.ParDo(
                pp.CountTransformed(split)).with_outputs(counting.COUNTS, main="batches")
            tallies.append(counted[counting.COUNTS])
            written.append((counted.batches, metadata)
                           | f"Write_{split}" >> pp.WriteSplit(staging, split, o.num_shards,
                                                                o.gzip_level))
        written.append(transform_fn
                       | "WriteTransform" >> pp.WriteTransformOutput(staging, cfg.stage_locally))
    info = {"job": JOB, "runner": type(p.runner).__name__, "input": o.input,
            "output": cfg.output, "split_fractions": list(cfg.fractions), "key": schema.key,
            "label": schema.label, "task": schema.task}
    if cfg.columns_report:
        info["inferred_columns"] = cfg.columns_report
    all_tallies = tuple(tallies) | "AllTallies" >> beam.Flatten()
    _ = (all_tallies, dead) | "Finalize" >> Finalize(
        OUTPUTS, staging, cfg.output, written, info, stale_staging_hours=o.stale_staging_hours,
        scratch=(cfg.tft_temp_dir,))
    return p


def run(argv=None, save_main_session=True, test_pipeline=None) -> Optional[dict]:
    """Runs the job; returns the run summary (None when only a template was built)."""
    options = common_options.job_options(argv, JOB, PreprocessOptions, __doc__,
                                  shared=OPTION_CLASSES[:-1])
    options.view_as(SetupOptions).save_main_session = save_main_session
    cfg = launch(options)
    template = getattr(options.view_as(GoogleCloudOptions), "template_location", None)
    p = test_pipeline or beam.Pipeline(options=options)
    build_pipeline(p, cfg)
    # Everything the job promises happens inside the pipeline (Finalize): here only wait.
    return cli.run_and_read_summary(p, template, cfg.output,
                                    cleanup=(cfg.staging, cfg.tft_temp_dir))


if __name__ == "__main__":
    cli.main(JOB, run)  # a finished job skips the ~2 s interpreter teardown
