"""Shared fixtures: small generated data, a preprocessed output, and a local GCS emulator."""
from __future__ import annotations

import glob
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")



@pytest.fixture(scope="session")
def taxi_csv(tmp_path_factory):
    """3,000 generated taxi rows with the default share of dirty rows, and its stats."""
    from tools.datagen import write_csv
    path = str(tmp_path_factory.mktemp("data") / "taxi.csv")
    stats = write_csv(path, 3000, seed=11, dirty_fraction=0.03)
    return path, stats


@pytest.fixture(scope="session")
def preprocessed(taxi_csv, tmp_path_factory):
    """The preprocess job's output on `taxi_csv` with the taxi spec."""
    from beam_jobs import preprocess
    from preprocessing import TAXI_SPEC
    out = str(tmp_path_factory.mktemp("prep") / "out")
    summary = preprocess.run(["--input", taxi_csv[0], "--output", out,
                              "--schema_spec", TAXI_SPEC, "--num_shards", "2"])
    return out, summary


def read_examples(pattern: str, feature_spec: dict) -> dict:
    """All records of gzip TFRecord files, parsed into one dict of numpy arrays."""
    import tensorflow as tf
    files = sorted(glob.glob(pattern))
    assert files, f"no files match {pattern}"
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(1_000_000)
    out = {k: [] for k in feature_spec}
    for batch in ds:
        parsed = tf.io.parse_example(batch, feature_spec)
        for k in out:
            out[k].extend(parsed[k].numpy().tolist())
    return out


def make_example(d: dict) -> bytes:
    """A serialized tf.Example of one value per feature (float, int or str)."""
    import tensorflow as tf
    feats = {}
    for k, v in d.items():
        if isinstance(v, float):
            feats[k] = tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
        elif isinstance(v, int):
            feats[k] = tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
        else:
            b = v if isinstance(v, bytes) else v.encode()
            feats[k] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[b]))
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()


def read_jsonl(pattern: str) -> list:
    rows = []
    for f in sorted(glob.glob(pattern)):
        with open(f) as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    return rows


@pytest.fixture(scope="session")
def gcs_emulator():
    """A real local GCS (gcp-storage-emulator) on loopback; yields its endpoint.

    Beam's GCS IO talks to it through STORAGE_EMULATOR_HOST with anonymous credentials.
    """
    from tools import gcs_emulator
    try:
        proc, endpoint = gcs_emulator.start(default_bucket="test-bucket")
    except RuntimeError as e:
        pytest.fail(str(e))
    old = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    try:
        yield endpoint
    finally:
        if old is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = old
        proc.terminate()
        proc.wait(timeout=10)


def small_train_config(data_dir, job_dir, **kw):
    from training.config import TrainConfig
    base = dict(data_dir=data_dir, job_dir=job_dir, epochs=4, batch_size=128,
                hidden_units=[32, 16], shuffle_buffer=5000, verbose=0,
                early_stopping_patience=0)  # every epoch runs: tests read epoch checkpoints
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="session")
def trained(preprocessed, tmp_path_factory):
    """A small model trained on `preprocessed`: (data_dir, job_dir, metrics)."""
    from training import train_and_evaluate
    data_dir, _ = preprocessed
    job_dir = str(tmp_path_factory.mktemp("job"))
    metrics = train_and_evaluate(small_train_config(data_dir, job_dir))
    return data_dir, job_dir, metrics


@pytest.fixture(scope="session")
def trained_images(tmp_path_factory):
    """A tiny image classifier: generated shapes (30 per class) -> preprocess --format images
    -> 2 epochs. Returns (image folder, preprocessed dir, metrics)."""
    from beam_jobs import preprocess
    from tools import shapes
    from training import train_and_evaluate
    root = tmp_path_factory.mktemp("images")
    folder = str(root / "shapes")
    shapes.generate(folder, per_class=30, seed=2)
    os.remove(os.path.join(folder, "labels.csv"))
    data = str(root / "prep")
    preprocess.run(["--format", "images", "--input", folder, "--output", data,
                    "--num_shards", "2"])
    metrics = train_and_evaluate(small_train_config(data, str(root / "job"), epochs=2,
                                                    batch_size=16, hidden_units=[16],
                                                    augment=True))
    return folder, data, metrics
