"""The trees' split gain under `--split_gain auto` (the default): a classification's kept
shape, chosen on cross-fitted folds, is grown with YDF's hessian gain on the same folds and
kept so only where clearly lower on the rows held out (training/models/tree_shapes.py
gain_variant, training/choice_rules.py GAIN_ERRORS)."""
from __future__ import annotations

import json
import logging
import os
import types

import numpy as np
import pytest

from tests.helpers import small_train_config


def test_the_learner_scores_splits_with_the_gain_the_shape_names(tmp_path):
    from training.models.tree_shapes import TreesShape, shape_cfg
    from training.models.trees import _learner
    cfg = small_train_config("d", str(tmp_path / "job"), model="auto")
    assert cfg.split_gain == "auto" and shape_cfg(cfg).split_gain == "gradient"
    for shape, hessian in ((TreesShape(), False), (TreesShape(gain="hessian"), True)):
        learner, _ = _learner(shape_cfg(cfg, shape), {"x": "NUMERICAL"}, regression=False,
                              small=True, stops_on_fold=False, num_trees=5, threads=1)
        assert learner.hyperparameters["use_hessian_gain"] is hessian
    assert str(TreesShape(gain="hessian")) == "SPARSE_OBLIQUE, hessian gain"
    assert str(TreesShape()) == "SPARSE_OBLIQUE"


def test_the_hessian_gain_is_tried_only_for_a_classification_chosen_on_folds(tmp_path):
    from training.models.tree_shapes import TreesShape, gain_variant
    auto = small_train_config("d", str(tmp_path / "j"), model="auto")
    classes = types.SimpleNamespace(task="classification")
    kept = TreesShape("AXIS_ALIGNED", "target")
    assert gain_variant(auto, classes, kept, folds=4) == TreesShape("AXIS_ALIGNED", "target",
                                                                     gain="hessian")
    assert gain_variant(auto, types.SimpleNamespace(task="regression"), kept, 4) is None
    assert gain_variant(auto, classes, kept, folds=1) is None   # a validation slice
    for given in ("gradient", "hessian"):
        cfg = small_train_config("d", str(tmp_path / "j"), model="auto", split_gain=given)
        assert gain_variant(cfg, classes, kept, 4) is None


def test_the_hessian_gain_replaces_the_kept_shape_only_when_lower_by_3_standard_errors():
    from training.choice_rules import GAIN_ERRORS, MIN_DECISION_ROWS, choose_shape
    from training.models.tree_shapes import TreesShape
    assert GAIN_ERRORS == 3.0
    kept, hessian = TreesShape("AXIS_ALIGNED"), TreesShape("AXIS_ALIGNED", gain="hessian")
    rng = np.random.default_rng(0)
    base = rng.exponential(1.0, 400) + 5
    noise = rng.normal(0, 1, 400)
    noise -= noise.mean()

    def lower_by(errors):  # a paired difference `errors` standard errors below 0
        return choose_shape({kept: base, hessian: base + noise - errors * noise.std(ddof=1)
                             / np.sqrt(400)})
    # 2.5 would switch another encoding (ENCODING_ERRORS 2), not the gain.
    shape, why = lower_by(2.5)
    assert shape == kept and "not lower by 3 standard errors" in why
    assert "SPARSE" not in why and "hessian gain" in why
    shape, why = lower_by(3.5)
    assert shape == hessian and why.endswith("AXIS_ALIGNED, hessian gain kept")
    few = base[:MIN_DECISION_ROWS - 1]
    assert choose_shape({kept: few, hessian: 0.1 * few})[0] == kept


@pytest.mark.slow
def test_a_hessian_gain_kept_on_the_folds_is_the_one_grown_again_and_exported(
        tmp_path, monkeypatch, caplog):
    """The whole chain, with the rule made to keep the hessian gain: grown on every fold,
    recorded with the figures, the forests grown again on every train row with it, and the
    export answering with them."""
    import tensorflow as tf

    from beam_jobs import preprocess
    from training import choice_rules, train_and_evaluate
    rng = np.random.default_rng(3)
    lines = ["x,y,colour,label"]
    for i in range(600):
        x, y, noise = rng.normal(size=3)
        side = x + 0.5 * y + 0.3 * noise   # noisy: the two gains split differently
        label = "left" if side < -0.4 else ("right" if side > 0.4 else "middle")
        lines.append(f"{x:.4f},{y:.4f},{['red', 'blue'][i % 2]},{label}")
    (tmp_path / "c.csv").write_text("\n".join(lines) + "\n")
    data = str(tmp_path / "prep")
    s = preprocess.run(["--input", str(tmp_path / "c.csv"), "--output", data,
                        "--label_column", "label"])
    monkeypatch.setattr(choice_rules, "GAIN_ERRORS", -1e9)   # lower by anything: kept
    caplog.set_level(logging.INFO, logger="training")
    m = train_and_evaluate(small_train_config(data, str(tmp_path / "job"), model="auto",
                                              num_trees=30, choice_folds=2,
                                              split_axis="AXIS_ALIGNED", epochs=2))
    trees = m["model"]["candidates"]["boosted_trees"]
    assert trees["split_gain"]["value"] == "hessian", trees["split_gain"]
    assert "AXIS_ALIGNED, hessian gain kept" in trees["split_gain"]["why"]
    train_rows = s["splits"]["train"]
    assert trees["refit_rows"] == train_rows
    grown = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("boosted_trees: ") and "shape (" in r.getMessage()]
    with_gain = [g for g in grown if g.endswith(" trees, 1 thread(s)") and "hessian gain" in g]
    # both folds, then every train row (and the eval rows added) for each forest kept
    assert any(g.startswith(f"boosted_trees: {train_rows} rows") for g in with_gain), grown
    assert sum(" stopping on the held-out fold" in g for g in with_gain) == 2, grown
    family = json.load(open(os.path.join(m["export_dir"], "assets.extra", "model.json")))
    assert family["family"] == m["model"]["family"]
    sig = tf.saved_model.load(m["export_dir"]).signatures["predict_raw"]
    out = sig(x=tf.constant([-2.0, 0.0, 2.0]), y=tf.constant([0.0, 0.0, 0.0]),
              colour=tf.constant(["red", "blue", "red"]))
    assert [c.decode() for c in out["classes"].numpy()] == ["left", "middle", "right"]
