"""Batch (bounded) prediction with RunInference over the model `training.task` exports.

Inputs: CSV with the raw columns (label optional, extra columns allowed), JSON lines (an object
per line, or `{"instances": [...]}`), or TFRecords of raw tf.Example; local or gs://.
For an image model: image files (a glob; class folders give labels), CSVs with a `uri` column,
JSON lines with a `uri` or base64 bytes (`{"image_bytes": {"b64": ...}}`), mixed freely; each
image is normalised as preprocess does (inference/images.py) and scored by class.
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

import datetime
import functools
import json
import logging
import math
import time
import uuid
from typing import Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import RunInference
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, SetupOptions

from beam_jobs import common, runtime
from beam_jobs.finalize import STAGING_PREFIX, Finalize, summary_line
from inference import model_handler as mh
from inference.inputs import ServingParser
from inference.outputs import PredictionBlock
from preprocessing import fast_csv, parsing
from preprocessing.schema import Schema

JOB = "batch_predict"
REQUIRED_OPTIONS = ("model_dir", "input", "output")
# What a run publishes (replacing an earlier run's): see beam_jobs/finalize.py.
OUTPUT_NAMES = ("predictions-*", "rejects", "metrics.json")


class BatchPredictOptions(PipelineOptions):
    """Batch-prediction flags; --input/--output ({date} is replaced by --run_date), --key_column
    (rows without a key are keyed file:line) and --model_dir/--min_batch_size/--max_batch_size
    come from runtime.IOOptions and runtime.ModelOptions."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--input_format", default="auto",
                            choices=["auto", "csv", "jsonl", "tfrecord"],
                            help="auto: by extension (.csv, .json/.jsonl, .tfrecord; +.gz).")
        parser.add_argument("--output_format", default="jsonl", choices=["jsonl", "csv", "both"])
        parser.add_argument("--run_date", help="YYYY-MM-DD for {date} (default: today, UTC).")
        parser.add_argument("--passthrough_columns", default="",
                            help="Comma-separated input columns copied to each prediction.")
        parser.add_argument("--evaluate_label", help="Label column: write metrics.json "
                            "(RMSE/MAE or accuracy) over the rows that have it.")
        parser.add_argument("--rows_per_chunk", type=int,
                            help="JSON lines / TFRecord records handed from the reader to "
                                 "parsing at a time (default: --max_batch_size).")
        parser.add_argument("--csv_block_mb", type=float, default=2.0,
                            help="CSV files are read in blocks of this many MB and parsed "
                                 "column-wise with Arrow; 0: record by record like JSON lines.")
        parser.add_argument("--model_threads", type=int, default=0,
                            help="TensorFlow threads per op in each worker process (0: "
                                 "TensorFlow's default, all cores), e.g. cores / processes "
                                 "where several worker processes share a machine.")


OPTION_CLASSES = (runtime.IOOptions, runtime.ModelOptions, runtime.ImageOptions, BatchPredictOptions)


def _date(text: Optional[str]) -> str:
    if not text:
        return datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    try:
        return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        raise runtime.JobError(JOB, f"--run_date must be YYYY-MM-DD, got {text!r}")


class JobConfig:
    def __init__(self, options: PipelineOptions):
        o = runtime.merged_options(options, *OPTION_CLASSES)
        for name in REQUIRED_OPTIONS:
            if not getattr(o, name):
                raise runtime.JobError(JOB, f"--{name} is required")
        if o.rows_per_chunk is None:
            o.rows_per_chunk = o.max_batch_size
        if o.csv_block_mb < 0:
            raise runtime.JobError(JOB, "--csv_block_mb must be >= 0")
        if o.model_threads < 0:
            raise runtime.JobError(JOB, f"--model_threads must be >= 0, got {o.model_threads}")
        if o.min_batch_size < 1 or o.max_batch_size < o.min_batch_size or o.rows_per_chunk < 1:
            raise runtime.JobError(JOB, "need 1 <= --min_batch_size <= --max_batch_size and "
                                       "--rows_per_chunk >= 1")
        self.options = o
        self.run_date = _date(o.run_date)
        self.input = o.input.replace("{date}", self.run_date)
        self.output = o.output.replace("{date}", self.run_date).rstrip("/")
        try:
            self.model_path = mh.resolve_model_dir(o.model_dir)
            self.schema = mh.load_raw_schema(self.model_path)
        except FileNotFoundError as e:
            raise runtime.JobError(JOB, str(e))
        except Exception as e:
            raise runtime.JobError(JOB, f"cannot read the model at {o.model_dir}: "
                                       f"{str(e).splitlines()[0][:300]}")
        self.version = mh.model_version(self.model_path)
        self.key = o.key_column or self.schema.key
        self.passthrough = [c.strip() for c in o.passthrough_columns.split(",") if c.strip()]
        self.label = o.evaluate_label
        if self.label and self.label != self.schema.label and self.label not in self.schema.names:
            raise runtime.JobError(JOB, f"--evaluate_label {self.label} is not a column of the "
                                       f"model's schema (its label is {self.schema.label})")
        self.patterns = runtime.split_patterns(self.input)
        try:
            per_pattern = runtime.match_by_pattern(self.patterns)
        except Exception as e:
            raise runtime.JobError(JOB, f"cannot list --input {self.input}: {str(e).splitlines()[0]}")
        self.files = sorted({f for files in per_pattern for f in files})
        if not self.files:
            raise runtime.JobError(JOB, f"no files match --input {self.input}")
        self.input_bytes = runtime.total_size(self.files)
        self.image = next((c.name for c in self.schema.columns if c.transform == "image"), None)
        if self.image:
            self._init_images(o, per_pattern)
        runtime.check_writable(JOB, self.output)
        logging.info("Using model version %s (%s); run date %s", self.version, self.model_path,
                     self.run_date)

    def _init_images(self, o, per_pattern):
        """An image model: --input names image files (a glob, a folder of class folders) and/or
        list files (.csv with a `uri` column, .jsonl objects with a uri or base64 bytes)."""
        from inference.images import LIST_EXTENSIONS
        runtime.check_image_options(JOB, o)
        if self.passthrough:
            raise runtime.JobError(JOB, "--passthrough_columns applies to tabular models only")
        self.list_files = [f for f in self.files if f.lower().endswith(LIST_EXTENSIONS)]
        # Patterns matching anything but list files are re-matched in the pipeline (a glob of
        # images may be huge: its paths are not embedded in the job graph).
        self.image_patterns = [p for p, files in zip(self.patterns, per_pattern)
                               if any(not f.lower().endswith(LIST_EXTENSIONS) for f in files)]


# ---- parsing -----------------------------------------------------------------------------------
class ParseInputs(beam.DoFn):
    """Chunks of CSV/JSON/tf.Example records -> (key, row) with typed raw values, or rejects."""

    def __init__(self, schema: Schema, key: Optional[str], passthrough):
        self.schema = schema
        self.key_index = schema.names.index(key) if key in schema.names else None
        self.passthrough = list(passthrough)
        self.tally = runtime.Tally(JOB)
        self.rejects = {r: Metrics.counter(JOB, f"rejected_{r}") for r in parsing.REASONS}

    def setup(self):
        self._serving = ServingParser(self.schema, self.passthrough)

    def process(self, chunk):
        path, fmt, header, records = chunk
        if isinstance(records, common.CsvBlock):
            yield from self._parse_block(path, header, records)
            return
        if fmt == "csv":
            fields_list = parsing.split_fields([r for _, r in records])
            block, extras = self._serving.parse_csv_block(header, fields_list)
            for i, e in block.errors:
                pos, raw = records[i]
                yield self._reject(path, pos, raw, e.reason, e.detail)
            sources = [records[i] for i in block.index]
        else:
            rows, extras, sources = [], [] if self.passthrough else None, []
            for out in self._parse_records(path, fmt, records):
                if isinstance(out, tuple):
                    values, extra, source = out
                    rows.append(values)
                    sources.append(source)
                    if extras is not None:
                        extras.append(extra)
                else:
                    yield out
            block = parsing.ColumnBlock([list(c) for c in zip(*rows)] if rows else
                                        [[] for _ in self.schema.names], list(range(len(rows))), [])
        if len(block):
            yield from self._batch(path, block.columns, extras, sources)

    def _parse_block(self, path, header, block):
        """A CsvBlock column-wise with Arrow (preprocessing.fast_csv); where that cannot be
        exact (bad UTF-8, a field spanning lines) or passthrough columns are asked for, its
        records the row-by-row way."""
        parser = self._serving._parser(header)
        fast = None if self.passthrough else fast_csv.parse_block(parser, block.data)
        if fast is None:
            decode_errors = []
            records = block.records(decode_errors)
            yield self.tally("rows_read", len(records) + len(decode_errors))
            for line, raw, err in decode_errors:
                yield self._reject(path, line, raw, "bad_encoding", err)
            if records:
                yield from self.process((path, "csv", header, records))
            return
        yield self.tally("rows_read", fast.records)
        first = block.first_line
        for i, e in fast.errors:
            yield self._reject(path, first + i, fast.lines[i].as_py(), e.reason, e.detail)
        if not len(fast):
            return
        # Columns stay numpy / Arrow (cheap to hand on and to size): the model handler turns
        # them into tensors --max_batch_size rows at a time.
        lines = fast.lines
        if block.path is not None:  # a byte range: the raw lines can be read again if needed
            lines = functools.partial(common.block_lines, block.path, block.start, block.end)
        yield from self._batch(path, fast.columns, None, mh.LineSources(lines, fast.rows, first))

    def _batch(self, path, columns, extras, sources):
        """All the chunk's valid rows as one RunInference element (the model handler calls
        the model on --max_batch_size rows at a time)."""
        keys = self._keys(path, columns, sources)
        yield mh.RowBatch(tuple(self.schema.names), columns, keys, extras, path, sources)

    def _keys(self, path, columns, sources):
        """The key column's values as strings; file:position where a row has none."""
        if isinstance(sources, mh.LineSources):  # a CsvBlock's rows: keys stay in Arrow
            return sources.keys(path, None if self.key_index is None
                                else columns[self.key_index])
        if self.key_index is None:
            return [mh.default_key(path, pos) for pos, _ in sources]
        col = columns[self.key_index]
        col = col.tolist() if hasattr(col, "tolist") else col
        return mh.keys_or_default(path, col, [pos for pos, _ in sources])

    def _parse_records(self, path, fmt, records):
        """JSON lines and tf.Examples, row by row: (values, extra, (pos, raw)) or a reject."""
        sp = self._serving
        if fmt == "tfrecord":
            for pos, record in records:
                yield self._one(path, pos, record, sp.parse_example, record)
            return
        for pos, record in records:
            try:
                obj = json.loads(record)
            except ValueError as e:
                yield self._reject(path, pos, record, "invalid_json", f"not JSON: {e}")
                continue
            instances = obj.get("instances") if isinstance(obj, dict) else None
            if instances is None:
                yield self._one(path, pos, record, sp.parse_object, obj)
            elif not isinstance(instances, list) or not instances:
                yield self._reject(path, pos, record, "invalid_json",
                                   "'instances' must be a non-empty list")
            else:
                yield self.tally("rows_read", len(instances) - 1)  # one record, several rows
                for i, inst in enumerate(instances):
                    yield self._one(path, f"{pos}#{i}", json.dumps(inst), sp.parse_object, inst)

    def _one(self, path, pos, raw, parse, arg):
        try:
            values, extra = parse(arg)
        except parsing.RowError as e:
            return self._reject(path, pos, raw, e.reason, e.detail)
        return values, extra, (pos, raw)

    def _reject(self, path, pos, raw, reason, detail):
        return common.reject(JOB, self.rejects, path, pos, raw, reason, detail)


# ---- image inputs ------------------------------------------------------------------------------
class ListedImages(beam.DoFn):
    """Records of list files -> (source, position, raw, uri, JSON object or None, key, label).

    csv: a header with a `uri` column (and optionally the label and --key_column); relative
    uris resolve against the list file's folder. jsonl: objects with `uri` or base64 bytes
    (`{"image_bytes": {"b64": ...}}` / `{"b64": ...}`), optionally the label and a key.
    """

    def __init__(self, key: Optional[str], label: Optional[str]):
        self.key = key or "key"
        self.label = label or "label"
        self.rejects = {}

    def process(self, chunk):
        path, fmt, header, records = chunk
        base = path.rsplit("/", 1)[0]
        if fmt == "csv":
            pos = {h: i for i, h in enumerate(header)}
            if "uri" not in pos:
                for line, text in records:
                    yield self._reject(path, line, text, "missing_column",
                                       f"a list of images needs a 'uri' column (header {header})")
                return
            for (line, text), fields in zip(records, parsing.split_fields([t for _, t in records])):
                if fields is None or len(fields) != len(header):
                    yield self._reject(path, line, text, "wrong_column_count",
                                       f"expected {len(header)} fields ({', '.join(header)})")
                    continue
                row = {h: fields[i].strip() for h, i in pos.items()}
                yield (path, line, text, common.resolve_uri(base, row["uri"]), None,
                       row.get(self.key), row.get(self.label))
            return
        for line, text in records:
            try:
                obj = json.loads(text)
            except ValueError as e:
                yield self._reject(path, line, text, "invalid_json", f"not JSON: {e}")
                continue
            if not isinstance(obj, dict):
                yield self._reject(path, line, text, "invalid_json", "expected a JSON object")
                continue
            uri = obj.get("uri")
            if isinstance(uri, str):
                obj = dict(obj, uri=common.resolve_uri(base, uri))
            label = obj.get(self.label)
            # The object itself travels on: LoadImages reads it with ImageInputs.from_object.
            yield (path, line, text, obj.get("uri"), obj, obj.get(self.key),
                   None if label is None else str(label))

    def _reject(self, path, line, raw, reason, detail):
        return common.reject(JOB, self.rejects, path, line, raw, reason, detail)


class ImageFiles(beam.DoFn):
    """Image files matched by --input -> items (each file is a row read); a file's parent
    folder is its label, as in preprocess's class-folder layout."""

    def __init__(self):
        from inference.images import LIST_EXTENSIONS
        self.list_extensions = LIST_EXTENSIONS
        self.tally = runtime.Tally(JOB)

    def process(self, metadata):
        path = metadata.path
        if path.lower().endswith(self.list_extensions):
            return  # read as a list file
        yield self.tally("rows_read")
        parts = path.rstrip("/").rsplit("/", 2)
        yield (path, None, path, path, None, None, parts[-2] if len(parts) == 3 else None)


class LoadImages(beam.DoFn):
    """Items -> RowBatches of normalised image bytes (the model's `image_bytes` input) with
    their keys and labels; unreadable or invalid images go to the dead letters with the
    reason (the same checks and normalisation as preprocess)."""

    def __init__(self, label: Optional[str], max_side: int, quality: int, max_pixels: int):
        self.label = label or "label"
        self.kw = (max_side, quality, max_pixels)
        self.rejects = {}

    def setup(self):
        from inference.images import ImageInputs
        self._images = ImageInputs(*self.kw)

    def process(self, items):
        from inference.images import IMAGE_INPUT
        from preprocessing.images import ImageError
        images, keys, labels, sources = [], [], [], []
        for source, pos, raw, uri, obj, key, label in items:
            try:
                jpeg = (self._images.from_object(obj)[0] if obj is not None
                        else self._images.from_uri(uri))
            except ImageError as e:
                yield common.reject(JOB, self.rejects, source, pos, raw, e.reason, e.detail)
                continue
            images.append(jpeg)
            keys.append(str(key) if key not in (None, "") else
                        uri or mh.default_key(source, pos))
            labels.append(label)
            sources.append((source, pos, raw))
        if images:
            yield mh.RowBatch((IMAGE_INPUT, self.label), [images, labels], keys, None, None,
                              sources)


class ReadImageInputs(beam.PTransform):
    """--input of an image model -> (RowBatches, read rejects, image rejects, tallies)."""

    def __init__(self, cfg: "JobConfig"):
        super().__init__()
        self.cfg = cfg

    def expand(self, pbegin):
        cfg, o = self.cfg, self.cfg.options
        sources, read_rejects, tallies = [], [], []
        if cfg.list_files:
            chunks, rejects, counts = pbegin | "ReadLists" >> common.ReadChunks(
                JOB, cfg.list_files, o.rows_per_chunk, o.input_format)
            tallies.append(counts)
            listed = chunks | "ListItems" >> beam.ParDo(
                ListedImages(o.key_column, cfg.label)).with_outputs("rejects", main="items")
            sources.append(listed.items)
            read_rejects += [rejects, listed.rejects]
        if cfg.image_patterns:
            files = (pbegin | "ImagePatterns" >> beam.Create(cfg.image_patterns)
                     | "MatchImages" >> fileio.MatchAll()
                     | "FileItems" >> beam.ParDo(ImageFiles()).with_outputs(runtime.COUNTS,
                                                                            main="items"))
            sources.append(files.items)
            tallies.append(files[runtime.COUNTS])
        items = tuple(sources) | "AllItems" >> beam.Flatten()
        loaded = (items
                  | "Spread" >> beam.Reshuffle()
                  | "Batch" >> beam.BatchElements(min_batch_size=1,
                                                  max_batch_size=o.max_batch_size)
                  | "Load" >> beam.ParDo(LoadImages(cfg.label, o.max_side, o.jpeg_quality,
                                                    o.max_pixels)).with_outputs("rejects",
                                                                                main="batches"))
        read = (tuple(read_rejects) | "ReadRejects" >> beam.Flatten()) if read_rejects else \
            (pbegin | "NoReadRejects" >> beam.Create([]))
        counts = tuple(tallies) | "ReadTallies" >> beam.Flatten()
        return loaded.batches, read, loaded.rejects, counts


class FormatPredictions(beam.DoFn):
    """PredictionResult over a RowBatch -> a PredictionBlock, plus dead letters for the rows
    the model rejected."""

    def __init__(self, label: Optional[str]):
        self.label = label
        self.tally = runtime.Tally(JOB)
        self.rejects = {}

    def process(self, result):
        batch, res = result.example, result.inference
        for i, rejection in res.rejections:
            path, pos, raw = ((batch.path,) + batch.sources[i] if batch.path is not None
                              else batch.sources[i])
            yield common.reject(JOB, self.rejects, path, pos, raw, rejection.reason,
                                rejection.detail)
        if not res.index:
            return
        whole = len(res.index) == len(batch)

        def pick(values):
            if whole:
                return values
            if isinstance(values, np.ndarray):
                return values[res.index]
            if isinstance(values, pa.Array):
                return values.take(pa.array(res.index, pa.int64()))
            return [values[i] for i in res.index]

        labels = None
        if self.label and self.label in batch.names:
            labels = pick(batch.column(self.label))
            labels = labels.tolist() if isinstance(labels, np.ndarray) else list(labels)
        yield self.tally("rows_predicted", len(res.index))
        runtime.Progress.of(JOB, "predicted").add(len(res.index))
        yield PredictionBlock(pick(batch.keys), res.outputs, result.model_id,
                              None if batch.extras is None else pick(batch.extras), labels)


class EvalMetrics(beam.CombineFn):
    """Exact metrics over labelled predictions (the same formulas as the trainer's eval)."""

    def __init__(self, task: str):
        self.task = task

    def create_accumulator(self):
        return [0, 0.0, 0.0, 0]  # n, sum squared error, sum abs error, correct

    def add_input(self, acc, block: PredictionBlock):
        labels = block.labels or []
        has = [i for i, v in enumerate(labels) if v is not None]
        if not has:
            return acc
        acc[0] += len(has)
        if self.task == "regression":
            err = (block.outputs["predictions"][has].astype(np.float64)
                   - np.asarray([float(labels[i]) for i in has]))
            acc[1] += float(np.sum(err * err))
            acc[2] += float(np.sum(np.abs(err)))
        else:
            classes = block.outputs["classes"][has].tolist()
            acc[3] += sum(c.decode("utf-8") == str(labels[i]) for c, i in zip(classes, has))
        return acc

    def merge_accumulators(self, accs):
        out = self.create_accumulator()
        for a in accs:
            out = [x + y for x, y in zip(out, a)]
        return out

    def extract_output(self, acc):
        n, sq, ab, correct = acc
        if n == 0:
            return {"examples": 0}
        if self.task == "regression":
            return {"examples": n, "rmse": math.sqrt(sq / n), "mae": ab / n}
        return {"examples": n, "accuracy": correct / n}


def _csv_line(rec: dict, columns) -> str:
    import csv
    import io
    buf = io.StringIO()
    values = []
    for c in columns:
        v = rec.get(c)
        values.append(json.dumps(v) if isinstance(v, (list, dict)) else ("" if v is None else v))
    csv.writer(buf, lineterminator="").writerow(values)
    return buf.getvalue()


def build_pipeline(p: beam.Pipeline, cfg: JobConfig, staging: str):
    """Adds the batch-prediction graph to `p`: everything is written under `staging`, and
    the Finalize step publishes it to --output."""
    o = cfg.options
    if cfg.image:
        batches, read_rejects, parse_rejects, read_counts = p | "Images" >> ReadImageInputs(cfg)
        tallies = [read_counts]
    else:
        chunks, read_rejects, read_counts = p | "Read" >> common.ReadChunks(
            JOB, cfg.patterns, o.rows_per_chunk, o.input_format,
            block_bytes=int(o.csv_block_mb * (1 << 20)) or None, total_bytes=cfg.input_bytes)
        parsed = chunks | "Parse" >> beam.ParDo(
            ParseInputs(cfg.schema, cfg.key, cfg.passthrough)
        ).with_outputs("rejects", runtime.COUNTS, main="batches")
        batches, parse_rejects = parsed.batches, parsed.rejects
        tallies = [read_counts, parsed[runtime.COUNTS]]
    # Each element is already a chunk of rows (see RowBatch), scored --max_batch_size at a time.
    handler = mh.SavedModelHandler(cfg.model_path, min_batch_size=1, max_batch_size=1,
                                   rows_per_call=o.max_batch_size,
                                   intra_op_threads=o.model_threads or None)
    results = batches | "RunInference" >> RunInference(handler)
    formatted = results | "Format" >> beam.ParDo(
        FormatPredictions(cfg.label)).with_outputs("rejects", runtime.COUNTS, main="predictions")
    tallies.append(formatted[runtime.COUNTS])
    rejects = ((read_rejects, parse_rejects, formatted.rejects) | "AllRejects" >> beam.Flatten())
    written = [rejects | "DeadLetters" >> common.WriteDeadLetters(
        FileSystems.join(staging, "rejects"))]
    preds = formatted.predictions  # PredictionBlocks, one per batch
    prefix = FileSystems.join(staging, "predictions")
    if o.output_format in ("jsonl", "both"):
        # One text element per batch (lines joined): the sink adds the final newline.
        written.append(preds | "ToJson" >> beam.Map(PredictionBlock.json_bytes)
                       | "WriteJsonl" >> beam.io.WriteToText(prefix, file_name_suffix=".jsonl"))
    if o.output_format in ("csv", "both"):
        columns = (["key"] + (["prediction"] if cfg.schema.task == "regression"
                              else ["class", "class_id", "probabilities"])
                   + ["model_version"] + cfg.passthrough + (["label"] if cfg.label else []))
        written.append(preds | "ToCsv" >> beam.Map(
                lambda block: "\n".join(_csv_line(r, columns) for r in block.records()))
             | "WriteCsv" >> beam.io.WriteToText(prefix, file_name_suffix=".csv",
                                                 header=",".join(columns)))
    if o.output_table:
        _ = (preds | "Unbatch" >> beam.FlatMap(PredictionBlock.records)
             | "WriteBigQuery" >> _bigquery_sink(cfg))
    if cfg.label:
        written.append(preds | "Metrics" >> beam.CombineGlobally(EvalMetrics(cfg.schema.task))
             | "MetricsJson" >> beam.Map(lambda m: json.dumps(
                 dict(m, label=cfg.label, model_version=cfg.version), indent=2))
             | "WriteMetrics" >> beam.io.WriteToText(FileSystems.join(staging, "metrics"),
                                                     file_name_suffix=".json",
                                                     shard_name_template=""))
    info = {"job": JOB, "run_date": cfg.run_date, "input": cfg.input, "output": cfg.output,
            "model_dir": o.model_dir, "model_path": cfg.model_path,
            "model_version": cfg.version}
    all_tallies = tuple(tallies) | "AllTallies" >> beam.Flatten()
    _ = (all_tallies, rejects) | "Finalize" >> Finalize(
        JOB, staging, cfg.output, written, OUTPUT_NAMES, info,
        outputs={"rows_predicted": "rows_predicted"}, attach={"metrics": "metrics.json"})
    return p


def _bigquery_sink(cfg: JobConfig):
    """Day partition `table$YYYYMMDD`, truncated: a re-run of a date replaces that date."""
    fields = [{"name": "key", "type": "STRING"}, {"name": "model_version", "type": "STRING"}]
    if cfg.schema.task == "regression":
        fields.append({"name": "prediction", "type": "FLOAT"})
    else:
        fields += [{"name": "class", "type": "STRING"}, {"name": "class_id", "type": "INTEGER"},
                   {"name": "probabilities", "type": "FLOAT", "mode": "REPEATED"}]
    fields += [{"name": c, "type": "STRING"} for c in cfg.passthrough]
    if cfg.label:
        fields.append({"name": "label", "type": "STRING"})
    names = [f["name"] for f in fields]

    def to_row(rec):
        row = {k: rec.get(k) for k in names}
        for c in cfg.passthrough + (["label"] if cfg.label else []):
            row[c] = None if row[c] is None else str(row[c])
        return row

    table = f"{cfg.options.output_table}${cfg.run_date.replace('-', '')}"

    class _Sink(beam.PTransform):
        def expand(self, pcoll):
            return (pcoll | "ToRow" >> beam.Map(to_row)
                    | "Write" >> beam.io.WriteToBigQuery(
                        table, schema={"fields": fields},
                        create_disposition=beam.io.BigQueryDisposition.CREATE_IF_NEEDED,
                        write_disposition=beam.io.BigQueryDisposition.WRITE_TRUNCATE,
                        additional_bq_parameters={"timePartitioning": {"type": "DAY"}}))
    return _Sink()


def _sample(output: str, n: int = 5):
    try:
        files = sorted(m.path for m in FileSystems.match(
            [FileSystems.join(output, "predictions-*.jsonl")])[0].metadata_list)
        out = []
        for f in files:  # only each file's head: outputs may be many GB
            for line in runtime.read_head(f).splitlines():
                out.append(json.loads(line))
                if len(out) >= n:
                    return out
        return out
    except Exception:
        return []


def run(argv=None, save_main_session=True, test_pipeline=None) -> Optional[dict]:
    """Runs the job; returns the run summary (None when only a template was built)."""
    options = runtime.job_options(argv, JOB, BatchPredictOptions, __doc__,
                                  shared=OPTION_CLASSES[:-1])
    options.view_as(SetupOptions).save_main_session = save_main_session
    cfg = JobConfig(options)
    template = getattr(options.view_as(GoogleCloudOptions), "template_location", None)
    staging = FileSystems.join(cfg.output, STAGING_PREFIX + uuid.uuid4().hex[:12])
    p = test_pipeline or beam.Pipeline(options=options)
    build_pipeline(p, cfg, staging)
    result = p.run()
    # Everything the job promises happens inside the pipeline (Finalize): here only wait.
    summary = runtime.wait_and_read_summary(result, template, cfg.output)
    if summary is not None:
        print(f"{JOB}: model version {cfg.version}; {summary_line(summary)}\n"
              f"{JOB}: outputs in {cfg.output}/" +
              (f"; metrics {summary['metrics']}" if "metrics" in summary else ""))
        for rec in _sample(cfg.output):
            print(f"  {rec}")
    return summary


if __name__ == "__main__":
    runtime.setup_logging()
    run()
