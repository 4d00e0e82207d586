"""The optimised export (issue 30, item 3): `python -m training.optimize` writes a frozen,
float16 or int8 version beside the source, with the transform inside, that the prediction
jobs serve like any version; one that moves the golden-set metric too far is refused and
nothing is written."""
from __future__ import annotations

import glob
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from beam_jobs import batch_predict
from preprocessing.reference.golden import EXPORT_GOLDEN
from tests.helpers import read_jsonl
from training import optimize
from training.exporting import quantize


def _base_with(export: str, tmp_path) -> str:
    """A base holding a copy of the session's export: new versions must not land in it."""
    base = tmp_path / "versions"
    shutil.copytree(export, base / os.path.basename(export))
    return str(base)


def _golden(export: str) -> list:
    return [r.numpy() for r in tf.data.TFRecordDataset(os.path.join(export, EXPORT_GOLDEN))]


def _predict(export: str, examples: list) -> dict:
    out = tf.saved_model.load(export).signatures["serving_default"](
        examples=tf.constant(examples))
    return {k: v.numpy() for k, v in out.items()}


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "**"), recursive=True)
               if os.path.isfile(f))


def test_each_mode_writes_a_version_the_batch_job_serves(trained, taxi_csv, tmp_path):
    source = trained[2]["export_dir"]
    base = _base_with(source, tmp_path)
    rows = _golden(source)
    expected = _predict(source, rows)["predictions"]
    sizes, reports = {}, {}
    for mode, atol in (("frozen", 1e-4), ("float16", 0.05), ("int8", 0.5)):
        r = optimize.optimize(base, mode) if mode == "frozen" else optimize.optimize(
            os.path.join(base, os.path.basename(source)), mode)
        reports[mode] = r
        version = r["version"]
        assert os.path.dirname(version) == base and os.path.basename(version).isdigit()
        loaded = tf.saved_model.load(version)
        assert not loaded.signatures["predict_raw"].variables  # weights are constants now
        assert {"serving_default", "predict_raw", "regress"} <= set(loaded.signatures)
        got = _predict(version, rows)["predictions"]
        np.testing.assert_allclose(got, expected, atol=atol, rtol=0)
        assert abs(r["metric_after"] - r["source_metric"]) <= 0.01 * r["source_metric"]
        assert os.path.exists(os.path.join(version, "assets.extra", "raw_schema.json"))
        assert os.path.exists(os.path.join(version, EXPORT_GOLDEN))
        sizes[mode] = _dir_bytes(version)
    calibration = reports["int8"]["calibration"]  # ranges chosen on train rows
    assert calibration["rows"] > 100
    assert set(calibration["clips"].values()) <= set(optimize.CLIP_RATIOS)
    assert calibration["mse_calibrated"] <= calibration["mse_full_range"]
    assert reports["frozen"]["quantized_weights"] == 0
    assert reports["int8"]["quantized_weights"] == reports["float16"]["quantized_weights"] > 0
    assert reports["frozen"]["max_abs_difference"] < reports["int8"]["max_abs_difference"]
    assert sizes["int8"] < sizes["float16"] < sizes["frozen"] < _dir_bytes(source)

    # The batch job serves the newest version (int8) and its predictions match the source's.
    out = tmp_path / "pred"
    batch_predict.run(["--model_dir", base, "--input", taxi_csv[0], "--output", str(out),
                       "--skew_report", "off"])
    served = read_jsonl(str(out / "predictions-*.jsonl"))
    assert {p["model_version"] for p in served} == {os.path.basename(reports["int8"]["version"])}
    ref_out = tmp_path / "ref"
    batch_predict.run(["--model_dir", source, "--input", taxi_csv[0], "--output", str(ref_out),
                       "--skew_report", "off"])
    ref = {p["key"]: p["prediction"] for p in read_jsonl(str(ref_out / "predictions-*.jsonl"))}
    assert len(served) == len(ref) > 100
    diff = max(abs(p["prediction"] - ref[p["key"]]) for p in served)
    assert diff < 0.5, diff


def test_calibration_rows_are_train_rows_and_travel_with_the_export(trained):
    from preprocessing.reference import golden
    data_dir, _, metrics = trained
    keys = {}
    for name in (golden.GOLDEN_FILE, golden.CALIBRATION_FILE):
        rows = _golden_like(os.path.join(data_dir, golden.GOLDEN_DIR, name))
        keys[name] = {tf.train.Example.FromString(r).features.feature["key"].bytes_list.value[0]
                      for r in rows}
    assert len(keys[golden.CALIBRATION_FILE]) == golden.DEFAULT_ROWS  # the train split is larger
    assert not keys[golden.CALIBRATION_FILE] & keys[golden.GOLDEN_FILE]  # eval rows judge
    assert os.path.exists(os.path.join(metrics["export_dir"], golden.EXPORT_CALIBRATION))


def _golden_like(path: str) -> list:
    return [r.numpy() for r in tf.data.TFRecordDataset(path)]


def test_a_version_beyond_the_tolerance_is_refused_and_nothing_is_written(trained, tmp_path):
    base = _base_with(trained[2]["export_dir"], tmp_path)
    before = sorted(os.listdir(base))
    with pytest.raises(optimize.OptimizeError, match="beyond the tolerance 0.0"):
        optimize.optimize(base, "int8", tolerance=0.0)  # int8 always moves the RMSE a little
    assert sorted(os.listdir(base)) == before
    assert optimize.main(["--model_dir", base, "--mode", "int8", "--tolerance", "0"]) == 2
    assert sorted(os.listdir(base)) == before
    with pytest.raises(optimize.OptimizeError, match="no complete export"):
        optimize.optimize(str(tmp_path), "frozen")


def test_a_read_only_export_base_is_refused_before_any_work(trained, tmp_path, capsys):
    """The new version goes beside the source: a base it cannot write to is one line at the
    start (it was found only after optimising, writing the `.partial` folder)."""
    import subprocess
    import time
    base = _base_with(trained[2]["export_dir"], tmp_path)
    before = sorted(os.listdir(base))
    subprocess.run(["chattr", "+i", base], check=True)  # read-only even for root
    try:
        t0 = time.time()
        assert optimize.main(["--model_dir", base, "--mode", "frozen"]) == 2
        err = capsys.readouterr().err
        assert f"--model_dir {base} is not writable" in err and "Traceback" not in err
        assert time.time() - t0 < 5  # before loading or freezing anything
    finally:
        subprocess.run(["chattr", "-i", base], check=True)
    assert sorted(os.listdir(base)) == before


def test_image_classifier_keeps_its_classes_when_frozen(trained_images, tmp_path):
    source = trained_images[2]["export_dir"]
    base = _base_with(source, tmp_path)
    r = optimize.optimize(base, "frozen")
    rows = _golden(source)
    want, got = _predict(source, rows), _predict(r["version"], rows)
    assert got["classes"].tolist() == want["classes"].tolist()
    np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=1e-4)
    classify = tf.saved_model.load(r["version"]).signatures["classify"]
    out = classify(inputs=tf.constant(rows[:3]))
    src = tf.saved_model.load(source).signatures["classify"](inputs=tf.constant(rows[:3]))
    assert out["classes"].numpy().tolist() == src["classes"].numpy().tolist()


def test_only_weights_are_quantised_and_int8_keeps_each_channel_close():
    @tf.function(input_signature=[tf.TensorSpec([None, 256], tf.float32)])
    def f(x):
        w = tf.constant(np.random.default_rng(0).normal(size=(256, 64)).astype(np.float32))
        mean = tf.constant(np.linspace(0, 1, 256).astype(np.float32))  # a transform's constant
        return tf.matmul(x - mean, w)

    graph_def = f.get_concrete_function().graph.as_graph_def()
    [weight] = quantize.weight_constants(graph_def)
    q_def, done = quantize.quantize(graph_def, "int8")
    assert list(done) == [weight] and done[weight] == 256 * 64
    w = np.random.default_rng(1).normal(size=(8, 5)).astype(np.float32) * [1, 10, 100, 0, 1e-3]
    q, scale = quantize.int8_per_channel(w)
    assert q.dtype == np.int8 and scale.shape == (5,)
    assert np.all(np.abs(q * scale - w) <= scale / 2 + 1e-7)  # per channel: small ones too
    x = np.random.default_rng(2).normal(size=(4, 256)).astype(np.float32)
    [ref] = tf.compat.v1.wrap_function(lambda: tf.graph_util.import_graph_def(
        graph_def, input_map={"x:0": tf.constant(x)}, return_elements=["Identity:0"]), [])()
    [got] = tf.compat.v1.wrap_function(lambda: tf.graph_util.import_graph_def(
        q_def, input_map={"x:0": tf.constant(x)}, return_elements=["Identity:0"]), [])()
    assert 0 < np.max(np.abs(got.numpy() - ref.numpy())) < 0.05 * np.max(np.abs(ref.numpy()))
