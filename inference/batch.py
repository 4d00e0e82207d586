"""Batch prediction's DoFns: parse input chunks (CSV blocks column-wise with Arrow, CSV/JSON
lines/tf.Example records row by row) into RowBatches, turn RunInference results into
PredictionBlocks and dead letters, and compute evaluation metrics over labelled rows.
`beam_jobs/batch_predict.py` composes them."""
from __future__ import annotations

import functools
import json
from typing import NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
import pyarrow as pa

from inference.error_picture import ErrorPicture
from inference.inputs.rows import ServingParser
from inference.model import model_handler as mh
from inference.outputs.predictions import PredictionBlock
from preprocessing.accounting import counting, rejects
from preprocessing.accounting.tagged import typed_outputs
from preprocessing.contract.schema import Schema
from preprocessing.contract.values import parse_json
from preprocessing.files import csv_blocks, encodings, filesys, reading
from preprocessing.parsing import csv_records, fast_csv, row_parser
from preprocessing.reference.evaluation import EvalSums
from preprocessing.reference.slices import MISSING, Slicer, SliceSums

SOURCES_FILE = "sources.json"  # what each CSV source's rows were parsed with (redrive's)
OUTPUT_FORMATS = {"jsonl": ["jsonl"], "csv": ["csv"], "both": ["jsonl", "csv"]}


class RecordSources(beam.PTransform):
    """Chunks -> OUTPUT/sources.json: {"csv_headers": {source: [column, ...]},
    "csv_delimiter": d}, the header each CSV source's rows were parsed with and their field
    delimiter, so that a redrive parses its dead letters as this run did, not with whatever
    the file holds by then."""

    def __init__(self, staging: str, delimiter: str = ","):
        super().__init__()
        self.staging, self.delimiter = staging, delimiter

    def expand(self, chunks):
        headers = (chunks
                   | "CsvHeaders" >> beam.FlatMap(
                       lambda c: [(c.path, tuple(c.header))] if c.fmt == "csv" and c.header
                       else [])
                   | "OnePerFile" >> beam.Distinct()
                   | "AllHeaders" >> beam.combiners.ToList()
                   | "AsRecord" >> beam.Map(lambda pairs, d=self.delimiter: {
                       "csv_headers": {path: list(header) for path, header in sorted(pairs)},
                       "csv_delimiter": d}))
        return filesys.write_json_file(headers, self.staging, SOURCES_FILE[:-len(".json")])


class ParsedInputs(NamedTuple):
    """What reading gives batch prediction: RowBatches to score, the dead letters of records
    that cannot be (JSON lines), (name, n) tallies, and the chunks read (for RecordSources)."""
    batches: beam.PCollection
    rejects: beam.PCollection
    counts: beam.PCollection
    chunks: beam.PCollection


class ReadInputs(beam.PTransform):
    """Globs of CSV, JSON lines or tf.Example files -> ParsedInputs: files read in chunks
    (ReadChunks: CSV as CsvBlocks of `block_bytes`, or record by record), parsed against the
    model's raw schema into RowBatches keyed by `key` (else file:line), with the
    `passthrough` columns. `record_bounds`: (--max_record_bytes, --max_record_lines);
    `delimiter`: CSV's field delimiter (blocks are parsed column-wise for a comma only);
    `encoding`: CSV files' (read as UTF-8)."""

    def __init__(self, job: str, schema: Schema, patterns: Sequence[str],
                 key: Optional[str] = None, passthrough: Sequence[str] = (),
                 rows_per_chunk: int = 2000, input_format: str = "auto",
                 block_bytes: Optional[int] = None, total_bytes: Optional[int] = None,
                 record_bounds: tuple = (csv_records.MAX_RECORD_BYTES,
                                         csv_records.MAX_RECORD_LINES), delimiter: str = ",",
                 encoding: str = encodings.UTF8):
        super().__init__()
        self.job, self.schema, self.patterns = job, schema, tuple(patterns)
        self.delimiter, self.encoding = delimiter, encoding
        block_bytes = block_bytes if delimiter == "," else None
        self.key, self.passthrough = key, tuple(passthrough)
        self.rows_per_chunk, self.input_format = rows_per_chunk, input_format
        self.block_bytes, self.total_bytes = block_bytes, total_bytes
        self.record_bounds = tuple(record_bounds)

    def expand(self, pbegin):
        chunks, read_rejects, read_counts = pbegin | "Read" >> reading.ReadChunks(
            self.job, self.patterns, self.rows_per_chunk, self.input_format,
            block_bytes=self.block_bytes or None, total_bytes=self.total_bytes,
            max_bytes=self.record_bounds[0], max_lines=self.record_bounds[1],
            delimiter=self.delimiter, encoding=self.encoding)
        parsed = chunks | "Parse" >> typed_outputs(beam.ParDo(
            ParseInputs(self.job, self.schema, self.key, self.passthrough, self.record_bounds,
                        self.delimiter)),
            mh.RowBatch, "rejects", counting.COUNTS, main="batches")
        dead = (read_rejects, parsed.rejects) | "ReadRejects" >> beam.Flatten()
        counts = (read_counts, parsed[counting.COUNTS]) | "ReadCounts" >> beam.Flatten()
        return ParsedInputs(parsed.batches, dead, counts, chunks)


class ParseInputs(beam.DoFn):
    """Chunks of CSV/JSON/tf.Example records -> (key, row) with typed raw values, or rejects."""

    def __init__(self, job: str, schema: Schema, key: Optional[str], passthrough,
                 record_bounds: tuple = (csv_records.MAX_RECORD_BYTES, csv_records.MAX_RECORD_LINES),
                 delimiter: str = ","):
        self.record_bounds = tuple(record_bounds)  # (--max_record_bytes, --max_record_lines)
        self.delimiter = delimiter
        self.schema = schema
        self.key_index = schema.names.index(key) if key in schema.names else None
        self.passthrough = list(passthrough)
        self.job = job  # the metrics namespace
        self.tally = counting.Tally(job)
        self.dead = rejects.DeadLetters(job)

    def setup(self):
        self._serving = ServingParser(self.schema, self.passthrough)

    def process(self, chunk):
        path, fmt, header, records = chunk
        if isinstance(records, csv_blocks.CsvBlock):
            yield from self._parse_block(path, header, records)
            return
        if fmt == "csv":
            fields_list = csv_records.split_fields([r for _, r in records], self.delimiter)
            block, extras = self._serving.parse_csv_block(header, fields_list)
            for i, e in block.errors:
                pos, raw = records[i]
                yield self.dead(path, pos, raw, e.reason, e.detail)
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
            block = row_parser.ColumnBlock([list(c) for c in zip(*rows)] if rows else
                                        [[] for _ in self.schema.names], list(range(len(rows))), [])
        if len(block):
            yield from self._batch(path, block.columns, extras, sources)

    def _parse_block(self, path, header, block):
        """A CsvBlock column-wise with Arrow (preprocessing.parsing.fast_csv); where that cannot be
        exact (bad UTF-8, a field spanning lines), passthrough columns are asked for or the
        block is small (a one-row file), its records the row-by-row way."""
        parser = self._serving.parser(header)
        fast = None if self.passthrough or block.small else \
            fast_csv.parse_block(parser, block.data)
        if fast is None:
            line_rejects = []
            records = block.read_records(line_rejects, *self.record_bounds)
            yield self.tally("rows_read", len(records) + len(line_rejects))
            for line, raw, reason, detail in line_rejects:
                yield self.dead(path, line, raw, reason, detail)
            if records:
                yield from self.process((path, "csv", header, records))
            return
        yield self.tally("rows_read", fast.record_count)
        first = block.first_line
        for i, e in fast.errors:
            yield self.dead(path, first + i, fast.lines[i].as_py(), e.reason, e.detail)
        if not len(fast):
            return
        # Columns stay numpy / Arrow (cheap to hand on and to size): the model handler turns
        # them into tensors --max_batch_size rows at a time.
        lines = fast.lines
        if block.path is not None:  # a byte range: the raw lines can be read again if needed
            lines = functools.partial(csv_blocks.block_lines, block.path, block.start, block.end,
                                      block.encoding)
        yield from self._batch(path, fast.columns, None, mh.LineSources(lines, fast.index, first))

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
                obj = parse_json(record)
            except rejects.Reject as e:
                yield self.dead(path, pos, record, e.reason, e.detail)
                continue
            instances = obj.get("instances") if isinstance(obj, dict) else None
            if instances is None:
                yield self._one(path, pos, record, sp.parse_object, obj)
            elif not isinstance(instances, list) or not instances:
                yield self.dead(path, pos, record, "invalid_json",
                                   "'instances' must be a non-empty list")
            else:
                yield self.tally("rows_read", len(instances) - 1)  # one record, several rows
                for i, inst in enumerate(instances):
                    yield self._one(path, f"{pos}#{i}", json.dumps(inst), sp.parse_object, inst)

    def _one(self, path, pos, raw, parse, arg):
        try:
            values, extra = parse(arg)
        except rejects.Reject as e:
            return self.dead(path, pos, raw, e.reason, e.detail)
        return values, extra, (pos, raw)


class FormatPredictions(beam.DoFn):
    """PredictionResult over a RowBatch -> a PredictionBlock, plus dead letters for the rows
    the model rejected."""

    def __init__(self, job: str, label: Optional[str], slicer: Optional[Slicer] = None):
        self.label = label
        self.slicer = slicer
        self.job = job  # the metrics namespace
        self.tally = counting.Tally(job)
        self.dead = rejects.DeadLetters(job)

    def process(self, result):
        batch, res = result.example, result.inference
        for i, rejection in res.rejections:
            path, pos, raw = ((batch.path,) + batch.sources[i] if batch.path is not None
                              else batch.sources[i])
            yield self.dead.of(path, pos, raw, rejection)
        if not res.index:
            return
        has_label = self.label and self.label in batch.names
        block = res.for_rows(batch.keys, batch.extras,
                             batch.column(self.label) if has_label else None)
        if has_label:  # plain Python values (Arrow scalars are not JSON-serialisable)
            block.labels = _plain(block.labels)
            if self.slicer is not None:
                block.slices = {c: self.slicer.keys(c, _plain(block.take(batch.column(c))))
                                if c in batch.names else [MISSING] * len(block)
                                for c in self.slicer.columns}
        yield self.tally("rows_predicted", len(block))
        counting.Progress.of(self.job, "predicted").add(len(block))
        yield block


def _plain(values) -> list:
    return (values.tolist() if isinstance(values, np.ndarray) else
            values.to_pylist() if isinstance(values, pa.Array) else list(values))


class EvalMetrics(beam.CombineFn):
    """Exact metrics over labelled predictions (the same formulas as the trainer's eval);
    given the train labels' range (regression), also the rows whose label lies outside it
    and their share of the squared error (EvalSums); with `slices`, the metrics of each
    slice the blocks carry (SliceSums) as `slices`; and the confusion counts or a sample of
    (label, prediction) pairs for the report (ErrorPicture)."""

    def __init__(self, task: str, label_range: Optional[Tuple[float, float]] = None,
                 slices: bool = False):
        self.task = task
        self.label_range = label_range
        self.slices = slices

    def create_accumulator(self):
        return EvalSums(label_range=self.label_range), SliceSums(), ErrorPicture()

    def add_input(self, acc, block: PredictionBlock):
        sums, by_slice, picture = acc
        labels = block.labels or []
        sums.add_outputs(self.task, block.outputs, labels)
        picture.add_outputs(self.task, block.outputs, labels)
        if self.slices and block.slices and labels:
            by_slice.add_outputs(self.task, block.outputs, labels, block.slices)
        return sums, by_slice, picture

    def merge_accumulators(self, accs):
        sums, by_slice, picture = EvalSums(label_range=self.label_range), SliceSums(), \
            ErrorPicture()
        for a, b, c in accs:
            sums, by_slice, picture = sums.merge(a), by_slice.merge(b), picture.merge(c)
        return sums, by_slice, picture

    def extract_output(self, acc):
        out = acc[0].metrics(self.task)
        if self.slices:
            out["slices"] = acc[1].metrics(self.task)
        out.update(acc[2].to_dict(self.task))
        return out
