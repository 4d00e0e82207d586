"""preprocessing/files/tfrecords.py: the batch TFRecord writer's background encoding and writing."""
import os
import pickle
import threading
import time

import numpy as np
import pyarrow as pa
import pytest
from tfx_bsl.coders import example_coder

from preprocessing.files import tfrecords
from preprocessing.files.tfrecords import PendingFrames, PendingFramesCoder, frame_records


def _batch(start: int, n: int) -> pa.RecordBatch:
    ids = np.arange(start, start + n)
    return pa.RecordBatch.from_arrays(
        [pa.array([[float(i)] for i in ids], pa.large_list(pa.float32())),
         pa.array([[int(i)] for i in ids], pa.large_list(pa.int64()))], names=["x", "id"])


def _read(path: str):
    import tensorflow as tf
    spec = {"id": tf.io.FixedLenFeature([], tf.int64), "x": tf.io.FixedLenFeature([], tf.float32)}
    ds = tf.data.TFRecordDataset(path, compression_type="GZIP").map(
        lambda r: tf.io.parse_single_example(r, spec))
    return [(int(e["id"]), float(e["x"])) for e in ds.as_numpy_iterator()]


def test_pending_frames_and_bytes_are_written_in_order_as_gzip_tfrecords(tmp_path):
    """Batches framed on the encoder threads and blobs framed by the caller, interleaved,
    come back in the order written; slices keep exactly their rows."""
    encoder = example_coder.RecordBatchToExamplesEncoder()
    path = str(tmp_path / "part.tfrecord.gz")
    sink = tfrecords.FramedTFRecordSink(str(tmp_path / "part"), ".tfrecord.gz", 0, level=1)
    handle = sink.open(path)
    expected = []
    for k in range(40):
        batch = _batch(1000 * k, 50 + k)
        if k % 3 == 0:  # an already framed blob
            sink.write_record(handle, frame_records(encoder.encode(batch)))
            expected += range(1000 * k, 1000 * k + 50 + k)
        else:  # a slice, encoded on a pool thread
            sink.write_record(handle, PendingFrames(encoder, batch, 5, 40))
            expected += range(1000 * k + 5, 1000 * k + 40)
    sink.close(handle)
    got = _read(path)
    assert [i for i, _ in got] == expected
    assert all(float(i) == x for i, x in got)


def _ids(framed: bytes):
    """The id of each record of a framed blob (the encoder's feature order varies, so the
    records are compared parsed)."""
    from tensorflow.core.example import example_pb2
    ids, pos = [], 0
    while pos < len(framed):
        n = int.from_bytes(framed[pos:pos + 8], "little")
        record = framed[pos + 12:pos + 12 + n]
        ids.append(example_pb2.Example.FromString(record).features.feature["id"].int64_list.value[0])
        pos += 12 + n + 4
    return ids


def test_pending_frames_pickle_as_their_framed_bytes_and_size_without_encoding():
    encoder = example_coder.RecordBatchToExamplesEncoder()
    batch = _batch(0, 100)
    pending = PendingFrames(encoder, batch, 10, 60)
    framed = pickle.loads(pickle.dumps(pending))
    assert isinstance(framed, bytes) and _ids(framed) == list(range(10, 60))
    coder = PendingFramesCoder()
    assert _ids(coder.decode(coder.encode(pending))) == list(range(10, 60))
    assert coder.decode(coder.encode(b"framed")) == b"framed"

    class NoEncoding:
        def encode(self, _):
            raise AssertionError("a size estimate must not encode")
    estimate = coder.estimate_size(PendingFrames(NoEncoding(), batch, 0, 50))
    assert estimate == batch.nbytes // 2


class _FailingEncoder:
    def encode(self, batch):
        raise ValueError("cannot encode this batch")


def test_an_encoding_error_on_a_pool_thread_is_raised_to_the_caller(tmp_path):
    path = str(tmp_path / "part.tfrecord.gz")
    sink = tfrecords.FramedTFRecordSink(str(tmp_path / "part"), ".tfrecord.gz", 0, level=1)
    handle = sink.open(path)
    sink.write_record(handle, PendingFrames(_FailingEncoder(), _batch(0, 10)))
    with pytest.raises(ValueError, match="cannot encode"):
        for _ in range(20):  # a later write, or else close(), reports it
            sink.write_record(handle, b"")
            time.sleep(0.01)
        sink.close(handle)


class _BlockedFile:
    """A raw file whose writes wait until released."""

    def __init__(self):
        self.release = threading.Event()
        self.data = []

    def write(self, b):
        self.release.wait()
        self.data.append(b)

    def close(self):
        pass


class _CountingEncoder:
    def __init__(self):
        self.calls = 0
        self.inner = example_coder.RecordBatchToExamplesEncoder()

    def encode(self, batch):
        self.calls += 1
        return self.inner.encode(batch)


@pytest.mark.slow
def test_a_slow_file_holds_back_the_caller_so_memory_stays_bounded():
    raw, encoder = _BlockedFile(), _CountingEncoder()
    writer = tfrecords.BackgroundWriter(raw, level=1)
    done = threading.Event()

    def produce():
        for k in range(50):
            writer.write(PendingFrames(encoder, _batch(k, 10)))
        done.set()

    threading.Thread(target=produce, daemon=True).start()
    time.sleep(1.0)
    assert not done.is_set()  # waiting for the file
    # the batch being written, QUEUED waiting, and the one the caller is handing over
    assert encoder.calls <= tfrecords.BackgroundWriter.QUEUED + 2
    raw.release.set()
    assert done.wait(10)
    writer.close()
    assert encoder.calls == 50


def test_close_reports_an_encoding_error_and_still_closes_the_file(tmp_path):
    sink = tfrecords.FramedTFRecordSink(str(tmp_path / "part"), ".tfrecord.gz", 0, level=1)
    handle = sink.open(str(tmp_path / "part.tfrecord.gz"))
    handle.write(PendingFrames(_FailingEncoder(), _batch(0, 10)))
    with pytest.raises(ValueError, match="cannot encode"):
        sink.close(handle)
    assert handle.raw.closed


def test_write_example_batches_shards_every_row_and_applies_the_gzip_level(tmp_path):
    """WriteExampleBatches (the preprocess job's split writer) under TestPipeline: every row
    of every batch is one tf.Example in the requested shards, and --gzip_level 9 writes the
    same records in smaller files than the default level 1."""
    import glob
    import types

    import apache_beam as beam
    import tensorflow as tf
    from apache_beam.testing.test_pipeline import TestPipeline
    from tensorflow_transform.tf_metadata import schema_utils

    from beam_jobs.shared.local_runner import LocalRunner
    schema = schema_utils.schema_from_feature_spec({
        "id": tf.io.FixedLenFeature([], tf.int64), "x": tf.io.FixedLenFeature([], tf.float32)})
    batches = [(_batch(1000 * k, 300), None) for k in range(6)]
    with TestPipeline(runner=LocalRunner()) as p:
        metadata = types.SimpleNamespace(
            deferred_metadata=p | "Metadata" >> beam.Create([types.SimpleNamespace(schema=schema)]))
        data = p | "Batches" >> beam.Create(batches, reshuffle=False)
        for level in (1, 9):
            _ = (data, metadata) | f"Write{level}" >> tfrecords.WriteExampleBatches(
                str(tmp_path / f"level{level}" / "part"), num_shards=2, level=level)
    expected = sorted(1000 * k + i for k in range(6) for i in range(300))
    sizes = {}
    for level in (1, 9):
        files = sorted(glob.glob(str(tmp_path / f"level{level}" / "part-*.tfrecord.gz")))
        assert [f.rsplit("/", 1)[-1] for f in files] == [
            "part-00000-of-00002.tfrecord.gz", "part-00001-of-00002.tfrecord.gz"]
        assert sorted(i for f in files for i, _ in _read(f)) == expected
        sizes[level] = sum(os.path.getsize(f) for f in files)
    assert sizes[9] < sizes[1], sizes
