"""PTransforms and helpers shared by the Beam jobs: CSV reading, dead letters, outputs, summaries."""
from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import tempfile
import time
from typing import Iterable, List, Optional, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from preprocessing.parsing import iter_csv_records, split_fields

LOCAL_RUNNERS = (None, "DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner",
                 "PrismRunner", "PortableRunner", "FnApiRunner")


class JobError(SystemExit):
    """A bad argument or input found before the pipeline starts: one line, exit status 2."""

    def __init__(self, job: str, message: str):
        super().__init__(f"{job}: error: {message}")
        self.job = job
        self.message = message


class IOOptions(PipelineOptions):
    """Flags every job shares. Beam registers all PipelineOptions subclasses in one parser,
    so a flag may be defined once only: jobs read these through `merged_options`."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--input", help="Input path or glob (local or gs://); "
                            "comma-separate several. Required.")
        parser.add_argument("--output", help="Output directory (local or gs://). Required. "
                            "What an earlier run wrote there is replaced.")
        parser.add_argument("--key_column", help="Column identifying a row (default: the "
                            "schema's key).")


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
        parser.add_argument("--output_table", help="Also write predictions to BigQuery "
                            "PROJECT:DATASET.TABLE (batch: the run date's day partition, "
                            "replaced on a re-run; streaming: appended).")


class ImageOptions(PipelineOptions):
    """Image normalisation flags: preprocess applies them to training images, and the
    prediction jobs apply the same ones to the images they score (no train/serve skew)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--max_side", type=int, default=256,
                            help="images: longest side after resizing (aspect kept).")
        parser.add_argument("--jpeg_quality", type=int, default=90,
                            help="images: JPEG quality of the re-encoded images.")
        parser.add_argument("--max_pixels", type=int, default=50_000_000,
                            help="images: larger images are rejected (decompression bombs).")


def check_image_options(job: str, o) -> None:
    if o.max_side < 8 or not 1 <= o.jpeg_quality <= 100 or o.max_pixels < 1:
        raise JobError(job, "need --max_side >= 8, 1 <= --jpeg_quality <= 100, --max_pixels >= 1")


def merged_options(options: PipelineOptions, *classes):
    """One namespace with the attributes of several option views (see IOOptions)."""
    import types
    merged = {}
    for cls in classes:
        merged.update(options.view_as(cls).get_all_options(drop_default=False,
                                                           retain_unknown_options=False))
    return types.SimpleNamespace(**merged)


def job_options(argv, job: str, options_cls, doc: str, shared=()) -> PipelineOptions:
    """PipelineOptions from argv; `--help` prints the job's options and the usual Beam ones.

    (Beam's own --help handling shows an empty parser, because options are parsed lazily.)
    """
    import argparse
    import sys
    from apache_beam.options import pipeline_options as po
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        parser = argparse.ArgumentParser(
            prog=f"python -m beam_jobs.{job}", description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        group = parser.add_argument_group(f"{job} options")
        for cls in tuple(shared) + (options_cls,):
            cls._add_argparse_args(group)
        for cls in (po.StandardOptions, po.DirectOptions, po.GoogleCloudOptions,
                    po.WorkerOptions, po.SetupOptions):
            cls._add_argparse_args(parser.add_argument_group(f"Beam {cls.__name__}"))
        parser.print_help()
        raise SystemExit(0)
    return PipelineOptions(args)


def is_remote_path(path: str) -> bool:
    return "://" in path


def is_local_runner(options: PipelineOptions) -> bool:
    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, (str, type(None))) else type(runner).__name__
    return name in LOCAL_RUNNERS


def split_patterns(text: str) -> List[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def match_by_pattern(patterns: Sequence[str]) -> List[List[str]]:
    """The files each pattern matches (one listing per pattern)."""
    return [[m.path for m in result.metadata_list]
            for result in FileSystems.match(list(patterns))]


def match_files(patterns: Sequence[str]) -> List[str]:
    """All files matching the patterns, sorted; an empty list if none do."""
    return sorted({f for files in match_by_pattern(patterns) for f in files})


def check_writable(job: str, output: str) -> None:
    """Fails fast when the output location cannot be written."""
    probe = FileSystems.join(output, ".write_probe")
    try:
        if not is_remote_path(output):
            os.makedirs(output, exist_ok=True)
        with FileSystems.create(probe) as f:
            f.write(b"ok")
        FileSystems.delete([probe])
    except Exception as e:  # the filesystem's own error text names the cause
        raise JobError(job, f"output {output} is not writable: {str(e).splitlines()[0][:300]}")


def replace_outputs(output: str, names: Iterable[str]) -> None:
    """Deletes what an earlier run wrote under `output`, so no shards of two runs mix."""
    paths = [FileSystems.join(output, n) for n in names]
    existing = [p for p in paths if FileSystems.exists(p)]
    if existing:
        logging.info("Replacing earlier outputs: %s", ", ".join(existing))
        FileSystems.delete(existing)


def read_head(path: str, max_bytes: int = 1 << 20) -> str:
    """The first ~max_bytes of a (possibly compressed) text file, cut at a line end."""
    with FileSystems.open(path) as f:
        data = f.read(max_bytes)
    text = data.decode("utf-8", errors="replace")
    if len(data) == max_bytes and "\n" in text:
        text = text[: text.rindex("\n") + 1]
    return text


def write_text(path: str, text: str) -> None:
    if not is_remote_path(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with FileSystems.create(path) as f:
        f.write(text.encode("utf-8"))


def read_text(path: str) -> str:
    with FileSystems.open(path) as f:
        return f.read().decode("utf-8")


def copy_local_tree(src_dir: str, dst_dir: str) -> None:
    """Copies a local directory to any Beam filesystem (gs:// included) file by file."""
    for root, _, files in os.walk(src_dir):
        rel = os.path.relpath(root, src_dir)
        for name in files:
            dst = FileSystems.join(dst_dir, *([] if rel == "." else rel.split(os.sep)), name)
            with open(os.path.join(root, name), "rb") as src, FileSystems.create(dst) as out:
                shutil.copyfileobj(src, out)


def dead_letter(job: str, source: str, line: Optional[int], raw, reason: str, detail: str) -> str:
    """One dead-letter record as a JSON line: where it came from, what it was, and why."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    return json.dumps({"job": job, "source": source, "line": line, "raw": raw,
                       "reason": reason, "detail": detail}, ensure_ascii=False)


def reject(job: str, counters: dict, source: str, line, raw, reason: str, detail: str):
    """Counts a reject under `rejected_<reason>` (counters: reason -> Counter, filled lazily)
    and returns its dead-letter record on the `rejects` output."""
    counters.setdefault(reason, Metrics.counter(job, f"rejected_{reason}")).inc()
    return beam.pvalue.TaggedOutput("rejects", dead_letter(job, source, line, raw, reason, detail))


def resolve_uri(base: str, uri: str) -> str:
    """A uri as listed in a file under `base`: relative ones resolve against that folder."""
    if uri and "://" not in uri and not uri.startswith("/"):
        return FileSystems.join(base, uri)
    return uri


def detect_format(path: str) -> str:
    """Input format from a file name: .csv, .json/.jsonl/.ndjson, .tfrecord(s) (+ .gz/.bz2)."""
    name = path.lower()
    for ext in (".gz", ".bz2"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    if name.endswith((".json", ".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith((".tfrecord", ".tfrecords", ".tfr")):
        return "tfrecord"
    return "csv"


def read_records(f, fmt: str, decode_errors: list, first_line: int = 1):
    """(line or record number, record) from an open binary file: CSV records (quoted fields
    may span lines), non-empty JSON lines, or TFRecord records (numbered from 1). Lines that
    are not UTF-8 are appended to `decode_errors` as (line number, raw bytes, error) and
    skipped (their line numbers kept)."""
    if fmt == "tfrecord":
        from apache_beam.io.tfrecordio import _TFRecordUtil
        index = 0
        while True:
            record = _TFRecordUtil.read_record(f)
            if record is None:
                return
            index += 1
            yield index, record

    def lines():
        # CompressedFile (.gz/.bz2) has readline() but is not iterable.
        for line_no, raw in enumerate(iter(f.readline, b""), first_line):
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                decode_errors.append((line_no, raw, str(e)))
                yield "\n"  # keeps line numbers; the bad line is dead-lettered instead

    if fmt == "csv":
        yield from iter_csv_records(lines(), first_line)
    else:
        for line_no, text in enumerate(lines(), first_line):
            text = text.strip()
            if text:
                yield line_no, text


class CsvBlock:
    """Whole CSV records from one file, starting at line `first_line`: what the reader emits
    in block mode, so that splitting, decoding and parsing happen in the (parallel) parse
    step, column-wise (preprocessing.fast_csv). Either the raw bytes themselves (compressed
    files), or where they lie (`path`, byte `start` to `end` of an uncompressed file): the
    parse step then reads them itself and the data never goes through the shuffle."""

    __slots__ = ("first_line", "_data", "path", "start", "end")

    def __init__(self, first_line: int, data: Optional[bytes] = None, path: Optional[str] = None,
                 start: int = 0, end: int = 0):
        self.first_line, self._data = first_line, data
        self.path, self.start, self.end = path, start, end

    def __reduce__(self):
        return CsvBlock, (self.first_line, self._data, self.path, self.start, self.end)

    @property
    def data(self) -> bytes:
        if self._data is None:
            self._data = read_range(self.path, self.start, self.end)
        return self._data

    def records(self, decode_errors: list):
        """The block's records the row-by-row way (as `read_records` reads a file)."""
        import io
        return list(read_records(io.BytesIO(self.data), "csv", decode_errors, self.first_line))


def read_range(path: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of an uncompressed file (any Beam filesystem); an error, not a
    short block, if the file no longer holds them (it changed since it was scanned)."""
    parts, want = [], end - start
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.seek(start)
        while want:
            part = f.read(want)
            if not part:
                raise IOError(f"{path} changed while it was read: {end - start} bytes were "
                              f"expected at offset {start}, the file ends sooner")
            parts.append(part)
            want -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


# Not in a job module: the job may run as __main__, which workers cannot import from.
@functools.lru_cache(maxsize=2)  # a block's rejected rows ask one after another
def block_lines(path: str, start: int, end: int) -> list:
    """A byte range's lines (bytes, split at newlines), read again from the file."""
    return read_range(path, start, end).split(b"\n")


def _block_cut(data: bytes) -> int:
    """Length of the longest prefix of `data` (which starts at a record boundary) that ends
    at a record boundary: a newline after an even number of quotes; 0 if none is found.
    (Quotes are counted in bytes: only a line that is not UTF-8 and holds an odd number of
    quotes could make this differ from read_records, which reads such a line as empty.)"""
    end = data.rfind(b"\n")
    if end < 0:
        return 0
    quotes = count_byte(data, b'"', end)
    for _ in range(64):  # a quoted field spanning many lines: read on, the cut comes later
        if quotes % 2 == 0:
            return end + 1
        prev = data.rfind(b"\n", 0, end)
        if prev < 0:
            return 0
        quotes -= data.count(b'"', prev, end)
        end = prev
    return 0


def count_byte(data: bytes, byte: bytes, end: int) -> int:
    """data[:end].count(byte), vectorised (about 3x faster than bytes.count: the reader
    counts every byte of a file in one process before its blocks are parsed in parallel)."""
    return int(np.count_nonzero(np.frombuffer(data, np.uint8, count=end) == byte[0]))


class _LineCounter:
    """A binary file's readline(), counting the lines and bytes read."""

    def __init__(self, f):
        self.f, self.lines, self.bytes = f, 0, 0

    def readline(self):
        line = self.f.readline()
        self.lines += bool(line)
        self.bytes += len(line)
        return line


class _ReadChunks(beam.DoFn):
    """Reads one file into chunks of (line or record number, record), with the file's header.

    csv: records are CSV records (quoted fields may span lines), the first is the header;
    jsonl: one text line each; tfrecord: serialized records, numbered from 1. Reading a whole
    file in one DoFn gives exact positions for dead letters; a Reshuffle after it spreads the
    chunks over workers. With `block_bytes`, a CSV file's records after the header come as
    CsvBlocks of about that many bytes instead (counted as rows where they are parsed); for
    an uncompressed file these are byte ranges, so the file is only scanned here (for record
    boundaries and line numbers) and each parse step reads its own block.
    """

    def __init__(self, job: str, chunk_rows: int, fmt: str = "csv",
                 block_bytes: Optional[int] = None):
        self.job = job
        self.chunk_rows = chunk_rows
        self.fmt = fmt
        self.block_bytes = block_bytes
        self.rows_read = Metrics.counter(job, "rows_read")
        self.files_read = Metrics.counter(job, "files_read")
        self.bad_encoding = Metrics.counter(job, "rejected_bad_encoding")

    def process(self, readable: fileio.ReadableFile):
        path = readable.metadata.path
        fmt = detect_format(path) if self.fmt == "auto" else self.fmt
        self.files_read.inc()
        decode_errors = []
        header = None
        chunk, total, started = [], 0, time.time()
        with readable.open() as f:
            if fmt == "csv" and self.block_bytes:
                yield from self._blocks(path, f)
                return
            for pos, record in read_records(f, fmt, decode_errors):
                while decode_errors:
                    yield self._encoding_reject(path, *decode_errors.pop())
                if fmt == "csv" and header is None:
                    header = tuple(h.strip() for h in (split_fields([record])[0] or []))
                    continue
                chunk.append((pos, record))
                if len(chunk) >= self.chunk_rows:
                    total += len(chunk)
                    self.rows_read.inc(len(chunk))
                    yield (path, fmt, header, chunk)
                    chunk = []
                    if total % (50 * self.chunk_rows) < self.chunk_rows:
                        logging.info("%s: read %d rows of %s (%.0f rows/s)", self.job, total,
                                     path, total / max(time.time() - started, 1e-9))
        while decode_errors:
            yield self._encoding_reject(path, *decode_errors.pop())
        if chunk:
            total += len(chunk)
            self.rows_read.inc(len(chunk))
            yield (path, fmt, header, chunk)
        if fmt == "csv" and header is None:
            logging.warning("%s: %s is empty (no header row)", self.job, path)
        logging.info("%s: finished %s: %d rows", self.job, path, total)

    def _blocks(self, path, f):
        """The header record, then CsvBlocks cut at record boundaries."""
        counted, decode_errors, header = _LineCounter(f), [], None
        for _, record in read_records(counted, "csv", decode_errors):
            header = tuple(h.strip() for h in (split_fields([record])[0] or []))
            break
        for err in decode_errors:
            yield self._encoding_reject(path, *err)
        if header is None:
            logging.warning("%s: %s is empty (no header row)", self.job, path)
            return
        # An uncompressed file is only scanned here: its blocks go on as byte ranges.
        ranges = CompressionTypes.detect_compression_type(path) == CompressionTypes.UNCOMPRESSED
        start = counted.bytes

        def block(line, data, cut):
            if ranges:
                return CsvBlock(line, None, path, start, start + cut)
            return CsvBlock(line, data[:cut])

        line, carry, done, blocks, started = counted.lines + 1, b"", 0, 0, time.time()
        while True:
            data = f.read(self.block_bytes)
            if not data:
                break
            data = carry + data if carry else data
            cut = _block_cut(data)
            if cut == 0:
                carry = data
                continue
            yield (path, "csv", header, block(line, data, cut))
            line += count_byte(data, b"\n", cut)
            carry = data[cut:]
            start += cut
            done, blocks = done + cut, blocks + 1
            if blocks % 25 == 0:
                logging.info("%s: read %.0f MB of %s (%.1f MB/s)", self.job, done / 1e6, path,
                             done / 1e6 / max(time.time() - started, 1e-9))
        if carry:
            yield (path, "csv", header, block(line, carry, len(carry)))
        logging.info("%s: finished reading %s: %d lines", self.job, path, line - 1)

    def _encoding_reject(self, path, line_no, raw, err):
        self.rows_read.inc()
        self.bad_encoding.inc()
        return beam.pvalue.TaggedOutput(
            "rejects", dead_letter(self.job, path, line_no, raw, "bad_encoding", err))


class ReadChunks(beam.PTransform):
    """Globs -> (path, format, header, [(position, record), ...]) chunks, plus 'rejects'.

    Local paths and gs:// (or any Beam filesystem); .gz/.bz2 are decompressed by extension.
    `fmt` is csv, jsonl, tfrecord, or auto (by each file's extension). With `block_bytes`,
    CSV records come as CsvBlocks (see _ReadChunks).
    """

    def __init__(self, job: str, patterns: Sequence[str], chunk_rows: int = 2000,
                 fmt: str = "csv", block_bytes: Optional[int] = None):
        super().__init__()
        self.job = job
        self.patterns = list(patterns)
        self.chunk_rows = chunk_rows
        self.fmt = fmt
        self.block_bytes = block_bytes

    def expand(self, pbegin):
        read = (
            pbegin
            | "Patterns" >> beam.Create(self.patterns)
            | "Match" >> fileio.MatchAll()
            | "Open" >> fileio.ReadMatches()
            | "ReadChunks" >> beam.ParDo(_ReadChunks(self.job, self.chunk_rows, self.fmt,
                                                        self.block_bytes))
            .with_outputs("rejects", main="chunks")
        )
        # Files are read whole; redistribute their chunks so parsing runs in parallel.
        chunks = read.chunks | "Redistribute" >> beam.Reshuffle()
        return chunks, read.rejects


class WriteDeadLetters(beam.PTransform):
    """Writes dead-letter JSON lines under `<dir>/rejects-*.jsonl`."""

    def __init__(self, directory: str):
        super().__init__()
        self.directory = directory

    def expand(self, pcoll):
        return pcoll | "WriteRejects" >> beam.io.WriteToText(
            FileSystems.join(self.directory, "rejects"), file_name_suffix=".jsonl")


def query_counters(result, namespace: str) -> dict:
    """Counter name -> value for one namespace (committed where the runner reports it)."""
    out = {}
    for c in result.metrics().query(MetricsFilter().with_namespace(namespace))["counters"]:
        value = c.committed if c.committed is not None else c.attempted
        out[c.key.metric.name] = out.get(c.key.metric.name, 0) + (value or 0)
    return out


def rejects_by_reason(counters: dict) -> dict:
    """`rejected_<reason>` counters -> {reason: count}, zero counts left out."""
    return {k[len("rejected_"):]: v for k, v in counters.items()
            if k.startswith("rejected_") and v}


def local_tmp_dir(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix)


def dumps_json(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"

