"""Helpers the tests share (fixtures live in conftest.py): reading outputs back, making
tf.Examples, a small training config, a valid taxi row."""
from __future__ import annotations

import fcntl
import glob
import os
import pathlib
import pickle
import re
import shutil

from preprocessing import quiet
from tools.outputs import read_jsonl  # noqa: F401 (the tests' one reader)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GOOD = {"pickup_datetime": "2025-06-02 08:15:00", "pickup_longitude": -73.95,
        "pickup_latitude": 40.75, "dropoff_longitude": -73.9, "dropoff_latitude": 40.8,
        "passenger_count": 1, "payment_type": "Cash", "company": "Sun Taxi"}


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


def small_train_config(data_dir, job_dir, **kw):
    from training.config import TrainConfig
    # The network (the tests of training mechanics need one); model families: test_model_families.
    base = dict(data_dir=data_dir, job_dir=job_dir, epochs=4, batch_size=128,
                hidden_units=[32, 16], shuffle_buffer=5000, verbose=0, model="wide_deep",
                early_stopping_patience=0)  # every epoch runs: tests read epoch checkpoints
    base.update(kw)
    return TrainConfig(**base)


def keras_layers_saved(export_dir: str) -> int:
    """How many Keras layers an export's SavedModel object graph holds. training/holding.py
    saves a network's variables, not its layers: saving those traces every layer's call."""
    from tensorflow.core.protobuf import saved_model_pb2
    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    layers = {"_tf_keras_layer", "_tf_keras_input_layer", "_tf_keras_network"}
    return sum(n.WhichOneof("kind") == "user_object" and n.user_object.identifier in layers
               for n in sm.meta_graphs[0].object_graph_def.nodes)


# What must never reach a quiet terminal (preprocessing/quiet.py): C++ log lines, absl's, CUDA's.
LIBRARY_LINE = re.compile(quiet.CPP_LINE.decode() + r"|absl|cuda|oneDNN|WARNING:tensorflow",
                          re.IGNORECASE)


def library_lines(text: str) -> list:
    """The lines of a job's output that are TensorFlow's, absl's or CUDA's."""
    return [line for line in text.splitlines() if LIBRARY_LINE.search(line)]


def chromium_path():
    """Debian's headless browser, or None (tests that need it skip and say how to get it)."""
    import shutil
    return shutil.which("chromium") or shutil.which("chromium-browser")


CHROMIUM_MISSING = "Chromium is not installed: apt-get install chromium"


def render_page(html_path: str, png_path: str, width: int = 412) -> str:
    """Renders a local HTML file in headless Chromium at a phone's width: writes a
    screenshot to `png_path` and returns the DOM as the browser built it."""
    import subprocess
    base = [chromium_path(), "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--hide-scrollbars", f"--window-size={width},2400"]
    url = "file://" + os.path.abspath(html_path)
    subprocess.run(base + [f"--screenshot={png_path}", url], check=True, capture_output=True,
                   timeout=120)
    dom = subprocess.run(base + ["--dump-dom", url], check=True, capture_output=True,
                         text=True, timeout=120)
    return dom.stdout


def late_decimals_csv(rows=12_000, late_from=10_500):
    """A CSV whose price column turns decimal only after row `late_from`: type inference
    must read the whole input, not its head."""
    lines = ["x,price,y"]
    for i in range(rows):
        price = f"{50 + i % 9}.0" if i < late_from else f"{50 + i % 9}.3"
        lines.append(f"{i % 17},{price},{(i * 7) % 11}.5")
    return "\n".join(lines) + "\n"


def built_once(tmp_path_factory, name: str, build):
    """`build(folder)` of a session fixture, run once for all of pytest-xdist's workers: the
    first worker to ask builds it in the run's shared temp folder while the others wait on
    a lock, then read its (pickled) result. `make test` also shares that folder with its
    second pytest run (TESTS_SHARED_DIR). Without either: built here. Each worker used to
    build the same trained model for itself, on the same two cores."""
    if os.environ.get("TESTS_SHARED_DIR"):
        shared = pathlib.Path(os.environ["TESTS_SHARED_DIR"])
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "shared"
    else:
        return build(tmp_path_factory.mktemp(name))
    shared.mkdir(exist_ok=True)
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = shared / f"{name}.pickle"
        if done.exists():
            return pickle.loads(done.read_bytes())
        folder = shared / name
        shutil.rmtree(folder, ignore_errors=True)  # a build that failed in another worker
        folder.mkdir()
        result = build(folder)
        done.write_bytes(pickle.dumps(result))
        return result
