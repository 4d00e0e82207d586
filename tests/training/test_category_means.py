"""Many-valued categories as their cross-fitted mean labels (training/models/category_means.py):
the shrinkage, the cross-fitting, the lookup the export runs, and trees that serve through it
what they were trained on."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import small_train_config
from training.models import category_means as cm


def test_an_ids_mean_is_shrunk_by_how_much_its_rows_scatter():
    # id 0: three rows that agree (1, 1, 1); id 1: rows that scatter (0, 2); id 2: none.
    ids = np.array([0, 0, 0, 1, 1])
    y = np.array([1.0, 1.0, 1.0, 0.0, 2.0])[:, None]
    table = cm._table(ids, y, 3)
    prior, variance = y.mean(), y.var()
    assert table[0, 0] == pytest.approx(1.0)  # no scatter: its own mean, whatever the count
    spread = (0 - 1) ** 2 + (2 - 1) ** 2      # id 1's mean is 1
    weight = variance * 2 / (variance * 2 + spread / 2)
    assert table[1, 0] == pytest.approx(weight * 1.0 + (1 - weight) * prior)
    assert table[2, 0] == table[3, 0] == pytest.approx(prior)  # never seen, and the prior row
    # A label with no variance at all: every id is the prior.
    assert np.all(cm._table(ids, np.ones((5, 1)), 3) == 1.0)


def test_a_train_rows_means_never_hold_its_own_label():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 40, 600)
    y = rng.normal(0, 1, (600, 1))
    table, values = cm.fit("f", ids, y, 40, seed=3)
    changed = y.copy()
    changed[7] += 100.0
    table2, values2 = cm.fit("f", ids, changed, 40, seed=3)
    assert values2[7] == pytest.approx(values[7])        # row 7's own label is not in it
    assert not np.allclose(values2, values)              # other folds' rows did move
    assert table2.table[ids[7], 0] > table.table[ids[7], 0]  # the served table holds it
    # Seen ids in the serving table are the whole-data means; out-of-range ids the prior.
    assert np.array_equal(table.values(np.array([-1, 40, 10**9])),
                          np.repeat(table.table[-1:], 3, axis=0))


def test_the_exports_lookup_is_the_training_lookup():
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 50, 300)
    labels = rng.integers(0, 3, 300)
    table, _ = cm.fit("village", ids, cm.targets(labels, False, 3), 50, seed=0)
    assert table.names == ["village__mean0", "village__mean1", "village__mean2"]
    asked = np.array([[0], [7], [49], [50], [-3], [123456]], np.int64)
    out = table.lookup(tf.constant(asked))
    expected = table.values(asked)
    for j, name in enumerate(table.names):
        assert out[name].shape == (6, 1)   # shaped as the ids the trees are given
        np.testing.assert_allclose(out[name].numpy()[:, 0], expected[:, j])
    # A binary label: one column, the second class's share.
    assert cm.targets(np.array([0, 1, 1]), False, 2).tolist() == [[0.0], [1.0], [1.0]]


def test_only_categorical_features_of_over_MANY_VALUES_are_encoded():
    features = {"a": "CATEGORICAL", "b": "CATEGORICAL", "c": "NUMERICAL", "d": "CATEGORICAL"}
    cardinality = {"a": cm.MANY_VALUES, "b": cm.MANY_VALUES + 1, "c": 500, "d": 1000}
    assert cm.many_valued(features, cardinality) == ["b", "d"]


def _villages(tmp_path, n=1200):
    """A label set by a village (150 of them, ~8 rows each) and a number, with noise."""
    from beam_jobs import preprocess
    rng = np.random.default_rng(0)
    village = rng.integers(0, 150, n)
    effect = rng.normal(0, 2, 150)
    x = rng.uniform(0, 1, n)
    y = effect[village] + 3 * x + rng.normal(0, 0.5, n)
    src = tmp_path / "villages.csv"
    src.write_text("id,village,x,y\n" + "".join(
        f"r{i},v{village[i]:03d},{x[i]:.4f},{y[i]:.4f}\n" for i in range(n)))
    prep = str(tmp_path / "prep")
    preprocess.run(["--input", str(src), "--output", prep, "--label_column", "y"])
    return str(src), prep


@pytest.fixture(scope="module")
def villages(tmp_path_factory):
    """_villages' 1,200 rows preprocessed once for the tests that only read them: (the
    source CSV, the preprocess output)."""
    return _villages(tmp_path_factory.mktemp("villages"))


def test_past_twenty_classes_auto_grows_one_shape_of_axis_aligned_trees(tmp_path):
    """A tree per class per round: past SEARCH_MAX_CLASSES classes the search's first shape
    alone, on axis-aligned splits unless --split_axis says otherwise."""
    from training import defaults
    from training.data import choice_fold, load_feature_info
    from training.models.trees import TreesShape, shapes
    _, prep = _villages(tmp_path, n=400)
    info = load_feature_info(prep)
    cfg = small_train_config(prep, str(tmp_path / "job"), model="auto")
    held = choice_fold(0, 4).other()
    at_bound = dataclasses.replace(info, task="classification",
                                   n_classes=defaults.SEARCH_MAX_CLASSES)
    searched = shapes(cfg, at_bound, held)
    assert len(searched) == 10 and searched[0].axis == "SPARSE_OBLIQUE"
    many = dataclasses.replace(at_bound, n_classes=defaults.SEARCH_MAX_CLASSES + 1)
    assert shapes(cfg, many, held) == [TreesShape("AXIS_ALIGNED", "frequent")]
    assert shapes(cfg, many, None) == [TreesShape("AXIS_ALIGNED")]  # --model boosted_trees
    oblique = small_train_config(prep, str(tmp_path / "o"), model="auto",
                                 split_axis="SPARSE_OBLIQUE", category_encoding="target")
    assert shapes(oblique, many, held) == [TreesShape("SPARSE_OBLIQUE", "target")]


def test_auto_grows_both_encodings_and_searches_only_on_a_small_table_with_many_values(
        tmp_path, monkeypatch):
    from training import defaults
    from training.data import choice_fold, load_feature_info
    from training.models.trees import TreesShape, shapes
    _, prep = _villages(tmp_path, n=400)
    info = load_feature_info(prep)
    assert info.categorical["village"] > cm.MANY_VALUES
    cfg = small_train_config(prep, str(tmp_path / "job"), model="auto")
    held = choice_fold(0, 4).other()
    grown = shapes(cfg, info, held)
    # The frequent values first: kept unless another is clearly lower (choose_shape).
    # Each on both axes, and the first with leaves of 20 rows on both (trees.LEAF_ROWS).
    assert grown[0] == TreesShape(encoding="frequent") and len(grown) == 8 == len(set(grown))
    assert {(s.encoding, s.algorithm) for s in grown} == {
        ("categories", "CART"), ("target", "CART"), ("frequent", "CART")}
    assert [s for s in grown if s.leaf != 5] == [
        TreesShape(a, "frequent", leaf=20) for a in ("SPARSE_OBLIQUE", "AXIS_ALIGNED")]
    # Over two classes (where YDF's CART category splits are approximate), the categories by
    # both searches too; their mean labels by CART's (no many-valued category left to split),
    # their frequent values by CART's alone (a shape less to grow).
    classes = dataclasses.replace(info, task="classification", n_classes=3)
    grown = shapes(cfg, classes, held)
    assert grown[0] == TreesShape(encoding="frequent") and len(grown) == 10 == len(set(grown))
    assert {(s.encoding, s.algorithm) for s in grown} == {
        ("categories", "CART"), ("categories", "RANDOM"), ("target", "CART"),
        ("frequent", "CART")}
    assert len(shapes(cfg, dataclasses.replace(classes, n_classes=2), held)) == 8
    assert shapes(cfg, info, None) == [TreesShape()]        # no rows held out to choose by
    given = small_train_config(prep, str(tmp_path / "j"), model="auto",
                               category_encoding="target", split_axis="AXIS_ALIGNED",
                               min_examples=5)
    assert shapes(given, info, held) == [TreesShape("AXIS_ALIGNED", "target")]
    cart = small_train_config(prep, str(tmp_path / "c"), model="auto",
                              categorical_algorithm="CART")
    assert {(s.encoding, s.algorithm) for s in shapes(cart, classes, held)} == {
        ("categories", "CART"), ("target", "CART"), ("frequent", "CART")}
    random = small_train_config(prep, str(tmp_path / "r"), model="auto",
                                categorical_algorithm="RANDOM", category_encoding="categories")
    assert {(s.encoding, s.algorithm) for s in shapes(random, info, held)} == {
        ("categories", "RANDOM")}
    monkeypatch.setattr(defaults, "SMALL_TRAIN_ROWS", 100)  # a large table: categories
    assert {s.encoding for s in shapes(cfg, info, held)} == {"categories"}
    # No many-valued category: only the axes.
    monkeypatch.undo()
    few = dict(info.categorical, village=cm.MANY_VALUES)
    monkeypatch.setattr(info, "categorical", few)
    assert {s.encoding for s in shapes(cfg, info, held)} == {"categories"}


def test_frequent_categories_are_those_seen_ten_times_in_the_trees_rows(tmp_path, villages):
    """`--category_encoding frequent`: a value seen under FREQUENT_MIN_COUNT times in the
    rows the trees grow on is one value with the others as rare; `categories` keeps every
    value seen twice."""
    from training.data import load_feature_info, split_files
    from training.models.tree_rows import read_columns
    from training.models.trees import (
        FREQUENT_MIN_COUNT,
        MIN_VOCAB_SMALL,
        feature_semantics,
        train_trees,
    )
    _, prep = villages
    info = load_feature_info(prep)
    files = split_files(prep, "train")
    ids = read_columns(files, info, feature_semantics(info), None, 10**6)[0]["village"]
    counts = np.unique(ids, return_counts=True)[1]
    assert (counts < FREQUENT_MIN_COUNT).any() and (counts >= FREQUENT_MIN_COUNT).any()

    def values_split_on(encoding):
        run = train_trees(small_train_config(prep, str(tmp_path / encoding), num_trees=3,
                                             category_encoding=encoding), info, files, None)
        (column,) = [c for c in run.forest.data_spec().columns if c.name == "village"]
        # what metrics.json lists as encoded: every categorical feature under frequent
        assert ("village" in run.encoded) == (encoding == "frequent")
        return column.categorical.number_of_unique_values - 1   # less YDF's out-of-vocabulary
    assert values_split_on("frequent") == (counts >= FREQUENT_MIN_COUNT).sum()
    assert values_split_on("categories") == (counts >= MIN_VOCAB_SMALL).sum()


@pytest.mark.slow
def test_trees_on_mean_labels_serve_what_they_were_trained_on(tmp_path, villages):
    """`--category_encoding target`: the export looks each village up in the table the trees
    were trained with, so batch prediction over the eval rows reproduces the trainer's eval."""
    import json
    import os

    from beam_jobs import batch_predict
    from tests.training.test_model_families import _eval_csv
    from training import train_and_evaluate
    src, prep = villages
    m = train_and_evaluate(small_train_config(prep, str(tmp_path / "job"),
                                              model="boosted_trees", category_encoding="target",
                                              num_trees=100))
    assert m["eval"]["rmse"] < 1.5, m["eval"]   # the noise is 0.5; villages' spread 2
    assert m["model"]["candidates"]["boosted_trees"]["category_encoding"] == {
        "value": "target", "features": ["village"]}
    eval_csv = _eval_csv(prep, src, tmp_path / "eval.csv")
    s = batch_predict.run(["--model_dir", m["export_dir"], "--input", eval_csv,
                           "--output", str(tmp_path / "out"), "--evaluate_label", "y"])
    assert s["metrics"]["examples"] == m["eval"]["examples"]
    assert s["metrics"]["rmse"] == pytest.approx(m["eval"]["rmse"], rel=1e-4)
    model = json.load(open(os.path.join(m["export_dir"], "assets.extra", "model.json")))
    assert model["family"] == "boosted_trees"
