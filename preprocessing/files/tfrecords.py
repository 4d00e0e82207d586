"""Writing tf.Example TFRecords a batch at a time: the preprocess job's output format.

Beam's `WriteToTFRecord` takes one element per record: for a million rows that is a million
trips through the runner, a Python crc and a compressor call each. Here an element is a whole
transformed RecordBatch, encoded to tf.Examples in C++ (tfx_bsl's RecordBatchToExamplesEncoder,
as tf.transform's EncodeTransformedDataset does) and framed as TFRecords (length, masked
crc32c of the length, data, masked crc32c of the data) into one bytes blob; the sink writes
blobs through Beam's FileBasedSink (temp files, then an atomic rename of the shards), gzip
at `level` (1 by default: ~3x faster to write than zlib's default 6, for ~18% larger taxi files;
any level is read by the same `TFRecordDataset(compression_type="GZIP")`).

Encoding, framing and compressing run on threads of the file's writer (`BackgroundWriter`):
tfx_bsl's encoder and zlib release the GIL, so they overlap the transform of the next batch.
In a one-process local run that used the second core, idle until then (a 1M-row preprocess:
see the README's performance notes). A batch reaches the writer as `PendingFrames`; where a
runner does not fuse the two steps it is pickled as its framed bytes.
"""
from __future__ import annotations

import queue
import struct
import threading
import zlib
from concurrent import futures
from typing import Optional, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.coders import coders
from apache_beam.io.filebasedsink import FileBasedSink
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.iobase import Write
from apache_beam.io.tfrecordio import _default_crc32c_fn

GZIP_LEVEL = 1  # the default of --gzip_level (see the module docstring for why)
_MASK_DELTA = 0xA282EAD8
_LEN = struct.Struct("<Q")


def _crc32c():
    try:
        import google_crc32c
        return google_crc32c.value
    except ImportError:  # Beam's own fallbacks (snappy, crcmod)
        return _default_crc32c_fn


def _masked(crcs) -> np.ndarray:
    """TFRecord's masked crc32c of each crc, as little-endian uint32."""
    c = np.asarray(crcs, dtype=np.uint64)
    return ((((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF).astype("<u4")


def frame_records(records: Sequence[bytes]) -> bytes:
    """Serialized records -> their TFRecord framing, concatenated (what TFRecordWriter writes):
    per record its length (uint64), the masked crc32c of the length, the data, the masked
    crc32c of the data. The crcs are one C call per record; the rest is vectorised or cached
    (a batch's records have few distinct lengths)."""
    crc = _crc32c()
    lengths = [len(r) for r in records]
    heads = {}
    for n in set(lengths):
        packed = _LEN.pack(n)
        heads[n] = packed + _masked([crc(packed)]).tobytes()
    tails = _masked([crc(r) for r in records]).tobytes()
    parts = []
    for i, (r, n) in enumerate(zip(records, lengths)):
        parts += (heads[n], r, tails[4 * i:4 * i + 4])
    return b"".join(parts)


class PendingFrames:
    """Rows [start, stop) of a transformed RecordBatch, to become framed tf.Example records
    when the writer's thread asks (`frame()`). Pickled (an unfused step boundary, a shuffle
    before fixed shards), it is its framed bytes."""

    __slots__ = ("encoder", "batch", "start", "stop")

    def __init__(self, encoder, batch, start: int = 0, stop: Optional[int] = None):
        self.encoder, self.batch = encoder, batch
        self.start, self.stop = start, batch.num_rows if stop is None else stop

    def frame(self) -> bytes:
        rows = self.batch
        if self.start or self.stop != rows.num_rows:
            rows = rows.slice(self.start, self.stop - self.start)
        return frame_records(self.encoder.encode(rows))

    def __reduce__(self):
        return bytes, (self.frame(),)


class PendingFramesCoder(coders.Coder):
    """PendingFrames' coder: encoded, they are their framed bytes (decoded: those bytes, which
    the writer takes too). Its size estimate is the batch's Arrow size: Beam estimates the
    size of sampled elements, and encoding for that would encode and frame on the bundle's
    own thread."""

    def encode(self, value) -> bytes:
        return value.frame() if isinstance(value, PendingFrames) else value

    def decode(self, encoded: bytes) -> bytes:
        return encoded

    def estimate_size(self, value) -> int:
        if isinstance(value, PendingFrames):
            rows = max(1, value.batch.num_rows)
            return value.batch.nbytes * (value.stop - value.start) // rows
        return len(value)

    def is_deterministic(self) -> bool:
        return True


beam.coders.registry.register_coder(PendingFrames, PendingFramesCoder)


class BackgroundWriter:
    """A writable file that encodes and frames PendingFrames on ENCODERS threads, and
    gzip-compresses (level >= 0) and writes on a thread of its own, in the order written.
    At most QUEUED batches wait, so memory stays bounded (write() waits when they do); an
    error on those threads is raised by the next write() or by close()."""

    ENCODERS = 2  # encoding is the larger half of the work (~3 us a taxi row; gzip ~1.5)
    QUEUED = 4

    def __init__(self, raw, level: int):
        self.raw = raw
        self.zip = (zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
                    if level >= 0 else None)
        self.encoders = futures.ThreadPoolExecutor(self.ENCODERS,
                                                   thread_name_prefix="tfrecord-encode")
        self.todo: queue.Queue = queue.Queue(maxsize=self.QUEUED)
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, name="tfrecord-write", daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            item = self.todo.get()
            if item is None:
                return
            if self.error is not None:
                continue  # failed: drain what is queued until close()
            try:
                data = item.result() if isinstance(item, futures.Future) else item
                self.raw.write(self.zip.compress(data) if self.zip else data)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                self.error = e

    def _raise_error(self):
        if self.error is not None:
            raise self.error

    def write(self, data):
        self._raise_error()
        if isinstance(data, PendingFrames):
            data = self.encoders.submit(data.frame)
        self.todo.put(data)

    def flush(self):
        pass  # write order is kept; close() writes everything

    def close(self):
        self.todo.put(None)
        self.thread.join()
        self.encoders.shutdown(wait=True)
        try:
            self._raise_error()
            if self.zip:
                self.raw.write(self.zip.flush())
        finally:
            self.raw.close()  # also after an error: the temporary file is not left open


class FramedTFRecordSink(FileBasedSink):
    """A FileBasedSink whose elements are PendingFrames or blobs of framed TFRecords."""

    def __init__(self, file_path_prefix: str, file_name_suffix: str, num_shards: int,
                 level: int):
        super().__init__(file_path_prefix, coder=coders.BytesCoder(),
                         file_name_suffix=file_name_suffix, num_shards=num_shards,
                         shard_name_template=None, mime_type="application/octet-stream",
                         compression_type=CompressionTypes.UNCOMPRESSED)
        self.level = level

    def open(self, temp_path):
        raw = FileSystems.create(temp_path, self.mime_type, CompressionTypes.UNCOMPRESSED)
        return BackgroundWriter(raw, self.level)

    def write_record(self, file_handle, value):
        file_handle.write(value)  # framed (and encoded first, if pending) on its thread


class EncodeAndFrame(beam.DoFn):
    """(transformed RecordBatch, passthrough) -> PendingFrames of its tf.Example records: one,
    or with a fixed shard count `parts` equal slices (Beam's sink deals elements to shards
    round robin, so every shard gets a slice of every batch: shards stay even). The encoder
    is built once per schema (a side input: the transformed schema is known only once the
    transform is analyzed); the sink's writer thread encodes and frames."""

    def __init__(self, parts: int = 1):
        self.parts = max(1, parts)

    def setup(self):
        self._encoder, self._schema = None, None

    def process(self, element, schema):
        from tfx_bsl.coders import example_coder
        if self._encoder is None or schema is not self._schema:
            self._encoder = example_coder.RecordBatchToExamplesEncoder(schema)
            self._schema = schema
        batch = element[0]
        n = batch.num_rows
        for k in range(self.parts):
            yield PendingFrames(self._encoder, batch, n * k // self.parts,
                                n * (k + 1) // self.parts)


class WriteExampleBatches(beam.PTransform):
    """(transformed RecordBatch, passthrough) pairs and the transformed metadata ->
    PREFIX-SSSSS-of-NNNNN.tfrecord.gz files of tf.Examples (one per row)."""

    def __init__(self, prefix: str, num_shards: int = 0, level: int = GZIP_LEVEL):
        super().__init__()
        self.prefix, self.num_shards, self.level = prefix, num_shards, level

    def _extract_input_pvalues(self, batches_and_metadata):
        return batches_and_metadata, [batches_and_metadata[0]]

    def expand(self, batches_and_metadata):
        batches, metadata = batches_and_metadata
        schema = (metadata.deferred_metadata
                  | "TransformedSchema" >> beam.Map(lambda m: m.schema))
        return (batches
                | "EncodeAndFrame" >> beam.ParDo(EncodeAndFrame(self.num_shards),
                                                 beam.pvalue.AsSingleton(schema)
                                                 ).with_output_types(PendingFrames)
                | "Write" >> Write(FramedTFRecordSink(self.prefix, ".tfrecord.gz",
                                                      self.num_shards, self.level)))
