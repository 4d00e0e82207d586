"""The preprocess job's PTransforms and DoFns: parse and split CSV rows, read and normalise
labelled images, count what is transformed, and write splits, the transform and the raw schema.
`beam_jobs/preprocess.py` composes them (see its docstring for commands)."""
from __future__ import annotations

import os
import shutil
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from preprocessing.accounting import counting, rejects
from preprocessing.accounting.rejects import Reject
from preprocessing.accounting.tagged import typed_outputs
from preprocessing.contract.schema import RAW_SCHEMA_FILE, Schema
from preprocessing.contract.split import SPLITS, boundaries, split_index, split_indices
from preprocessing.files import csv_blocks, encodings, filesys, reading
from preprocessing.files.tfrecords import WriteExampleBatches
from preprocessing.images.checks import ImageLimits, normalize_image, read_image
from preprocessing.images.sources import ReadImageItems
from preprocessing.parsing import csv_records, fast_csv, record_batches, row_parser
from preprocessing.reference import golden
from preprocessing.reference.statistics import TableStatistics

JOB = "preprocess"  # the metrics namespace


class RawSplits(NamedTuple):
    """What reading gives the rest of the preprocess job: raw RecordBatches per split (in
    tf.transform's raw format), every dead letter (JSON lines) and the (name, n) tallies."""
    train: beam.PCollection
    eval: beam.PCollection
    test: beam.PCollection
    rejects: beam.PCollection
    counts: beam.PCollection

    def split(self, name: str) -> beam.PCollection:
        return getattr(self, name)


# The splits' RecordBatches travel under record_batches.RecordBatchCoder, not pickled. The
# other tags are declared too: Beam warns of a tag requested but not typed.
SPLIT_TYPES = {name: pa.RecordBatch for name in SPLITS}  # each split's raw rows
# tf.transform's output with output_record_batches=True: (batch, passthrough columns).
TRANSFORMED = Tuple[pa.RecordBatch, Dict[str, pa.Array]]


def _raw_splits(parsed, read_rejects, counts) -> RawSplits:
    """ParseAndSplit's or ProcessImages' tagged outputs, with the reader's rejects and tallies."""
    dead = (read_rejects, parsed.rejects) | "AllRejects" >> beam.Flatten()
    return RawSplits(*(parsed[s] for s in SPLITS), rejects=dead, counts=counts)


class ReadCsvSplits(beam.PTransform):
    """CSV globs -> RawSplits: files read in chunks (ReadChunks: whole records as CsvBlocks
    of `block_bytes`, or record by record), parsed against the schema and split by the key.
    `record_bounds`: (--max_record_bytes, --max_record_lines); `total_bytes`: the inputs'
    size for progress ETAs; `encoding`: the files' (read as UTF-8)."""

    def __init__(self, schema: Schema, patterns: Sequence[str], fractions,
                 delimiter: str = ",", rows_per_batch: int = 2000,
                 block_bytes: Optional[int] = None, total_bytes: Optional[int] = None,
                 record_bounds: tuple = (csv_records.MAX_RECORD_BYTES,
                                         csv_records.MAX_RECORD_LINES),
                 encoding: str = encodings.UTF8):
        super().__init__()
        self.encoding = encoding
        self.schema, self.patterns, self.fractions = schema, tuple(patterns), tuple(fractions)
        self.delimiter, self.rows_per_batch = delimiter, rows_per_batch
        # Blocks are parsed column-wise (fast_csv), which reads comma-separated CSV only.
        self.block_bytes = block_bytes if delimiter == "," else None
        self.total_bytes, self.record_bounds = total_bytes, tuple(record_bounds)

    def expand(self, pbegin):
        chunks, read_rejects, counts = pbegin | "ReadCsv" >> reading.ReadChunks(
            JOB, self.patterns, self.rows_per_batch, block_bytes=self.block_bytes or None,
            total_bytes=self.total_bytes, max_bytes=self.record_bounds[0],
            max_lines=self.record_bounds[1], delimiter=self.delimiter, encoding=self.encoding)
        parsed = chunks | "ParseAndSplit" >> typed_outputs(beam.ParDo(
            ParseAndSplit(self.schema, self.fractions, self.delimiter, self.record_bounds)),
            Any, "rejects", counting.COUNTS, *SPLITS, **SPLIT_TYPES)
        counts = (counts, parsed[counting.COUNTS]) | "ReadCounts" >> beam.Flatten()
        return _raw_splits(parsed, read_rejects, counts)


class ReadImageSplits(beam.PTransform):
    """A labels CSV (`list_files`, columns uri,label, or `header` when it has none) or globs
    of class folders (`image_patterns`) -> RawSplits of normalised images: every image that
    cannot be used is a dead letter with its reason."""

    def __init__(self, schema: Schema, fractions, limits: ImageLimits, classes=(),
                 list_files: Sequence[str] = (), image_patterns: Sequence[str] = (),
                 header: Optional[tuple] = None):
        super().__init__()
        self.schema, self.fractions, self.limits = schema, tuple(fractions), limits
        self.classes, self.header = tuple(classes), header
        self.list_files, self.image_patterns = tuple(list_files), tuple(image_patterns)

    def expand(self, pbegin):
        items, read_rejects, counts = pbegin | "ReadImageItems" >> ReadImageItems(
            JOB, list_files=self.list_files, image_patterns=self.image_patterns,
            input_format="csv", label="label", header=self.header)
        parsed = (items
                  | "Redistribute" >> beam.Reshuffle()
                  | "Batch" >> beam.BatchElements(min_batch_size=8, max_batch_size=64)
                  | "ProcessImages" >> typed_outputs(beam.ParDo(ProcessImages(
                      self.schema, self.fractions, self.classes, self.limits)),
                      Any, "rejects", *SPLITS, **SPLIT_TYPES))
        return _raw_splits(parsed, read_rejects, counts)


class ParseAndSplit(beam.DoFn):
    """CSV chunk -> one RecordBatch per split, and dead letters for rows that do not parse.

    A chunk of records is parsed row by row. A CsvBlock (whole records as bytes) is parsed
    column-wise with Arrow (fast_csv.parse_block: the same rows, values, reasons and line
    numbers as row by row), falling back to its records where Arrow cannot be exact; its rows
    are tallied here (rows_read), as the reader does not split it into records.

    Small inputs (many one-row files) would make one tiny RecordBatch each, and every batch
    costs tf.transform a graph call: a small block (csv_blocks.SMALL_BLOCK_BYTES) is parsed
    row by row (the same values, without Arrow's per-call cost), and row-by-row rows are
    gathered per split across the bundle's chunks into batches of FLUSH_ROWS (the rest at
    bundle end).
    """
    FLUSH_ROWS = 2048

    def __init__(self, schema: Schema, fractions, delimiter: str = ",",
                 record_bounds: tuple = (csv_records.MAX_RECORD_BYTES, csv_records.MAX_RECORD_LINES)):
        self.schema = schema
        self.bounds = boundaries(fractions)
        self.delimiter = delimiter
        self.record_bounds = tuple(record_bounds)  # (--max_record_bytes, --max_record_lines)
        self.key_index = schema.names.index(schema.key) if schema.key else None
        self.dead = rejects.DeadLetters(JOB)
        self.tally = counting.Tally(JOB)

    def setup(self):
        self._parsers = {}

    def start_bundle(self):
        self._pending = [[] for _ in SPLITS]

    def finish_bundle(self):
        for name, rows in zip(SPLITS, self._pending):
            if rows:
                yield beam.pvalue.TaggedOutput(name, WindowedValue(
                    record_batches.rows_to_record_batch(rows, self.schema), MIN_TIMESTAMP,
                    [GlobalWindow()]))
        self._pending = [[] for _ in SPLITS]

    def process(self, chunk):
        path, _, header, records = chunk
        parser = self._parsers.get(header)
        if parser is None:
            parser = self._parsers[header] = row_parser.RowParser(self.schema, header)
        if isinstance(records, csv_blocks.CsvBlock):
            yield from self._block(path, parser, records)
        else:
            yield from self._rows(path, parser, records)

    def _rows(self, path, parser, records):
        per_split = self._pending
        fields_list = csv_records.split_fields([text for _, text in records], self.delimiter)
        for (line_no, text), fields in zip(records, fields_list):
            try:
                values = parser.parse(fields)
            except rejects.Reject as e:
                yield self.dead(path, line_no, text, e.reason, e.detail)
                continue
            key = values[self.key_index] if self.key_index is not None else text
            per_split[split_index(key, self.bounds)].append(values)
        for s, (name, rows) in enumerate(zip(SPLITS, per_split)):
            if len(rows) >= self.FLUSH_ROWS:
                yield beam.pvalue.TaggedOutput(name, record_batches.rows_to_record_batch(rows, self.schema))
                per_split[s] = []

    def _block(self, path, parser, block):
        fast = (fast_csv.parse_block(parser, block.data)
                if self.delimiter == "," and not block.small else None)
        if fast is None:  # small, bad UTF-8, a field spanning lines...: record by record
            line_rejects = []
            records = block.read_records(line_rejects, *self.record_bounds)
            yield self.tally("rows_read", len(records) + len(line_rejects))
            for line_no, raw, reason, detail in line_rejects:
                yield self.dead(path, line_no, raw, reason, detail)
            yield from self._rows(path, parser, records)
            return
        yield self.tally("rows_read", fast.record_count)
        for i, e in fast.errors:
            yield self.dead(path, block.first_line + i, fast.lines[i].as_py(), e.reason,
                               e.detail)
        if not len(fast):
            return
        if self.key_index is not None:
            keys = fast.columns[self.key_index]
            keys = keys.tolist() if isinstance(keys, np.ndarray) else (
                keys.to_pylist() if isinstance(keys, pa.Array) else keys)
        else:  # the whole record, as row by row
            keys = fast.lines.take(pa.array(fast.index)).to_pylist()
        where = split_indices(keys, self.bounds)
        for s, name in enumerate(SPLITS):
            mask = where == s
            if mask.all():
                yield beam.pvalue.TaggedOutput(
                    name, record_batches.columns_to_record_batch(fast.columns, self.schema))
                return
            if mask.any():
                yield beam.pvalue.TaggedOutput(
                    name, record_batches.columns_to_record_batch(fast.columns, self.schema, mask))


class ProcessImages(beam.DoFn):
    """Batches of ImageItems -> normalised images as RecordBatches per split, and dead
    letters with the reason for every image that cannot be used."""

    def __init__(self, schema: Schema, fractions, classes, limits: ImageLimits):
        self.schema = schema
        self.bounds = boundaries(fractions)
        self.classes = set(classes)
        self.limits = limits
        self.dead = rejects.DeadLetters(JOB)

    def process(self, items):
        per_split = [[] for _ in SPLITS]
        for item in items:
            uri, label = item.uri, item.label
            try:
                if not label or (self.classes and label not in self.classes):
                    raise Reject("unknown_label", f"label {label!r} is not a known class")
                data = read_image(uri, self.limits.max_image_bytes)
                img = normalize_image(data, uri, self.limits)
            except Reject as e:
                yield self.dead.of(item.source, item.pos, item.raw, e)
                continue
            per_split[split_index(uri, self.bounds)].append(
                (uri, img.jpeg, img.height, img.width, label))
        for name, rows in zip(SPLITS, per_split):
            if rows:
                yield beam.pvalue.TaggedOutput(
                    name, record_batches.rows_to_record_batch(rows, self.schema))


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
        """-> the transform's output folder (str), once written."""
        import tensorflow_transform.beam as tft_beam
        output = self.output
        if not self.stage_locally:
            return (transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(output)
                    | "Written" >> beam.Map(lambda _: output).with_output_types(str))
        staging = filesys.local_tmp_dir("tft_stage_")

        def publish(_) -> str:
            for name in ("transform_fn", "transformed_metadata"):
                filesys.copy_local_tree(os.path.join(staging, name), FileSystems.join(output, name))
            shutil.rmtree(staging, ignore_errors=True)
            return output

        return (transform_fn
                | "WriteTransformFnLocally" >> tft_beam.WriteTransformFn(staging)
                | "PublishTransformFn" >> beam.Map(publish).with_output_types(str))


class WriteSplit(beam.PTransform):
    """(transformed RecordBatch, passthrough) pairs and the transformed metadata -> the
    split's OUTPUT/<split>/part-*.tfrecord.gz (gzip tf.Examples, a batch at a time)."""

    def __init__(self, output: str, split: str, num_shards: int, gzip_level: int):
        super().__init__()
        self.prefix = FileSystems.join(output, split, "part")
        self.num_shards = num_shards
        self.gzip_level = gzip_level

    def _extract_input_pvalues(self, batches_and_metadata):
        return batches_and_metadata, [batches_and_metadata[0]]

    def expand(self, batches_and_metadata):
        return batches_and_metadata | "Write" >> WriteExampleBatches(
            self.prefix, self.num_shards, self.gzip_level)


class CountTransformed(beam.DoFn):
    """Transformed (RecordBatch, passthrough) pairs pass through; their rows are tallied as
    rows_<split> (what is written: encoding is one tf.Example per row) and shown as progress."""

    def __init__(self, split: str):
        self.split = split
        self.tally = counting.Tally(JOB)

    def process(self, element):
        n = element[0].num_rows
        counting.Progress.of(JOB, "transformed").add(n)
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


def write_references(parsed: RawSplits, schema: Schema, staging: str, fractions, golden_rows: int) -> list:
    """What serving checks itself against, from the parsed raw rows: the train split's
    feature statistics (statistics.json: the skew report's reference), the golden set (a
    sample of the eval split, else the test split) and the calibration set (a sample of the
    train split, for training.optimize). Returns their written PCollections."""
    stats = parsed.train | "TrainStatistics" >> beam.CombineGlobally(TableStatistics(schema))
    written = [filesys.write_json_file(stats, staging, "statistics")]
    held_out = [s for s, f in zip(SPLITS[1:], fractions[1:]) if f > 0]
    if golden_rows and held_out:
        written.append(parsed.split(held_out[0])
                       | "GoldenSet" >> golden.SampleGolden(schema, staging, golden_rows))
    if golden_rows:
        written.append(parsed.train | "CalibrationSet" >> golden.SampleGolden(
            schema, staging, golden_rows, golden.CALIBRATION_FILE))
    return written
