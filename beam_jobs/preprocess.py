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

Locally, on the DirectRunner (add `--direct_num_workers 2 --direct_running_mode multi_processing`
to use two cores):

    python -m beam_jobs.preprocess --input data/taxi.csv --output out/taxi \\
        --schema_spec preprocessing/specs/taxi.yaml

    python -m beam_jobs.preprocess --input 'data/*.csv' --output out/inferred --label_column fare_amount

On Dataflow:

    python -m beam_jobs.preprocess --runner DataflowRunner --project P --region us-central1 \\
        --temp_location gs://B/tmp --setup_file ./setup.py \\
        --input 'gs://B/raw/*.csv' --output gs://B/prep --schema_spec gs://B/taxi.yaml
"""
from __future__ import annotations

import logging
import os
import uuid
from typing import Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import (GoogleCloudOptions, PipelineOptions,
                                                  SetupOptions)

from beam_jobs import common, runtime
from beam_jobs.finalize import STAGING_PREFIX, Finalize
from preprocessing import parsing
from preprocessing.schema import Schema, SchemaError, infer_schema, parse_csv_sample
from preprocessing.split import SPLITS, boundaries, parse_fractions, split_index

JOB = "preprocess"
# What a run publishes (replacing an earlier run's): see beam_jobs/finalize.py.
OUTPUT_NAMES = ("train", "eval", "test", "transform_fn", "transformed_metadata", "rejects",
                "raw_schema.json")
RAW_SCHEMA_FILE = "raw_schema.json"


class PreprocessOptions(PipelineOptions):
    """Preprocess flags; --input (CSV), --output and --key_column (hashed for the split; default:
    the spec's key, a column named key/id, or the whole record) come from runtime.IOOptions."""

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
                            help="Rows per Arrow RecordBatch handed to tf.transform.")
        parser.add_argument("--delimiter", default=",", help="CSV field delimiter.")
        parser.add_argument("--sample_rows", type=int, default=10_000,
                            help="Rows sampled from the first file for schema inference.")
        parser.add_argument("--tft_temp_dir", help="tf.transform's scratch directory "
                            "(default: a local temp dir on local runners, else temp_location).")


OPTION_CLASSES = (runtime.IOOptions, runtime.ImageOptions, PreprocessOptions)
REQUIRED_OPTIONS = ("input", "output")


# ---- launch-time resolution (fails fast, before any pipeline runs) -------------------------------
class JobConfig:
    """Everything resolved from the options before the pipeline is built."""

    def __init__(self, options: PipelineOptions):
        o = runtime.merged_options(options, *OPTION_CLASSES)
        if not o.input:
            raise runtime.JobError(JOB, "--input is required")
        if not o.output:
            raise runtime.JobError(JOB, "--output is required")
        try:
            self.fractions = parse_fractions(o.split)
        except ValueError as e:
            raise runtime.JobError(JOB, str(e))
        if o.format == "images":
            self._init_images(o)
            return
        if not o.schema_spec and not o.label_column:
            raise runtime.JobError(JOB, "give --schema_spec, or --label_column to infer the schema")
        if o.rows_per_batch < 1 or o.num_shards < 0 or o.sample_rows < 1:
            raise runtime.JobError(JOB, "--rows_per_batch and --sample_rows must be >= 1, "
                                       "--num_shards >= 0")
        if len(o.delimiter) != 1:
            raise runtime.JobError(JOB, "--delimiter must be one character")
        self.patterns = runtime.split_patterns(o.input)
        self.files = self._match(o.input, f"no files match --input {o.input}")
        self.input_bytes = runtime.total_size(self.files)
        self.output = o.output.rstrip("/")
        self.options = o
        try:
            header, sample = parse_csv_sample(runtime.read_head(self.files[0]), o.delimiter,
                                              o.sample_rows)
        except SchemaError as e:
            raise runtime.JobError(JOB, f"{self.files[0]}: {e}")
        except Exception as e:
            raise runtime.JobError(JOB, f"cannot read {self.files[0]}: {str(e).splitlines()[0]}")
        self.schema = self._resolve_schema(o, header, sample)
        self.preprocessing_fn = self._resolve_preprocessing_fn(o)
        runtime.check_writable(JOB, self.output)

    def _init_images(self, o):
        from preprocessing.schema import image_schema
        from preprocessing.transform import make_preprocessing_fn
        runtime.check_image_options(JOB, o)
        self.options = o
        self.output = o.output.rstrip("/")
        self.schema = image_schema()
        self.preprocessing_fn = make_preprocessing_fn(self.schema)
        self.classes = tuple(c.strip() for c in o.classes.split(",") if c.strip())
        src = o.input.rstrip("/")
        if src.lower().endswith(".csv"):
            self.image_mode = "labels_csv"
            self.patterns = [src]
            self.files = self._match(src, f"no labels CSV at --input {src}")
            header = [h.strip() for h in (parse_csv_sample(runtime.read_head(self.files[0]))[0])]
            if not {"uri", "label"} <= set(header):
                raise runtime.JobError(JOB, f"{self.files[0]} needs a header with uri and label, "
                                           f"found {header}")
        else:
            self.image_mode = "folders"
            self.patterns = [FileSystems.join(src, "*", "*")]
            self.files = self._match(src, f"no <class>/<image> files under --input {src}")
        runtime.check_writable(JOB, self.output)

    def _match(self, shown: str, none_message: str):
        """The files matching self.patterns; fails fast when listing fails or finds none."""
        try:
            files = runtime.match_files(self.patterns)
        except Exception as e:
            raise runtime.JobError(JOB, f"cannot list --input {shown}: {str(e).splitlines()[0]}")
        if not files:
            raise runtime.JobError(JOB, none_message)
        return files

    def _resolve_schema(self, o, header, sample) -> Schema:
        header = [h.strip() for h in header]
        try:
            if o.schema_spec:
                schema = Schema.load(o.schema_spec)
                if o.label_column and o.label_column != schema.label:
                    raise SchemaError(f"--label_column {o.label_column} differs from the spec's label {schema.label}")
                if o.key_column and o.key_column != schema.key:
                    schema = schema.with_overrides(key=o.key_column)
            else:
                schema = infer_schema(header, sample, label=o.label_column, key=o.key_column)
                logging.info("Inferred schema (save it, edit it, pass it as --schema_spec):\n%s",
                             schema.dumps())
        except SchemaError as e:
            raise runtime.JobError(JOB, str(e))
        if schema.label not in header:
            raise runtime.JobError(JOB, f"label column '{schema.label}' is not in the header of "
                                       f"{self.files[0]}: {header}")
        missing = [c.name for c in schema.columns if c.required and c.name not in header]
        if missing:
            raise runtime.JobError(JOB, f"columns {missing} of the spec are not in the header of "
                                       f"{self.files[0]}: {header}")
        return schema

    def _resolve_preprocessing_fn(self, o):
        from preprocessing.transform import load_module_preprocessing_fn, make_preprocessing_fn
        if not o.module_file:
            return make_preprocessing_fn(self.schema)
        try:
            return load_module_preprocessing_fn(o.module_file)
        except Exception as e:
            raise runtime.JobError(JOB, f"--module_file {o.module_file}: {e}")


# ---- pipeline pieces ---------------------------------------------------------------------------
class ParseAndSplit(beam.DoFn):
    """CSV chunk -> one RecordBatch per split, and dead letters for rows that do not parse."""

    def __init__(self, schema: Schema, fractions, delimiter: str = ","):
        self.schema = schema
        self.bounds = boundaries(fractions)
        self.delimiter = delimiter
        self.key_index = schema.names.index(schema.key) if schema.key else None
        self.reject_counters = {r: Metrics.counter(JOB, f"rejected_{r}") for r in parsing.REASONS}

    def setup(self):
        self._parsers = {}

    def process(self, chunk):
        path, _, header, records = chunk
        parser = self._parsers.get(header)
        if parser is None:
            parser = self._parsers[header] = parsing.RowParser(self.schema, header)
        per_split = [[] for _ in SPLITS]
        fields_list = parsing.split_fields([text for _, text in records], self.delimiter)
        for (line_no, text), fields in zip(records, fields_list):
            try:
                values = parser.parse(fields)
            except parsing.RowError as e:
                self.reject_counters[e.reason].inc()
                yield beam.pvalue.TaggedOutput(
                    "rejects", common.dead_letter(JOB, path, line_no, text, e.reason, e.detail))
                continue
            key = values[self.key_index] if self.key_index is not None else text
            per_split[split_index(key, self.bounds)].append(values)
        for name, rows in zip(SPLITS, per_split):
            if rows:
                yield beam.pvalue.TaggedOutput(name, parsing.rows_to_record_batch(rows, self.schema))


class LabelsCsvItems(beam.DoFn):
    """Labels-CSV chunks -> (source, line, uri, label) items; bad lines are dead-lettered."""

    def __init__(self):
        self.wrong = Metrics.counter(JOB, "rejected_wrong_column_count")

    def process(self, chunk):
        path, _, header, records = chunk
        pos = {h: i for i, h in enumerate(header)}
        base = path.rsplit("/", 1)[0]
        for (line, text), fields in zip(records, parsing.split_fields([t for _, t in records])):
            if fields is None or len(fields) != len(header):
                self.wrong.inc()
                yield beam.pvalue.TaggedOutput("rejects", common.dead_letter(
                    JOB, path, line, text, "wrong_column_count",
                    f"expected {len(header)} fields ({', '.join(header)})"))
                continue
            uri = common.resolve_uri(base, fields[pos["uri"]].strip())
            yield (path, line, uri, fields[pos["label"]].strip())


class ProcessImages(beam.DoFn):
    """Batches of (source, line, uri, label) -> normalised images as RecordBatches per split,
    and dead letters with the reason for every image that cannot be used."""

    def __init__(self, schema: Schema, fractions, classes, max_side, quality, max_pixels):
        from preprocessing.images import IMAGE_REASONS
        self.schema = schema
        self.bounds = boundaries(fractions)
        self.classes = set(classes)
        self.kw = {"max_side": max_side, "quality": quality, "max_pixels": max_pixels}
        self.reject_counters = {r: Metrics.counter(JOB, f"rejected_{r}") for r in IMAGE_REASONS}

    def process(self, items):
        from apache_beam.io.filesystem import CompressionTypes
        from preprocessing.images import ImageError, normalize_image
        per_split = [[] for _ in SPLITS]
        for source, line, uri, label in items:
            try:
                if not label or (self.classes and label not in self.classes):
                    raise ImageError("unknown_label", f"label {label!r} is not a known class")
                try:
                    with FileSystems.open(uri, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                        data = f.read()
                except Exception as e:
                    raise ImageError("unreadable_uri", f"{type(e).__name__}: "
                                     f"{str(e).splitlines()[0][:200] if str(e) else ''}") from None
                img = normalize_image(data, uri, **self.kw)
            except ImageError as e:
                self.reject_counters[e.reason].inc()
                yield beam.pvalue.TaggedOutput("rejects", common.dead_letter(
                    JOB, source, line, uri, e.reason, e.detail))
                continue
            per_split[split_index(uri, self.bounds)].append(
                (uri, img.jpeg, img.height, img.width, label))
        for name, rows in zip(SPLITS, per_split):
            if rows:
                yield beam.pvalue.TaggedOutput(name, parsing.rows_to_record_batch(rows, self.schema))


class ImageFileItems(beam.DoFn):
    """Matched image files -> (source, line, uri, label) items (the label: the file's folder)."""

    def __init__(self):
        self.tally = runtime.Tally(JOB)

    def process(self, metadata):
        yield self.tally("rows_read")
        yield (metadata.path, None, metadata.path, metadata.path.rstrip("/").split("/")[-2])


class ReadImageItems(beam.PTransform):
    """--input (a labels CSV, or a folder of class sub-folders) -> (source, line, uri, label)
    items, rejects, and (name, n) tallies."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def expand(self, pbegin):
        cfg = self.cfg
        if cfg.image_mode == "labels_csv":
            chunks, rejects, counts = pbegin | "ReadLabels" >> common.ReadChunks(
                JOB, cfg.patterns, 500)
            items = chunks | "LabelItems" >> beam.ParDo(LabelsCsvItems()).with_outputs(
                "rejects", main="items")
            return (items.items,
                    (rejects, items.rejects) | "LabelRejects" >> beam.Flatten(), counts)
        items = (pbegin | "Folders" >> beam.Create(cfg.patterns)
                 | "MatchImages" >> beam.io.fileio.MatchAll()
                 | "Items" >> beam.ParDo(ImageFileItems()).with_outputs(runtime.COUNTS,
                                                                       main="items"))
        return items.items, pbegin | "NoRejects" >> beam.Create([]), items[runtime.COUNTS]


class WriteTransformOutput(beam.PTransform):
    """Writes transform_fn/ and transformed_metadata/ under the output directory.

    tf.transform writes through TensorFlow's filesystem. Where that cannot reach the output
    (a local run writing to gs://, e.g. against a GCS emulator), it stages locally and copies
    with Beam's filesystem, which honours STORAGE_EMULATOR_HOST.
    """

    def __init__(self, output: str, stage_locally: bool):
        super().__init__()
        self.output = output
        self.stage_locally = stage_locally

    def _extract_input_pvalues(self, transform_fn):
        # transform_fn is (saved model dir PCollection, metadata): only the first is a pvalue.
        return transform_fn, [transform_fn[0]]

    def expand(self, transform_fn):
        import tensorflow_transform.beam as tft_beam
        if not self.stage_locally:
            return transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(self.output)
        staging = runtime.local_tmp_dir("tft_stage_")
        output = self.output

        def publish(_):
            for name in ("transform_fn", "transformed_metadata"):
                runtime.copy_local_tree(os.path.join(staging, name), FileSystems.join(output, name))

        return (transform_fn
                | "WriteTransformFnLocally" >> tft_beam.WriteTransformFn(staging)
                | "PublishTransformFn" >> beam.Map(publish))


class WriteSplit(beam.PTransform):
    def __init__(self, output: str, split: str, num_shards: int):
        super().__init__()
        self.prefix = FileSystems.join(output, split, "part")
        self.num_shards = num_shards

    def expand(self, examples):
        return (examples
                | "Write" >> beam.io.WriteToTFRecord(
                    self.prefix, file_name_suffix=".tfrecord.gz", num_shards=self.num_shards,
                    compression_type=beam.io.filesystem.CompressionTypes.GZIP))


class CountTransformed(beam.DoFn):
    """Transformed (RecordBatch, passthrough) pairs pass through; their rows are tallied as
    rows_<split> (what is written: encoding is one tf.Example per row) and shown as progress."""

    def __init__(self, split: str):
        self.split = split
        self.tally = runtime.Tally(JOB)

    def process(self, element):
        n = element[0].num_rows
        runtime.Progress.of(JOB, "transformed").add(n)
        yield self.tally(f"rows_{self.split}", n)
        yield element


class WriteRawSchema(beam.PTransform):
    """raw_schema.json (the raw schema serving needs), written by the pipeline itself."""

    def __init__(self, schema: Schema, directory: str):
        super().__init__()
        self.text = schema.dumps()
        self.prefix = FileSystems.join(directory, RAW_SCHEMA_FILE[:-len(".json")])

    def expand(self, pbegin):
        return (pbegin | "SchemaText" >> beam.Create([self.text])
                | "WriteSchema" >> beam.io.WriteToText(self.prefix, file_name_suffix=".json",
                                                       shard_name_template="",
                                                       append_trailing_newlines=False))


def build_pipeline(p: beam.Pipeline, cfg: JobConfig, tft_temp_dir: str, stage_locally: bool,
                   staging: str):
    """Adds the preprocess graph to `p` (tests build it without running it): everything is
    written under `staging`, and the Finalize step publishes it to --output."""
    import tensorflow_transform.beam as tft_beam

    schema, o = cfg.schema, cfg.options
    if o.format == "images":
        items, read_rejects, counts = p | "ReadImageItems" >> ReadImageItems(cfg)
        parsed = (items
                  | "Redistribute" >> beam.Reshuffle()
                  | "Batch" >> beam.BatchElements(min_batch_size=8, max_batch_size=64)
                  | "ProcessImages" >> beam.ParDo(ProcessImages(
                      schema, cfg.fractions, cfg.classes, o.max_side, o.jpeg_quality,
                      o.max_pixels)).with_outputs("rejects", *SPLITS))
    else:
        chunks, read_rejects, counts = p | "ReadCsv" >> common.ReadChunks(
            JOB, cfg.patterns, o.rows_per_batch, total_bytes=cfg.input_bytes)
        parsed = chunks | "ParseAndSplit" >> beam.ParDo(
            ParseAndSplit(schema, cfg.fractions, o.delimiter)).with_outputs("rejects", *SPLITS)
    rejects = (read_rejects, parsed.rejects) | "AllRejects" >> beam.Flatten()
    written = [rejects | "DeadLetters" >> common.WriteDeadLetters(
        FileSystems.join(staging, "rejects"))]
    written.append(p | "RawSchema" >> WriteRawSchema(schema, staging))
    tallies = [counts]

    tac = parsing.tensor_adapter_config(schema)
    with tft_beam.Context(temp_dir=tft_temp_dir):
        transform_fn = ((parsed.train, tac)
                        | "Analyze" >> tft_beam.AnalyzeDataset(cfg.preprocessing_fn))
        for split, fraction in zip(SPLITS, cfg.fractions):
            if fraction <= 0:
                continue
            data, metadata = (((parsed[split], tac), transform_fn)
                              | f"Transform_{split}" >> tft_beam.TransformDataset(
                                  output_record_batches=True))
            counted = data | f"Count_{split}" >> beam.ParDo(
                CountTransformed(split)).with_outputs(runtime.COUNTS, main="batches")
            tallies.append(counted[runtime.COUNTS])
            written.append((counted.batches, metadata)
                           | f"Encode_{split}" >> tft_beam.EncodeTransformedDataset()
                           | f"Write_{split}" >> WriteSplit(staging, split, o.num_shards))
        written.append(transform_fn
                       | "WriteTransform" >> WriteTransformOutput(staging, stage_locally))
    info = {"job": JOB, "runner": type(p.runner).__name__, "input": o.input,
            "output": cfg.output, "split_fractions": list(cfg.fractions), "key": schema.key,
            "label": schema.label, "task": schema.task}
    all_tallies = tuple(tallies) | "AllTallies" >> beam.Flatten()
    _ = (all_tallies, rejects) | "Finalize" >> Finalize(
        JOB, staging, cfg.output, written, OUTPUT_NAMES, info,
        outputs={s: f"rows_{s}" for s in SPLITS}, outputs_key="splits")
    return p


def run(argv=None, save_main_session=True, test_pipeline=None) -> Optional[dict]:
    """Runs the job; returns the run summary (None when only a template was built)."""
    options = runtime.job_options(argv, JOB, PreprocessOptions, __doc__,
                                  shared=OPTION_CLASSES[:-1])
    options.view_as(SetupOptions).save_main_session = save_main_session
    cfg = JobConfig(options)
    local = runtime.is_local_runner(options)
    template = getattr(options.view_as(GoogleCloudOptions), "template_location", None)
    o = cfg.options
    if o.tft_temp_dir:
        tft_temp = o.tft_temp_dir
    elif local:
        tft_temp = runtime.local_tmp_dir("tft_tmp_")
    else:
        temp_location = options.view_as(GoogleCloudOptions).temp_location
        if not temp_location:
            raise runtime.JobError(JOB, "--temp_location is required on remote runners")
        tft_temp = FileSystems.join(temp_location, "tft_tmp")
    stage_locally = local and runtime.is_remote_path(cfg.output)
    staging = FileSystems.join(cfg.output, STAGING_PREFIX + uuid.uuid4().hex[:12])
    p = test_pipeline or beam.Pipeline(options=options)
    build_pipeline(p, cfg, tft_temp, stage_locally, staging)
    result = p.run()
    # Everything the job promises happens inside the pipeline (Finalize): here only wait.
    return runtime.wait_and_read_summary(result, template, cfg.output)


if __name__ == "__main__":
    runtime.setup_logging()
    run()
