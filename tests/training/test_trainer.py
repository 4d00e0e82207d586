"""train_and_evaluate: convergence, export signatures, distribution, resume, manifests."""
import contextlib
import glob
import io
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import yaml

from preprocessing.accounting import rejects
from preprocessing.parsing import row_parser
from tests.helpers import ROOT, keras_layers_saved, library_lines, read_examples, read_jsonl
from tests.helpers import small_train_config as _cfg
from training import task
from training.config import ConfigError


def _has_batch_norm(export_dir):
    """Whether an export's variables include batch-norm moving statistics (the example
    --model_module has them; the built-in models do not)."""
    path = os.path.join(export_dir, "variables", "variables")
    return any("moving_mean" in name for name, _ in tf.train.list_variables(path))


def _raw_rows(csv_path, schema):
    """key -> {column: typed value} for every clean row of the CSV."""
    import csv
    with open(csv_path, newline="") as f:
        reader = csv.reader(f)
        p = row_parser.RowParser(schema, next(reader))
        rows = {}
        for fields in reader:
            try:
                values = p.parse(fields)
            except rejects.Reject:
                continue
            rows[values[0]] = dict(zip(schema.names, values))
    return rows


def _example(row, columns):
    feats = {}
    for c in columns:
        v = row[c.name]
        if c.type == "float":
            feats[c.name] = tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
        elif c.type == "int":
            feats[c.name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
        else:
            feats[c.name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()


def test_training_converges_and_writes_outputs(trained):
    _, job_dir, m = trained
    loss = m["history"]["loss"]
    assert loss[-1] < loss[0] * 0.5, loss
    assert m["eval"]["examples"] > 0 and m["eval"]["rmse"] < 3.0  # noise sigma is 1.5
    on_disk = json.load(open(os.path.join(job_dir, "metrics.json")))
    assert on_disk["eval"] == m["eval"] and on_disk["resumed_from_step"] == 0
    assert os.path.getsize(os.path.join(job_dir, "curves.png")) > 1000
    assert glob.glob(os.path.join(job_dir, "logs", "train", "events.out.tfevents.*"))
    # 4 epochs, the last 3 checkpoints kept (--keep_checkpoints)
    assert sorted(os.path.basename(p) for p in glob.glob(
        os.path.join(job_dir, "checkpoints", "epoch-*.index"))) == [
        "epoch-002.index", "epoch-003.index", "epoch-004.index"]
    export = m["export_dir"]
    assert os.path.dirname(export) == os.path.join(job_dir, "export")
    assert os.path.basename(export).isdigit()
    assert os.path.exists(os.path.join(export, "saved_model.pb"))
    assert os.path.exists(os.path.join(export, "assets.extra", "raw_schema.json"))


@pytest.mark.slow
def test_signatures_agree_with_each_other_and_with_keras(trained, taxi_csv):
    import tensorflow_transform as tft

    from training.data import load_feature_info
    from training.models.keras_models import build_model
    data_dir, job_dir, m = trained
    info = load_feature_info(data_dir)
    schema = info.raw_schema
    spec = tft.TFTransformOutput(data_dir).transformed_feature_spec()
    ev = read_examples(os.path.join(data_dir, "eval", "*.tfrecord.gz"), spec)
    keys = [k.decode() for k in ev["key"]]
    # The Keras model on the transformed eval records, with the final epoch's weights.
    model = build_model(info, _cfg(data_dir, job_dir))
    model.load_weights(os.path.join(job_dir, "checkpoints", "epoch-004")).expect_partial()
    keras_pred = model({k: tf.constant(ev[k]) for k in info.input_names}).numpy()[:, 0]
    keras_pred = info.label_scaler.inverse(keras_pred).numpy()  # the network's target scale
    # The export on the RAW rows with the same keys, through both signatures.
    raw = _raw_rows(taxi_csv[0], schema)
    cols = schema.serving_columns()
    loaded = tf.saved_model.load(m["export_dir"])
    dtypes = {"float": tf.float32, "int": tf.int64, "string": tf.string}
    raw_pred = loaded.signatures["predict_raw"](**{
        c.name: tf.constant([raw[k][c.name] for k in keys], dtypes[c.type]) for c in cols
    })["predictions"].numpy()
    ex_pred = loaded.signatures["serving_default"](
        examples=tf.constant([_example(raw[k], cols) for k in keys]))["predictions"].numpy()
    np.testing.assert_allclose(raw_pred, ex_pred, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(raw_pred, keras_pred, rtol=1e-4, atol=1e-4)
    # And the trainer's exact eval RMSE is what these predictions give.
    labels = np.array([raw[k]["fare_amount"] for k in keys], dtype=np.float32)
    rmse = float(np.sqrt(np.mean((raw_pred.astype(np.float64) - labels) ** 2)))
    assert rmse == pytest.approx(m["eval"]["rmse"], rel=1e-4)


@pytest.mark.slow
def test_saved_model_cli_runs_the_raw_signature(trained):
    _, _, m = trained
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    r = subprocess.run([cli, "run", "--dir", m["export_dir"], "--tag_set", "serve",
                        "--signature_def", "predict_raw", "--input_exprs",
                        'pickup_datetime=["2025-11-21 17:30:00 UTC"];pickup_longitude=[-73.9];'
                        'pickup_latitude=[40.7];dropoff_longitude=[-73.95];'
                        'dropoff_latitude=[40.75];passenger_count=[2];payment_type=["Cash"];'
                        'company=["Flash Cab"]'], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Result for output key predictions" in r.stdout


@pytest.mark.slow
def test_serving_default_runs_from_saved_model_cli(trained, taxi_csv, tmp_path):
    _, _, m = trained
    schema = __import__("inference.model.versions", fromlist=["x"]).load_raw_schema(m["export_dir"])
    raw = next(iter(_raw_rows(taxi_csv[0], schema).values()))
    np.save(tmp_path / "ex.npy", np.array([_example(raw, schema.serving_columns())], dtype=object))
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    r = subprocess.run([cli, "run", "--dir", m["export_dir"], "--tag_set", "serve",
                        "--signature_def", "serving_default", "--inputs",
                        f"examples={tmp_path / 'ex.npy'}"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Result for output key predictions" in r.stdout


def test_an_export_saves_the_networks_variables_not_its_keras_layers(trained):
    export = trained[2]["export_dir"]
    assert keras_layers_saved(export) == 0
    names = [n for n, _ in tf.train.list_variables(os.path.join(export, "variables",
                                                                   "variables"))]
    assert any(n.startswith("model_variables/") for n in names), names[:10]


@pytest.mark.slow
def test_mirrored_strategy_trains_and_exports(preprocessed, tmp_path):
    from training import train_and_evaluate
    data_dir, _ = preprocessed
    m = train_and_evaluate(_cfg(data_dir, str(tmp_path / "job"), epochs=1,
                                distribution="mirrored", early_stopping_patience=1))
    # One replica per GPU, or the CPU alone.
    assert m["distribution"] == "mirrored"
    assert m["replicas"] == max(1, len(tf.config.list_logical_devices("GPU")))
    assert os.path.exists(os.path.join(m["export_dir"], "saved_model.pb"))


@pytest.mark.slow
def test_classification_exports_class_names(tmp_path):
    from beam_jobs import preprocess
    from training import train_and_evaluate
    rng = np.random.default_rng(0)
    lines = ["id,x,y,colour,label"]
    for i in range(1500):
        x, y = rng.normal(size=2)
        colour = ["red", "blue"][i % 2]
        label = "left" if x < -0.3 else ("right" if x > 0.3 else "middle")
        lines.append(f"{i},{x:.4f},{y:.4f},{colour},{label}")
    (tmp_path / "c.csv").write_text("\n".join(lines) + "\n")
    data = str(tmp_path / "prep")
    preprocess.run(["--input", str(tmp_path / "c.csv"), "--output", data, "--label_column", "label"])
    m = train_and_evaluate(_cfg(data, str(tmp_path / "job"), epochs=6, batch_size=64,
                                learning_rate=0.01))
    assert m["task"] == "classification" and m["eval"]["accuracy"] > 0.8
    sig = tf.saved_model.load(m["export_dir"]).signatures["predict_raw"]
    out = sig(x=tf.constant([-2.0, 0.0, 2.0]), y=tf.constant([0.0, 0.0, 0.0]),
              colour=tf.constant(["red", "blue", "red"]))
    assert [c.decode() for c in out["classes"].numpy()] == ["left", "middle", "right"]
    np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, rtol=1e-5)


@pytest.mark.slow
def test_two_worker_multi_worker_mirrored_via_launch(preprocessed, tmp_path):
    from tools.launch import launch
    data_dir, _ = preprocessed
    job = str(tmp_path / "job")
    code = launch(2, 0, ["--data_dir", data_dir, "--job_dir", job, "--epochs", "2",
                         "--batch_size", "128", "--hidden_units", "16", "--verbose", "0"],
                  timeout=400)
    assert code == 0
    m = json.load(open(os.path.join(job, "metrics.json")))
    assert m["distribution"] == "multi_worker" and m["replicas"] == 2
    assert len(glob.glob(os.path.join(job, "export", "*", "saved_model.pb"))) == 1
    assert m["history"]["loss"][-1] < m["history"]["loss"][0]


@pytest.mark.slow
def test_parameter_server_cluster_via_launch_trains_a_user_model_module(preprocessed, tmp_path):
    """A real chief + 2 workers + 1 ps on localhost train the --model_module's model (built
    in ParameterServerStrategy's scope like the built-in ones) and export it."""
    from tools.launch import launch
    data_dir, _ = preprocessed
    job = str(tmp_path / "job")
    module = os.path.join(ROOT, "training", "examples", "custom_model.py")
    code = launch(2, 1, ["--data_dir", data_dir, "--job_dir", job, "--epochs", "2",
                         "--batch_size", "128", "--hidden_units", "16", "--verbose", "0",
                         "--model_module", module],
                  timeout=400)
    assert code == 0
    m = json.load(open(os.path.join(job, "metrics.json")))
    assert m["distribution"] == "parameter_server"
    assert m["config"]["model_module"] == module
    exports = glob.glob(os.path.join(job, "export", "*"))
    assert len(exports) == 1 and os.path.exists(os.path.join(exports[0], "saved_model.pb"))
    assert _has_batch_norm(exports[0])  # the module's layers, which the built-in model lacks


def _backup_step(backup_dir):
    path = tf.train.latest_checkpoint(os.path.join(backup_dir, "chief"))
    if not path:
        return None
    return int(tf.train.load_checkpoint(path).get_tensor(
        "model/optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"))


def _live_backup_step(backup_dir):
    """_backup_step while the trainer runs: the checkpoint `latest_checkpoint` names may be
    rotated away (or be half written) before it is read; that is "not yet", not a failure."""
    if not os.path.isdir(os.path.join(backup_dir, "chief")):
        return None
    try:
        return _backup_step(backup_dir)
    except (tf.errors.OpError, ValueError):
        return None


@pytest.mark.slow
def test_killed_training_resumes_from_its_last_backup(preprocessed, tmp_path):
    data_dir, _ = preprocessed
    job = str(tmp_path / "job")
    args = [sys.executable, "-m", "training.task", "--data_dir", data_dir, "--job_dir", job,
            "--epochs", "6", "--batch_size", "32", "--checkpoint_steps", "25",
            "--hidden_units", "16", "--verbose", "0", "--early_stopping_patience", "0",
            "--model", "wide_deep"]  # the network's backups (auto's trees and folds: seconds more)
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    backup = os.path.join(job, "checkpoints", "backup")
    deadline = time.time() + 240
    try:
        while time.time() < deadline:
            step = _live_backup_step(backup)
            if step and step >= 100:
                break
            assert proc.poll() is None, "training ended before it could be killed"
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)  # no clean shutdown: a crash
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    saved = _backup_step(backup)
    assert saved and saved >= 100
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"Resuming from step {saved}" in r.stderr
    assert library_lines(r.stdout + r.stderr) == []  # a quiet terminal: the trainer's lines
    m = json.load(open(os.path.join(job, "metrics.json")))
    assert m["resumed_from_step"] == saved
    assert m["final_step"] == 6 * m["steps_per_epoch"]
    assert not os.path.exists(os.path.join(backup, "chief"))  # removed after success


def test_rendered_manifests_carry_replicas_image_and_args(tmp_path):
    from tools import render
    args = ["--data_dir", "gs://b/prep", "--job_dir", "gs://b/job", "--epochs", "3"]
    assert render.main(["--image", "img:1", "--workers", "3", "--ps", "2", "--gpus", "1",
                        "--output_dir", str(tmp_path), "--"] + args) == 0
    tfjob = yaml.safe_load((tmp_path / "tfjob.yaml").read_text())
    specs = tfjob["spec"]["tfReplicaSpecs"]
    assert tfjob["kind"] == "TFJob" and tfjob["apiVersion"] == "kubeflow.org/v1"
    assert {k: v["replicas"] for k, v in specs.items()} == {"Chief": 1, "Worker": 3, "PS": 2}
    for spec in specs.values():
        c = spec["template"]["spec"]["containers"][0]
        assert c["name"] == "tensorflow" and c["image"] == "img:1" and c["args"] == args
    assert specs["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in specs["PS"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    job = json.loads((tmp_path / "customjob.json").read_text())
    pools = job["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == [1, 3, 2]
    assert all(p["containerSpec"]["imageUri"] == "img:1" and p["containerSpec"]["args"] == args
               for p in pools)
    assert job["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] == "gs://b/job"
    # All-reduce: N workers = the chief pool plus N-1 workers.
    render.main(["--image", "img:1", "--workers", "4", "--output_dir", str(tmp_path), "--"] + args)
    job = json.loads((tmp_path / "customjob.json").read_text())
    assert [p["replicaCount"] for p in job["jobSpec"]["workerPoolSpecs"]] == [1, 3]
    tfjob = yaml.safe_load((tmp_path / "tfjob.yaml").read_text())
    assert list(tfjob["spec"]["tfReplicaSpecs"]) == ["Worker"]


@pytest.mark.parametrize("kw, message", [
    (dict(batch_size=0), "--batch_size"), (dict(hidden_units=[]), "--hidden_units"),
    (dict(distribution="tpu"), "--distribution"), (dict(dropout=1.5), "--dropout"),
    (dict(lr_schedule="step"), "--lr_schedule"), (dict(backbone="vgg"), "--backbone"),
    # What models.config will hold is checked before training (it was refused after export).
    (dict(serving_base_path="/models/model\n"), "--serving_base_path"),
    (dict(serving_model_name="model\n"), "--serving_model_name"),
    (dict(model="trees"), "--model"), (dict(shrinkage=0), "--shrinkage")])
def test_config_validation(kw, message):
    with pytest.raises(ConfigError, match=message):
        _cfg("d", "j", **kw)


def test_cosine_schedule_decays_to_zero_over_the_training_steps():
    import tf_keras as keras

    from training.data import FeatureInfo
    from training.models.keras_models import compile_model
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    info = FeatureInfo(label="y", task="regression", numeric=["x"], categorical={},
                       feature_spec={})
    compile_model(model, info, _cfg("d", "j", lr_schedule="cosine", learning_rate=0.01),
                  total_steps=100)
    schedule = keras.optimizers.schedules.deserialize(
        model.optimizer.get_config()["learning_rate"])
    for step, want in ((0, 0.01), (50, 0.005), (100, 0.0)):
        assert float(schedule(step)) == pytest.approx(want, abs=1e-7)
    compile_model(model, info, _cfg("d", "j", learning_rate=0.01), total_steps=100)
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.01)


def test_vertex_environment_wins(monkeypatch):
    monkeypatch.setenv("AIP_MODEL_DIR", "gs://b/model/")
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", "gs://b/ckpt/")
    monkeypatch.setenv("AIP_TENSORBOARD_LOG_DIR", "gs://b/tb/")
    c = _cfg("d", "j")
    assert (c.model_dir, c.checkpoint_dir, c.tensorboard_dir) == ("gs://b/model/", "gs://b/ckpt/",
                                                                  "gs://b/tb/")


@pytest.mark.slow
def test_missing_data_dir_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "training.task", "--data_dir", str(tmp_path / "no"),
                        "--job_dir", str(tmp_path / "j")], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1].startswith("training.task: error: ")
    assert "is not a preprocess output" in r.stderr.splitlines()[-1]


@pytest.mark.parametrize("rows, want", [
    (1_000_000, (512, 10, "constant")),   # the tabular demo: as before
    (100_000, (512, 10, "constant")),
    (10_000, (128, 13, "cosine")),        # 79 steps per epoch -> at least 1,000 steps
    (1_440, (32, 23, "cosine")),          # ~1,800 images, 80% train
    (400, (32, 77, "cosine")),
])
def test_defaults_follow_the_train_split_size(rows, want):
    from training import defaults
    batch, epochs, schedule, why = defaults.choose(rows, None, None, None)
    assert (batch, epochs, schedule) == want
    assert set(why) == {"batch_size", "epochs", "lr_schedule"}
    assert epochs == 10 or epochs * -(-rows // batch) >= 1000  # the step floor


def test_explicit_flags_win_over_the_defaults():
    from training import defaults
    assert defaults.choose(400, 64, 3, "constant")[:3] == (64, 3, "constant")
    batch, epochs, schedule, why = defaults.choose(400, 64, None, None, train_steps=50)
    assert (batch, epochs, schedule, set(why)) == (64, 10, "constant", {"epochs", "lr_schedule"})


def test_collapse_check_names_chance_and_the_gap_to_train():
    from training import defaults
    hist = {"accuracy": [0.5, 0.98], "loss": [1.0, 0.05], "val_loss": [1.1, 3.0]}
    w = defaults.collapse_warnings("classification", 10, {"accuracy": 0.08}, hist)
    assert "near chance" in w[0] and "far below train accuracy 0.980" in w[1]
    assert "--batch_size 32" in w[-1]
    assert defaults.collapse_warnings("classification", 10, {"accuracy": 0.97}, hist) == []
    assert "3x the train loss" in defaults.collapse_warnings(
        "regression", 1, {"rmse": 2.0}, hist)[0]


def test_only_the_last_checkpoints_are_kept(tmp_path):
    from training.callbacks import prune_checkpoints
    for e in range(1, 6):
        (tmp_path / f"epoch-{e:03d}.index").write_text("i")
        (tmp_path / f"epoch-{e:03d}.data-00000-of-00001").write_text("d")
    (tmp_path / "checkpoint").write_text("latest")
    assert prune_checkpoints(str(tmp_path), 3) == [1, 2]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint"] + sorted(
        f"epoch-{e:03d}.{s}" for e in (3, 4, 5) for s in ("data-00000-of-00001", "index"))


@pytest.mark.slow
def test_default_flags_on_a_small_dataset_take_enough_steps_and_learn(preprocessed, tmp_path):
    """No batch size, epochs or schedule given on ~2,300 train rows: the trainer chooses batch
    32, at least 1,000 optimizer steps and a cosine decay, records why in metrics.json, and
    learns (the old batch-512 defaults gave 5 steps per epoch). The network alone: `auto`
    would train it five times (test_model_families covers that)."""
    from training import train_and_evaluate
    from training.config import TrainConfig
    m = train_and_evaluate(TrainConfig(data_dir=preprocessed[0], job_dir=str(tmp_path / "job"),
                                       hidden_units=[32, 16], verbose=0, model="wide_deep"))
    d = m["defaults"]
    assert (d["batch_size"]["value"], d["lr_schedule"]["value"]) == (32, "cosine")
    rows = json.load(open(os.path.join(preprocessed[0], "summary.json")))["splits"]["train"]
    assert f"{rows:,} train rows" in d["batch_size"]["why"]
    # At least 1,000 steps planned; early stopping on the train holdout may end sooner.
    assert d["epochs"]["value"] * m["steps_per_epoch"] >= 1000
    assert m["config"]["batch_size"] == 32 and m["validation"].startswith("train holdout")
    assert m["eval"]["rmse"] < 3.0 and m["warnings"] == []  # noise sigma is 1.5
    on_disk = json.load(open(tmp_path / "job" / "metrics.json"))
    assert on_disk["defaults"] == d
    assert len(glob.glob(str(tmp_path / "job" / "checkpoints" / "epoch-*.index"))) == 3


@pytest.mark.slow
def test_a_user_model_module_trains_and_exports_with_the_transform(preprocessed, tmp_path):
    """--model_module: the example module's build_model is trained, and the export serves it
    through the embedded transform (raw features in)."""
    module = os.path.join(ROOT, "training", "examples", "custom_model.py")
    from training import train_and_evaluate
    m = train_and_evaluate(_cfg(preprocessed[0], str(tmp_path / "job"), epochs=1,
                                hidden_units=[16], model_module=module, verbose=0))
    assert m["config"]["model_module"] == module and m["eval"]["rmse"] > 0
    loaded = tf.saved_model.load(m["export_dir"])
    sig = loaded.signatures["predict_raw"]
    raw = {"pickup_datetime": tf.constant(["2025-06-02 08:15:00"]),
           "pickup_longitude": tf.constant([-73.95]), "pickup_latitude": tf.constant([40.75]),
           "dropoff_longitude": tf.constant([-73.9]), "dropoff_latitude": tf.constant([40.8]),
           "passenger_count": tf.constant([1], tf.int64), "payment_type": tf.constant(["Cash"]),
           "company": tf.constant(["Sun Taxi"])}
    out = sig(**{k: v for k, v in raw.items() if k in sig.structured_input_signature[1]})
    assert np.isfinite(out["predictions"].numpy()).all()
    # The trained layers are the module's: batch normalisation (moving statistics), which the
    # built-in model lacks.
    assert _has_batch_norm(m["export_dir"])


@pytest.mark.slow
def test_a_model_module_without_build_model_is_a_one_line_error(preprocessed, tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("def other(): pass\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):  # the command line, in this process
        code = task.main(["--data_dir", preprocessed[0], "--job_dir", str(tmp_path / "j"),
                          "--model_module", str(bad)])
    assert code == 2
    assert err.getvalue().strip().splitlines()[-1] == (
        f"training.task: error: --model_module: module file {bad} has no callable build_model")
    # A bug (here in the module's own code) is not a user error: it keeps its traceback.
    bad.write_text("def build_model(info, cfg):\n    return None + 1\n")
    with pytest.raises(TypeError, match="NoneType"):
        task.main(["--data_dir", preprocessed[0], "--job_dir", str(tmp_path / "j2"),
                   "--model_module", str(bad)])


@pytest.mark.slow
def test_label_key_trains_on_a_transformed_label_and_the_jobs_serve_its_classes(taxi_csv,
                                                                                tmp_path):
    """TFX's convention: the label is a transformed output (here a binary one derived from the
    raw fare); --label_key names it; the export classifies, and batch_predict writes classes
    from raw rows that have no label."""
    from beam_jobs import batch_predict, preprocess
    from preprocessing import TAXI_SPEC
    from training import train_and_evaluate
    module = tmp_path / "tfx_module.py"
    module.write_text(
        "import tensorflow as tf\nimport tensorflow_transform as tft\n"
        "def preprocessing_fn(inputs):\n"
        "    lat = inputs['pickup_latitude'] - inputs['dropoff_latitude']\n"
        "    lon = inputs['pickup_longitude'] - inputs['dropoff_longitude']\n"
        "    return {'dist_xf': tft.scale_to_z_score(tf.sqrt(lat * lat + lon * lon)),\n"
        "            'big_fare_xf': tf.cast(inputs['fare_amount'] > 15.0, tf.int64)}\n")
    data = str(tmp_path / "prep")
    preprocess.run(["--input", taxi_csv[0], "--output", data, "--schema_spec", TAXI_SPEC,
                    "--module_file", str(module)])
    with pytest.raises(Exception, match="is not a transformed feature"):
        train_and_evaluate(_cfg(data, str(tmp_path / "bad"), label_key="no_such", epochs=1))
    m = train_and_evaluate(_cfg(data, str(tmp_path / "job"), label_key="big_fare_xf",
                                epochs=3, verbose=0))
    assert (m["task"], m["label"]) == ("classification", "big_fare_xf")
    assert m["eval"]["accuracy"] > 0.7
    out = tmp_path / "pred"
    rows = open(taxi_csv[0]).read().splitlines()[:201]
    (tmp_path / "in.csv").write_text("\n".join(rows) + "\n")
    s = batch_predict.run(["--model_dir", m["export_dir"], "--input", str(tmp_path / "in.csv"),
                           "--output", str(out)])
    preds = read_jsonl(str(out / "predictions-*.jsonl"))
    assert s["reconciled"] and preds and {p["class"] for p in preds} <= {"0", "1"}


@pytest.mark.slow
def test_jit_compile_trains_like_the_default_step(preprocessed, tmp_path):
    """--jit_compile: the XLA-compiled step trains the same model to about the same error."""
    from training import train_and_evaluate
    runs = {jit: train_and_evaluate(_cfg(preprocessed[0], str(tmp_path / f"job{jit}"),
                                         epochs=2, hidden_units=[16], jit_compile=jit,
                                         verbose=0))
            for jit in (False, True)}
    assert runs[True]["jit_compile"] is True and runs[False]["jit_compile"] is False
    assert runs[True]["history"]["loss"][-1] < runs[True]["history"]["loss"][0]
    assert runs[True]["eval"]["rmse"] == pytest.approx(runs[False]["eval"]["rmse"], rel=0.1)


@pytest.mark.slow
def test_mixed_precision_computes_in_float16_with_float32_outputs(preprocessed, tmp_path,
                                                                    caplog):
    """Under the mixed policy layers compute in float16 and the model's outputs are float32;
    the policy is float32 again afterwards. Without a GPU the flag is refused with a warning."""
    import tf_keras as keras

    from training import data as data_lib
    from training.config import TrainConfig
    from training.models.keras_models import build_model
    from training.models.network import float32_outputs, precision_policy
    info = data_lib.load_feature_info(preprocessed[0])
    cfg = TrainConfig(data_dir=preprocessed[0], job_dir=str(tmp_path / "j"), hidden_units=[8])
    with precision_policy(True):
        model = float32_outputs(build_model(info, cfg))
    assert keras.mixed_precision.global_policy().name == "float32"
    dense = model.get_layer("dense_0")
    assert dense.compute_dtype == "float16" and dense.variable_dtype == "float32"
    batch = {name: tf.zeros([2], tf.int64 if name in info.categorical else tf.float32)
             for name in model.input}
    assert model(batch).dtype == tf.float32
    if not tf.config.list_logical_devices("GPU"):
        from training import train_and_evaluate
        with caplog.at_level("WARNING"):
            m = train_and_evaluate(_cfg(preprocessed[0], str(tmp_path / "job"), epochs=1,
                                        hidden_units=[8], mixed_precision=True, verbose=0))
        assert m["precision"] == "float32"
        assert "--mixed_precision needs a GPU" in caplog.text


@pytest.mark.slow
def test_small_data_trains_the_same_network_twice_and_restores_the_process_setting(
        preprocessed, tmp_path):
    """Under 10,000 train rows on one process TensorFlow's deterministic ops are on: the same
    data, flags and seed give the same weights (the run before differed between runs: tf.data
    reads in parallel in the order they finish). The process's setting is back afterwards."""
    from tensorflow.python.framework import config as tf_runtime_config

    from training import train_and_evaluate
    runs = [train_and_evaluate(_cfg(preprocessed[0], str(tmp_path / f"job{i}"), epochs=1))
            for i in range(2)]
    assert runs[0]["deterministic"]["value"] is True
    assert "on one process" in runs[0]["deterministic"]["why"]
    assert runs[0]["eval"] == runs[1]["eval"]
    assert runs[0]["history"]["loss"] == runs[1]["history"]["loss"]
    assert not tf_runtime_config.is_op_determinism_enabled()


def test_determinism_is_on_for_small_data_on_one_process_unless_a_flag_says():
    from training import defaults
    small, large = defaults.SMALL_TRAIN_ROWS - 1, defaults.SMALL_TRAIN_ROWS
    assert defaults.determinism(None, "single", small)[0] is True
    assert defaults.determinism(None, "single", large)[0] is False
    assert defaults.determinism(None, "multi_worker", small)[0] is False
    assert defaults.determinism(True, "single", large) == (True, "--deterministic")
    assert defaults.determinism(False, "single", small) == (False, "--no-deterministic")
