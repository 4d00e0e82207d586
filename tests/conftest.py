"""Shared fixtures: small generated data, a preprocessed output, and a local GCS emulator."""
from __future__ import annotations

import csv
import os
import random
import shutil

import pytest

from tests.helpers import built_once, small_train_config

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Session fixtures that run a whole job (or start an emulator): a test that needs one is an
# end-to-end test, whatever its own duration.
END_TO_END_FIXTURES = {"preprocessed", "trained", "trained_trees", "trained_images", "gcs_emulator",
                       "pubsub_emulator", "bigquery_emulator", "shuffled_export", "nan_export"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if END_TO_END_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def taxi_csv(tmp_path_factory):
    """3,000 generated taxi rows with the default share of dirty rows, and its stats."""
    from tools.datagen import write_csv

    def build(folder):
        path = str(folder / "taxi.csv")
        return path, write_csv(path, 3000, seed=11, dirty_fraction=0.03)
    return built_once(tmp_path_factory, "data", build)


@pytest.fixture(scope="session")
def preprocessed(taxi_csv, tmp_path_factory):
    """The preprocess job's output on `taxi_csv` with the taxi spec, with a test split (the
    tuner's best trial is shown on it; the default split has none)."""
    from beam_jobs import preprocess
    from preprocessing import TAXI_SPEC

    def build(folder):
        out = str(folder / "out")
        return out, preprocess.run(["--input", taxi_csv[0], "--output", out,
                                    "--schema_spec", TAXI_SPEC, "--num_shards", "2",
                                    "--split", "0.8,0.1,0.1"])
    return built_once(tmp_path_factory, "prep", build)


@pytest.fixture(scope="session")
def preprocessed_by_two_workers(taxi_csv, tmp_path_factory):
    """`taxi_csv` preprocessed again, by two worker processes (Beam's multi-processing
    runner) with batches of 300 rows: the output folder."""
    from beam_jobs import preprocess
    from preprocessing import TAXI_SPEC

    def build(folder):
        out = str(folder / "out")
        preprocess.run(["--input", taxi_csv[0], "--output", out, "--schema_spec", TAXI_SPEC,
                        "--split", "0.8,0.1,0.1", "--direct_num_workers", "2",
                        "--direct_running_mode", "multi_processing", "--rows_per_batch", "300"])
        return out
    return built_once(tmp_path_factory, "prep2", build)


def _no_gcp_credentials_here():
    """Tell Beam at once what it would find: this machine has no Google credentials, so its
    GCS IO connects anonymously (as the emulator expects). Beam looks them up once per process,
    retrying with backoff for ~21 s before it gives up: a test worker would sleep that long."""
    from apache_beam.internal.gcp import auth
    with auth._Credentials._credentials_lock:
        if not auth._Credentials._credentials_init:
            auth._Credentials._credentials, auth._Credentials._credentials_init = None, True


@pytest.fixture(scope="session")
def gcs_data_dir(tmp_path_factory):
    """The GCS emulator's storage folder (the BigQuery emulator loads gs:// files from it)."""
    return str(tmp_path_factory.mktemp("gcs"))


@pytest.fixture(scope="session")
def gcs_emulator(gcs_data_dir):
    """A real local GCS (gcp-storage-emulator) on loopback, on disk; yields its endpoint.

    Beam's GCS IO talks to it through STORAGE_EMULATOR_HOST with anonymous credentials.
    """
    from tools import gcs_emulator
    try:
        proc, endpoint = gcs_emulator.start(default_bucket="test-bucket", data_dir=gcs_data_dir)
    except RuntimeError as e:
        pytest.fail(str(e))
    old = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    _no_gcp_credentials_here()
    try:
        yield endpoint
    finally:
        if old is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = old
        proc.terminate()
        proc.wait(timeout=10)




@pytest.fixture(scope="session")
def trained(preprocessed, tmp_path_factory):
    """A small model trained on `preprocessed`, its eval metrics sliced by a string and a
    number column: (data_dir, job_dir, metrics)."""
    from training import train_and_evaluate
    data_dir, _ = preprocessed

    def build(folder):
        return data_dir, str(folder), train_and_evaluate(small_train_config(
            data_dir, str(folder), slice_by=("payment_type", "passenger_count")))
    return built_once(tmp_path_factory, "job", build)


@pytest.fixture(scope="session")
def trained_trees(preprocessed, tmp_path_factory):
    """Boosted trees trained on `preprocessed` (--model boosted_trees): (data_dir, job_dir,
    metrics)."""
    from training import train_and_evaluate
    data_dir, _ = preprocessed

    def build(folder):
        return data_dir, str(folder), train_and_evaluate(small_train_config(
            data_dir, str(folder), model="boosted_trees", num_trees=60))
    return built_once(tmp_path_factory, "trees", build)


@pytest.fixture(scope="session")
def trained_blend(preprocessed, tmp_path_factory):
    """The network and boosted trees blended (--model blend): (data_dir, job_dir, metrics)."""
    from training import train_and_evaluate
    data_dir, _ = preprocessed

    def build(folder):
        return data_dir, str(folder), train_and_evaluate(small_train_config(
            data_dir, str(folder), model="blend", num_trees=60))
    return built_once(tmp_path_factory, "blend", build)


@pytest.fixture(scope="session")
def shuffled_export(taxi_csv, tmp_path_factory):
    """An export trained on the taxi rows with fare_amount shuffled among them."""
    from beam_jobs import preprocess
    from preprocessing import TAXI_SPEC
    from training import train_and_evaluate

    def build(root):
        with open(taxi_csv[0], newline="") as f:
            rows = list(csv.reader(f))
        header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
        label = header.index("fare_amount")
        fares = [r[label] for r in body]
        random.Random(3).shuffle(fares)
        with open(root / "shuffled.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(r[:label] + [fare] + r[label + 1:] for r, fare in zip(body, fares))
        preprocess.run(["--input", str(root / "shuffled.csv"), "--output", str(root / "prep"),
                        "--schema_spec", TAXI_SPEC, "--num_shards", "1"])
        return train_and_evaluate(small_train_config(str(root / "prep"), str(root / "job"),
                                                     epochs=2))["export_dir"]
    return built_once(tmp_path_factory, "shuffled", build)


@pytest.fixture(scope="session")
def nan_export(trained, tmp_path_factory):
    """The trained export with its output layer's weights set to NaN."""
    import tensorflow as tf
    src = trained[2]["export_dir"]

    def build(folder):
        module = tf.saved_model.load(src)
        weights = [v for v in module.signatures["predict_raw"].variables
                   if v.trainable and v.dtype.is_floating]
        weights[-1].assign(tf.fill(weights[-1].shape, float("nan")))
        out = str(folder / "export")
        tf.saved_model.save(module, out, signatures=dict(module.signatures))
        shutil.copytree(os.path.join(src, "assets.extra"), os.path.join(out, "assets.extra"))
        return out
    return built_once(tmp_path_factory, "nan", build)


@pytest.fixture(scope="session")
def trained_images(tmp_path_factory):
    """A tiny image classifier: generated shapes (30 per class) -> preprocess --format images
    -> 2 epochs. Returns (image folder, preprocessed dir, metrics)."""
    from beam_jobs import preprocess
    from tools import shapes
    from training import train_and_evaluate

    def build(root):
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
    return built_once(tmp_path_factory, "images", build)


@pytest.fixture(scope="session")
def pubsub_emulator():
    """The real Pub/Sub emulator on loopback (tools/pubsub_emulator.py); yields its host and
    sets PUBSUB_EMULATOR_HOST while it runs. Skips, saying how to install it, where absent."""
    from tools import pubsub_emulator
    if not pubsub_emulator.available():
        pytest.skip(pubsub_emulator.INSTALL_HINT)
    try:
        emulator = pubsub_emulator.PubSubEmulator()
    except pubsub_emulator.EmulatorError as e:
        pytest.fail(str(e))
    old = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host
    try:
        yield emulator.host
    finally:
        emulator.stop()
        if old is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = old


@pytest.fixture(scope="session")
def bigquery_emulator(gcs_emulator, gcs_data_dir):
    """The BigQuery emulator on loopback (tools/bigquery_emulator.py), its load jobs reading
    gs:// files from the GCS emulator's storage; sets BIGQUERY_EMULATOR_HOST while it runs.
    Skips, saying how to install it, where absent (`make test` installs it)."""
    from tools import bigquery_emulator
    from tools import gcs_emulator as gcs
    if not bigquery_emulator.available():
        pytest.skip(bigquery_emulator.INSTALL_HINT)
    try:
        emulator = bigquery_emulator.BigQueryEmulator(gcs_root=gcs.storage_root(gcs_data_dir))
    except bigquery_emulator.EmulatorError as e:
        pytest.fail(str(e))
    old = os.environ.get("BIGQUERY_EMULATOR_HOST")
    os.environ["BIGQUERY_EMULATOR_HOST"] = emulator.host
    try:
        yield emulator
    finally:
        if old is None:
            os.environ.pop("BIGQUERY_EMULATOR_HOST", None)
        else:
            os.environ["BIGQUERY_EMULATOR_HOST"] = old
        emulator.stop()
