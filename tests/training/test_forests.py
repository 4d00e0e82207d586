"""Forests averaged as the trees kept (`--num_forests`, training/models/forests.py): the rule
that sets their number, the average of real YDF forests grown with their own seeds, and an
export that holds them all."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import small_train_config
from training import defaults
from training.data import Holdout, load_feature_info, make_dataset_fn, split_files


def test_five_forests_only_where_folds_chose_trees_their_seed_changes():
    assert defaults.num_forests(3, folds=1, seeded=False) == (3, "--num_forests")
    value, why = defaults.num_forests(None, folds=4, seeded=True)
    assert value == defaults.FORESTS == 5 and "4 cross-fitted folds" in why
    assert defaults.num_forests(None, folds=1, seeded=True)[0] == 1
    value, why = defaults.num_forests(None, folds=4, seeded=False)
    assert value == 1 and "the same whatever their seed" in why


def test_trees_change_with_their_seed_by_their_shape(tmp_path):
    from training.models.forests import seeded
    from training.models.trees import TreesShape, shape_cfg
    cfg = small_train_config("d", str(tmp_path), model="auto")
    assert seeded(shape_cfg(cfg, TreesShape("SPARSE_OBLIQUE")))
    assert not seeded(shape_cfg(cfg, TreesShape("AXIS_ALIGNED")))
    assert seeded(shape_cfg(cfg, TreesShape("AXIS_ALIGNED", algorithm="RANDOM")))
    assert seeded(shape_cfg(cfg, TreesShape("AXIS_ALIGNED", encoding="target")))
    assert not seeded(shape_cfg(cfg, TreesShape("AXIS_ALIGNED", encoding="frequent")))
    assert seeded(shape_cfg(dataclasses.replace(cfg, subsample=0.8), TreesShape("AXIS_ALIGNED")))


def _outputs(model, files, info, batch=256):
    ds = make_dataset_fn(files, info, batch, training=False, scale_label=False)()
    return np.concatenate([model(x, training=False).numpy() for x, _, _ in ds])


def test_the_forests_average_is_the_mean_of_forests_grown_with_their_seeds(preprocessed,
                                                                          tmp_path):
    from training.models.forests import train_forests
    from training.models.trees import train_trees
    data_dir, _ = preprocessed
    info, files = load_feature_info(data_dir), split_files(data_dir, "train")
    cfg = small_train_config(data_dir, str(tmp_path / "job"), model="boosted_trees",
                             num_trees=15, split_axis="SPARSE_OBLIQUE")
    run = train_forests(cfg, info, files, 3)
    assert run.forests == 3 and len(run.model.members) == 3
    alone = [train_trees(dataclasses.replace(cfg, seed=cfg.seed + k), info, files, None)
             for k in range(3)]
    outs = [_outputs(a.model, files, a.info) for a in alone]
    # The seeds grow other trees (oblique projections), and the first is one growth's own.
    assert np.abs(outs[0] - outs[1]).max() > 1e-3
    np.testing.assert_allclose(_outputs(run.model.members[0], files, run.info), outs[0],
                               rtol=1e-6)
    np.testing.assert_allclose(_outputs(run.model, files, run.info), np.mean(outs, axis=0),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="not cut"):
        run.truncated(5)
    with pytest.raises(ValueError, match="at least 1"):
        train_forests(cfg, info, files, 0)


def test_forests_past_the_row_cap_grow_on_one_sample(preprocessed, tmp_path):
    """Past --trees_max_rows every forest grows on the sample seeded by --seed, read once:
    the second forest is the one grown with seed+1 on the first one's rows, not on a sample
    of its own."""
    from training.models.forests import train_forests
    from training.models.tree_rows import read_columns
    from training.models.trees import feature_semantics, train_trees
    data_dir, _ = preprocessed
    info, files = load_feature_info(data_dir), split_files(data_dir, "train")
    cap = int(info.split_rows["train"]) // 2
    cfg = small_train_config(data_dir, str(tmp_path / "job"), model="boosted_trees",
                             num_trees=10, split_axis="SPARSE_OBLIQUE", trees_max_rows=cap)
    run = train_forests(cfg, info, files, 2)
    assert run.rows == cap and run.capped
    second = dataclasses.replace(cfg, seed=cfg.seed + 1)
    shared = read_columns(files, info, feature_semantics(info), None, cap, seed=cfg.seed)
    on_shared = train_trees(second, info, files, None, rows=shared)
    own_sample = train_trees(second, info, files, None)
    member = _outputs(run.model.members[1], files, info)
    np.testing.assert_allclose(member, _outputs(on_shared.model, files, info), rtol=1e-6)
    assert np.abs(member - _outputs(own_sample.model, files, info)).max() > 1e-3
    with pytest.raises(ValueError, match="no holdout"):
        train_trees(cfg, info, files, Holdout(only=False, fold=0, folds=4), rows=shared)


def _three_classes(tmp_path) -> str:
    """600 rows of three classes set by two numbers with noise, preprocessed."""
    from beam_jobs import preprocess
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0, 1, 600), rng.uniform(0, 1, 600)
    cls = np.where(a + 0.3 * rng.normal(size=600) > 0.6, "high",
                   np.where(b > 0.5, "mid", "low"))
    src = tmp_path / "three.csv"
    src.write_text("a,b,kind\n" + "".join(f"{a[i]:.4f},{b[i]:.4f},{cls[i]}\n"
                                          for i in range(600)))
    prep = str(tmp_path / "prep")
    preprocess.run(["--input", str(src), "--output", prep, "--label_column", "kind"])
    return prep


def test_a_classifiers_forests_average_their_probabilities(tmp_path):
    from training.models.forests import train_forests
    prep = _three_classes(tmp_path)
    info, files = load_feature_info(prep), split_files(prep, "train")
    assert info.task == "classification" and info.n_classes == 3
    cfg = small_train_config(prep, str(tmp_path / "job"), model="boosted_trees",
                             num_trees=10, split_axis="SPARSE_OBLIQUE")
    run = train_forests(cfg, info, files, 2)
    members = [np.exp(_outputs(m, files, info)) for m in run.model.members]
    probs = np.exp(_outputs(run.model, files, info))
    np.testing.assert_allclose(probs, np.mean(members, axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert np.abs(members[0] - members[1]).max() > 1e-4


@pytest.mark.slow
def test_an_export_of_averaged_forests_loads_every_one_and_serves_their_mean(
        preprocessed, taxi_csv, tmp_path):
    """`--model boosted_trees --num_forests 3`: TF Serving's init graph loads three forests
    (each from its own files in assets/), and batch prediction reproduces the eval figure."""
    from beam_jobs import batch_predict
    from tests.training.test_model_families import _eval_csv
    from tools.tfdf_serving_check import forests
    from training import train_and_evaluate
    data_dir, _ = preprocessed
    m = train_and_evaluate(small_train_config(data_dir, str(tmp_path / "job"),
                                              model="boosted_trees", num_trees=20,
                                              num_forests=3))
    trees = m["model"]["candidates"]["boosted_trees"]
    assert trees["num_forests"] == {"value": 3, "why": "--num_forests"}
    assert len(forests(m["export_dir"])) == 3
    notes = json.load(open(os.path.join(m["export_dir"], "assets.extra", "model.json")))
    assert notes["family"] == "boosted_trees"
    s = batch_predict.run(["--model_dir", m["export_dir"], "--input",
                           _eval_csv(data_dir, taxi_csv[0], tmp_path / "eval.csv"), "--output",
                           str(tmp_path / "out"), "--evaluate_label", "fare_amount"])
    assert s["metrics"]["examples"] == m["eval"]["examples"]
    assert s["metrics"]["rmse"] == pytest.approx(m["eval"]["rmse"], rel=1e-4)
    loaded = tf.saved_model.load(m["export_dir"])
    assert "serving_default" in loaded.signatures
    _loads_one_after_another(m["export_dir"])


def _loads_one_after_another(export_dir):
    """The forests' loads are chained in the init graph (TF-DF 1.3.0's kernels, TF Serving's,
    gave other predictions when they ran at once: training/exporting/forest_loads.py), and a
    TF1 session loader, as TF Serving's, runs that graph and serves what the TF2 load does."""
    from preprocessing.files.serving_ops import meta_graph
    from preprocessing.reference.golden import EXPORT_GOLDEN, read_examples
    from training.exporting import forest_loads
    graph = meta_graph(export_dir).graph_def
    calls = forest_loads.forest_load_calls(graph)
    assert len(calls) == 3 and forest_loads.unchained(graph) == []
    nodes = {n.name: n for n in graph.node}
    for before, after in zip(calls, calls[1:]):  # unchained() sees a load left beside another
        nodes[after].input.remove("^" + before)
    assert forest_loads.unchained(graph) == calls[1:]
    assert forest_loads.chain(graph) == 2 and forest_loads.unchained(graph) == []
    rows = read_examples(os.path.join(export_dir, EXPORT_GOLDEN))
    want = tf.saved_model.load(export_dir).signatures["serving_default"](
        examples=tf.constant(rows))["predictions"].numpy()
    with tf.compat.v1.Session(graph=tf.Graph()) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], export_dir)
        sig = meta.signature_def["serving_default"]
        got = sess.run(sig.outputs["predictions"].name,
                       {sig.inputs["examples"].name: np.array(rows, object)})
    np.testing.assert_allclose(got, want, rtol=1e-6)
