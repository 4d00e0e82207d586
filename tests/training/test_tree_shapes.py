"""The trees' shape under `--split_axis auto` (the default): oblique and axis-aligned
trees grown on the same rows, the one with the lower loss on the rows held out from them
kept (training/choice_rules.py choose_shape; the category encoding, the shape's other half:
tests/training/test_category_means.py)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import small_train_config
from training import defaults
from training.data import load_feature_info, split_files


def choose_axis(losses):
    """choose_shape over shapes of one encoding, by axis name."""
    from training.choice_rules import choose_shape
    from training.models.trees import TreesShape
    shape, why = choose_shape({TreesShape(a): rows for a, rows in losses.items()})
    return shape.axis, why


def test_the_axis_aligned_trees_are_kept_only_when_clearly_lower_on_the_held_out_rows():
    """Lower by AXIS_ERRORS (3) standard errors of the paired difference."""
    from training.choice_rules import MIN_DECISION_ROWS
    rng = np.random.default_rng(0)
    oblique = rng.exponential(1.0, 400)
    # Lower on every row: kept, with the figures.
    axis, why = choose_axis({"SPARSE_OBLIQUE": oblique, "AXIS_ALIGNED": 0.5 * oblique})
    assert axis == "AXIS_ALIGNED" and "lower by over 3 standard errors" in why
    assert "400 held-out rows" in why
    # 1% lower on average but by noise (ISLR's Hitters): the oblique trees stay.
    noisy = oblique * rng.uniform(0.5, 1.48, 400)
    assert noisy.mean() < oblique.mean()
    axis, why = choose_axis({"SPARSE_OBLIQUE": oblique, "AXIS_ALIGNED": noisy})
    assert axis == "SPARSE_OBLIQUE" and "not lower by 3 standard errors" in why
    # Lower by 2.5 standard errors (boot's aids 2.1, the taxi demo 2.3): not enough.
    noise = rng.normal(0, 1, 400)
    noise -= noise.mean()

    def lower_by(errors):  # a paired difference `errors` standard errors below 0
        diff = noise - errors * noise.std(ddof=1) / np.sqrt(400)
        return choose_axis({"SPARSE_OBLIQUE": oblique + 5, "AXIS_ALIGNED": oblique + 5 + diff})[0]
    assert lower_by(2.5) == "SPARSE_OBLIQUE" and lower_by(3.5) == "AXIS_ALIGNED"
    # Too few rows to tell, and a tie (every feature a category).
    few = oblique[:MIN_DECISION_ROWS - 1]
    assert choose_axis({"SPARSE_OBLIQUE": few, "AXIS_ALIGNED": 0.1 * few})[0] == "SPARSE_OBLIQUE"
    assert choose_axis({"SPARSE_OBLIQUE": oblique, "AXIS_ALIGNED": oblique})[0] == \
        "SPARSE_OBLIQUE"
    assert choose_axis({"AXIS_ALIGNED": np.zeros(0)}) == (
        "AXIS_ALIGNED", "the one grown (--split_axis and --category_encoding, or no rows "
        "held out)")


def test_of_several_shapes_clearly_lower_than_the_default_the_lowest_is_kept():
    from training.choice_rules import choose_shape
    from training.models.trees import TreesShape
    rng = np.random.default_rng(0)
    first = rng.exponential(1.0, 400) + 1.0
    default, aligned = TreesShape(), TreesShape("AXIS_ALIGNED")
    encoded, both = TreesShape(encoding="target"), TreesShape("AXIS_ALIGNED", "target")
    noise = rng.normal(0, 20, 400)
    losses = {default: first, aligned: 0.8 * first, encoded: 0.6 * first,
              both: first - 0.9 + noise - noise.mean()}  # 0.9 lower, 1 standard error
    assert np.mean(losses[both]) < np.mean(losses[encoded])  # lowest mean, but by noise
    shape, why = choose_shape(losses)
    assert shape == encoded and "lower by over 2 standard errors" in why
    assert "(the lowest of 3 others)" in why and str(encoded) == "SPARSE_OBLIQUE, target"
    # The lowest mean alone, not clearly lower, does not hide one that is (the old rule's
    # axis-aligned trees stay chosen beside a noisy encoding).
    shape, _ = choose_shape({default: first, aligned: 0.8 * first, both: losses[both]})
    assert shape == aligned
    shape, why = choose_shape({default: first, both: losses[both]})
    assert shape == default and "not lower by 3 standard errors" in why
    # RANDOM category splits on the default's axis are another search alone: 2 errors.
    random = TreesShape(algorithm="RANDOM")
    shape, why = choose_shape({default: first, random: 0.7 * first})
    assert shape == random and "lower by over 2 standard errors" in why
    assert str(random) == "SPARSE_OBLIQUE, RANDOM category splits"
    # Leaves of 20 rows on the default's axis are another leaf size alone: 2 errors; on
    # the other axis, 3 (carseats' folds, YDF alone: 2.4-4.5 below, docs/performance.md).
    leaf, leaf_aligned = TreesShape(leaf=20), TreesShape("AXIS_ALIGNED", leaf=20)
    shape, why = choose_shape({default: first, leaf: 0.7 * first})
    assert shape == leaf and "lower by over 2 standard errors" in why
    assert str(leaf) == "SPARSE_OBLIQUE, leaves of 20+ rows"
    shape, why = choose_shape({default: first, leaf_aligned: first - 0.9 + noise - noise.mean()})
    assert shape == default and "not lower by 3 standard errors" in why


@pytest.mark.slow
def test_both_axes_are_grown_on_the_same_rows_only_to_choose(preprocessed, tmp_path):
    import dataclasses

    from training.data import choice_fold
    from training.models.trees import TreesShape, grow_shapes, shapes
    data_dir, _ = preprocessed
    cfg = small_train_config(data_dir, str(tmp_path / "job"), model="auto", num_trees=10)
    info, files, fold = load_feature_info(data_dir), split_files(data_dir, "train"), \
        choice_fold(0, 4)
    runs = grow_shapes(cfg, info, files, fold.other())
    assert all(r.shape == s for s, r in runs.items())
    # Each shape with YDF's leaves of 5 rows, then the first kind on each axis with
    # scikit-learn's 20 (a small table, --min_examples not given); each run's shape is read
    # from the settings it was grown with (train_trees).
    assert int(info.split_rows["train"]) < defaults.SMALL_TRAIN_ROWS
    first = next(iter(runs))
    assert list(runs)[-2:] == [dataclasses.replace(first, leaf=20),
                               dataclasses.replace(first, axis="AXIS_ALIGNED", leaf=20)]
    assert {s.leaf for s in list(runs)[:-2]} == {5}
    assert len({r.rows for r in runs.values()}) == 1
    # An axis, an encoding, a category search and a leaf size given, or no rows held out
    # (--model boosted_trees alone): one kind of trees.
    fixed = dict(num_trees=5, split_axis="AXIS_ALIGNED", category_encoding="categories",
                 categorical_algorithm="CART")
    (one,) = grow_shapes(small_train_config(data_dir, str(tmp_path / "j2"), min_examples=5,
                                            **fixed),
                         info, files, fold.other()).values()
    assert one.shape == TreesShape("AXIS_ALIGNED")
    leaves = grow_shapes(small_train_config(data_dir, str(tmp_path / "j3"), **fixed),
                         info, files, fold.other())
    assert list(leaves) == [TreesShape("AXIS_ALIGNED"), TreesShape("AXIS_ALIGNED", leaf=20)]
    assert list(grow_shapes(cfg, info, files, None)) == [TreesShape()]
    # A table of SMALL_TRAIN_ROWS or more: YDF's leaves alone.
    big = dataclasses.replace(info, split_rows={**info.split_rows,
                                                "train": defaults.SMALL_TRAIN_ROWS})
    assert [s.leaf for s in shapes(cfg, big, fold.other())] == [5, 5]


def _steps_table(tmp_path) -> str:
    """A label that steps with one integer column (as a state's population does with the
    year in dslabs' us_contagious_diseases) beside two columns of noise: oblique splits mix
    the noise into every threshold (1,200 such rows, YDF alone: test RMSE 1.7 oblique, 0.58
    axis-aligned, at a noise of 0.5). Preprocessed: the output folder."""
    from beam_jobs import preprocess
    rng = np.random.default_rng(0)
    n = 3000
    year, weeks, noise = rng.integers(1950, 2000, n), rng.integers(0, 53, n), rng.uniform(0, 1, n)
    steps = np.sort(rng.choice(np.arange(1951, 2000), 8, replace=False))
    y = rng.normal(0, 10, 9)[np.searchsorted(steps, year, side="right")] + \
        rng.normal(0, 0.5, n)
    src = tmp_path / "steps.csv"
    src.write_text("id,year,weeks,noise,y\n" + "".join(
        f"r{i},{year[i]},{weeks[i]},{noise[i]:.4f},{y[i]:.4f}\n" for i in range(n)))
    prep = str(tmp_path / "prep")
    preprocess.run(["--input", str(src), "--output", prep, "--label_column", "y"])
    return prep


@pytest.mark.slow
def test_auto_grows_axis_aligned_trees_where_oblique_splits_blur_a_step(tmp_path, monkeypatch):
    """`auto` keeps the axis-aligned trees, chosen on the cross-fitted folds, and exports
    them; so it does on a validation slice of a table too large for per-round curves."""
    from training import train_and_evaluate
    prep = _steps_table(tmp_path)
    oblique = train_and_evaluate(small_train_config(
        prep, str(tmp_path / "oblique"), model="boosted_trees", split_axis="SPARSE_OBLIQUE",
        num_trees=150))["eval"]["rmse"]
    m = train_and_evaluate(small_train_config(prep, str(tmp_path / "auto"), model="auto",
                                              num_trees=150, choice_folds=2))
    trees = m["model"]["candidates"]["boosted_trees"]
    assert trees["split_axis"]["value"] == "AXIS_ALIGNED", trees["split_axis"]
    assert "lower by over 3 standard errors" in trees["split_axis"]["why"]
    assert trees["refit_rows"] > trees["rows"]  # grown again on every train row
    assert trees["eval"]["rmse"] < 0.8 and oblique > 1.5 * trees["eval"]["rmse"], \
        (trees["eval"], oblique)  # the noise is 0.5
    # One validation slice, the trees stopped by YDF on its own rows (no per-round curve).
    monkeypatch.setattr(defaults, "SMALL_TRAIN_ROWS", 100)
    m = train_and_evaluate(small_train_config(prep, str(tmp_path / "slice"), model="auto",
                                              num_trees=150, choice_folds=1))
    trees = m["model"]["candidates"]["boosted_trees"]
    assert trees["early_stopping"] is True and "refit_num_trees" not in trees
    assert trees["split_axis"]["value"] == "AXIS_ALIGNED", trees["split_axis"]


def test_a_capped_category_keeps_the_search_the_shape_says(tmp_path):
    """YDF searches a feature of YDF_RANDOM_ARITY dictionary items or more by RANDOM whatever
    the learner is told: a feature of 1,000 values, capped at MAX_VOCAB, stays under it."""
    from training.models.trees import LABEL, MAX_VOCAB, YDF_RANDOM_ARITY, TreesShape, _learner, shape_cfg
    cfg = small_train_config("d", str(tmp_path / "job"), model="auto")
    learner, _ = _learner(shape_cfg(cfg, TreesShape()), {"x": "CATEGORICAL"}, regression=True,
                          small=True, stops_on_fold=False, num_trees=2, threads=1)
    values = np.repeat(np.arange(1000), 3).astype(str)
    forest = learner.train({"x": values, LABEL: np.arange(len(values), dtype=np.float32)},
                           verbose=0)
    items = next(c for c in forest.data_spec().columns if c.name == "x").categorical
    assert items.number_of_unique_values == MAX_VOCAB + 1 < YDF_RANDOM_ARITY  # and one OOV


def test_the_learner_searches_category_splits_as_the_shape_says(tmp_path):
    """`auto` is no YDF value: each shape's own search reaches the learner (shape_cfg)."""
    from training.models.trees import TreesShape, _learner, shape_cfg
    cfg = small_train_config("d", str(tmp_path / "job"), model="auto")
    assert cfg.categorical_algorithm == "auto"
    for shape in (TreesShape(), TreesShape(algorithm="RANDOM")):
        learner, _ = _learner(shape_cfg(cfg, shape), {"x": "CATEGORICAL"}, regression=True,
                              small=True, stops_on_fold=False, num_trees=None, threads=1)
        assert learner.hyperparameters["categorical_algorithm"] == shape.algorithm
        assert learner.hyperparameters["split_axis"] == shape.axis
        assert learner.hyperparameters["min_examples"] == shape.leaf
    assert shape_cfg(cfg).categorical_algorithm == "CART"   # auto's default, alone
    assert cfg.min_examples is None and shape_cfg(cfg).min_examples == 5
    learner, _ = _learner(shape_cfg(cfg, TreesShape(leaf=20)), {"x": "CATEGORICAL"},
                          regression=True, small=True, stops_on_fold=False, num_trees=None,
                          threads=1)
    assert learner.hyperparameters["min_examples"] == 20
