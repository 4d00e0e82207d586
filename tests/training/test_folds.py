"""The train split's hashed folds (training/data.py Holdout, row_contents) and how many
`--model auto` scores its candidates on (training/defaults.py choice_folds)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from training import defaults
from training.data import HOLDOUT_BUCKETS, load_feature_info, split_files


def test_the_choice_is_cross_fitted_on_a_small_train_split_on_one_process():
    def folds(flag=None, kind="single", rows=2_000, both=True, patience=None):
        return defaults.choice_folds(flag, kind, rows, both, patience)[0]
    assert folds() == defaults.CHOICE_FOLDS
    assert folds(rows=defaults.SMALL_TRAIN_ROWS) == 1        # the slice has 1,000 rows
    assert folds(kind="multi_worker") == folds(kind="multi_worker", flag=4) == 1
    assert folds(both=False) == 1                              # one family: no choice
    assert folds(patience=5) == 1                              # stops on the slice
    assert folds(flag=1) == 1 and folds(flag=6, rows=50_000) == 6
    # Every fold's network runs the same schedule: no early stopping on one fold.
    assert defaults.early_stopping(None, False, 5_000, cross_fitted=True)[0] == 0
    assert defaults.early_stopping(3, False, 5_000, cross_fitted=True)[0] == 3


def test_the_trees_count_may_grow_past_300_only_where_the_folds_choose_it():
    """--num_trees unset: NUM_TREES, and the kept shape's folds may be grown again to
    FOLD_MAX_TREES where cross-fitted folds choose the count; on one slice, or with a flag
    given, nothing grows past the count."""
    assert defaults.num_trees(None, defaults.CHOICE_FOLDS)[:2] == (
        defaults.NUM_TREES, defaults.FOLD_MAX_TREES)
    assert defaults.num_trees(None, 1)[:2] == (defaults.NUM_TREES, None)
    assert defaults.num_trees(50, defaults.CHOICE_FOLDS) == (50, None, "--num_trees")


def test_regression_trees_grown_again_on_more_rows_keep_more_rounds_within_the_bound():
    """refit_rounds: a regression's folds' count times the refit's rows over a fold's, at
    most the trees the folds grew; a classification's count as the folds chose it."""
    rule = defaults.refit_rounds
    # 4 folds of 300 train rows: each fold's trees grew on 225; the train split is 4/3 of
    # that, with a 30-row eval split 22/15.
    assert rule(60, 300, "regression", 225.0, 300) == (80, "the folds' 60 x 300 rows / 225 "
                                                          "a fold's")
    assert rule(60, 300, "regression", 225.0, 330)[0] == 88
    assert rule(60, 300, "classification", 225.0, 330) == (60, "the folds' count")
    value, why = rule(280, 300, "regression", 225.0, 330)
    assert value == 300 and why.endswith("at most 300")
    # no more rows than a fold's (nothing to scale by): the folds' count
    assert rule(60, 300, "regression", 225.0, 225)[0] == 60
    assert rule(60, 300, "regression", 0.0, 330)[0] == 60


def test_the_model_kept_learns_the_eval_rows_only_where_folds_chose_it():
    """refit_on_eval: on by default where cross-fitted folds chose (the eval split chose
    nothing), off on one slice, with an empty eval split, with --slice_by (it measures the
    exported model on eval rows) or when told."""
    rule = defaults.refit_on_eval
    assert rule(None, defaults.CHOICE_FOLDS, 120, ())[0] is True
    assert rule(None, 4, 120, ())[1] == "auto: --model auto chose on 4 cross-fitted folds"
    assert rule(None, 1, 120, ()) == (False, "the choice was made on the validation slice, "
                                             "not on cross-fitted folds")
    assert rule(None, defaults.CHOICE_FOLDS, 0, ())[0] is False
    assert rule(None, defaults.CHOICE_FOLDS, 120, ("region",))[0] is False
    assert rule(False, defaults.CHOICE_FOLDS, 120, ()) == (False, "--no-refit_on_eval")
    assert rule(True, defaults.CHOICE_FOLDS, 120, ()) == (True, "--refit_on_eval")


def test_refit_on_eval_where_no_folds_chose_is_refused_before_training(preprocessed, tmp_path):
    """One model given, or one validation slice: nothing was chosen on folds, and the flag
    is refused in one line before a family trains (no job folder content is written)."""
    from tests.helpers import small_train_config
    from training import train_and_evaluate
    from training.guards import TrainingError
    data_dir, _ = preprocessed
    for kw in ({"model": "boosted_trees"}, {"model": "auto", "choice_folds": 1}):
        job = tmp_path / kw["model"]
        with pytest.raises(TrainingError, match="--refit_on_eval needs --model auto to choose "
                                                "on cross-fitted folds; here "):
            train_and_evaluate(small_train_config(data_dir, str(job), refit_on_eval=True, **kw))
        assert not (job / "export").exists()


def test_choice_folds_are_checked_before_training(tmp_path):
    from training.config import ConfigError, TrainConfig
    for bad in (0, 11):
        with pytest.raises(ConfigError, match="--choice_folds must be in"):
            TrainConfig(data_dir="d", job_dir=str(tmp_path), choice_folds=bad)
    with pytest.raises(ConfigError, match="--early_stopping_patience 0"):
        TrainConfig(data_dir="d", job_dir=str(tmp_path), choice_folds=4,
                    early_stopping_patience=5)
    with pytest.raises(ConfigError, match="--refit_on_eval .* --slice_by"):
        TrainConfig(data_dir="d", job_dir=str(tmp_path), refit_on_eval=True,
                    slice_by=("region",))
    for bad in (-0.1, 1.0):
        with pytest.raises(ConfigError, match="--hide_missing must be in"):
            TrainConfig(data_dir="d", job_dir=str(tmp_path), hide_missing=bad)


def test_the_choice_folds_partition_the_train_split(tmp_path):
    """Each record is in one validation fold; a fold's complement is the rest; one fold of
    the default is the 1-in-10 slice."""
    from training.data import FeatureInfo, Holdout, choice_fold, make_dataset_fn
    path = str(tmp_path / "train.tfrecord.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as w:
        for i in range(1_000):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)])),
                "y": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)]))}))
                .SerializeToString())
    spec = {k: tf.io.FixedLenFeature([], tf.float32) for k in ("x", "y")}
    info = FeatureInfo(label="y", task="regression", numeric=["x"], categorical={},
                       feature_spec=spec)

    def rows(holdout):
        ds = make_dataset_fn([path], info, 64, training=False, holdout=holdout)()
        return [int(v) for f, _, _ in ds for v in f["x"].numpy()]
    folds = [rows(choice_fold(k, 4)) for k in range(4)]
    assert sorted(sum(folds, [])) == list(range(1_000))
    assert all(150 < len(f) < 350 for f in folds)
    assert sorted(rows(choice_fold(1, 4).other()) + folds[1]) == list(range(1_000))
    one = rows(choice_fold(0, 1))
    assert one == rows(Holdout(True, 0, HOLDOUT_BUCKETS)) and 50 < len(one) < 150
    with pytest.raises(ValueError):
        Holdout(True, 4, 4)


def test_fold_rows_are_read_once_per_fold_and_predict_as_a_fresh_read(tmp_path, monkeypatch):
    """`--model auto` predicts each fold with every candidate: FoldRows reads a fold's rows
    once, as one batch, and the predictions are those of a pipeline read each time."""
    from training import data as data_lib
    from training.data import FeatureInfo, choice_fold
    from training.reporting.scoring import FoldRows, predicted
    path = str(tmp_path / "train.tfrecord.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as w:
        for i in range(500):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)])),
                "y": tf.train.Feature(float_list=tf.train.FloatList(value=[i % 7.0]))}))
                .SerializeToString())
    spec = {k: tf.io.FixedLenFeature([], tf.float32) for k in ("x", "y")}
    info = FeatureInfo(label="y", task="regression", numeric=["x"], categorical={},
                       feature_spec=spec, split_rows={"train": 500})
    reads = []
    make = data_lib.make_dataset_fn
    monkeypatch.setattr(data_lib, "make_dataset_fn",
                        lambda *a, **k: reads.append(k["holdout"]) or make(*a, **k))

    def model(features, training=False):
        return tf.expand_dims(features["x"] * 2.0 + 1.0, -1)
    rows = FoldRows([path], info, 64)
    for fold in (0, 1, 0, 1, 1):
        held = choice_fold(fold, 4)
        kept = rows.predicted(model, held)
        fresh = predicted(model, [path], info, 64, held)
        np.testing.assert_array_equal(kept.out, fresh.out)
        np.testing.assert_array_equal(kept.label, fresh.label)
        assert len(rows.batches(held)) == 1 and 60 < len(kept.out) < 200
    # two folds read once each for `rows` (the fresh reads: one per call)
    assert reads.count(choice_fold(0, 4)) == 1 + 2 and reads.count(choice_fold(1, 4)) == 1 + 3
    # a large train split's rows are not kept: read batch by batch each time
    import dataclasses
    large = FoldRows([path], dataclasses.replace(info, split_rows={"train": 20_000}), 64)
    assert not large.kept and len(list(large.batches(choice_fold(0, 4)))) > 1


def test_a_records_fold_follows_its_values_not_its_bytes():
    """The encoder writes a tf.Example's features in an order that differs between runs; the
    same row serialized in two orders is in the same fold (the same CSV preprocessed twice
    gives the same validation rows)."""
    from training.data import row_contents

    def feature(name, value):  # an Example of one feature; concatenated Examples merge
        return tf.train.Example(features=tf.train.Features(feature={name: tf.train.Feature(
            float_list=tf.train.FloatList(value=[value]))})).SerializeToString()
    spec = {k: tf.io.FixedLenFeature([], tf.float32) for k in ("x", "y")}
    xy = [feature("x", float(i)) + feature("y", 2.0 * i) for i in range(50)]
    yx = [feature("y", 2.0 * i) + feature("x", float(i)) for i in range(50)]
    assert xy[1] != yx[1]
    fold = [tf.strings.to_hash_bucket_fast(row_contents(tf.constant(r), spec), 4).numpy()
            for r in (xy, yx)]
    assert (fold[0] == fold[1]).all() and len(set(fold[0])) == 4
    # A different value is a different row.
    other = row_contents(tf.constant([feature("x", 1.0) + feature("y", 3.0)]), spec)
    assert other.numpy()[0] != row_contents(tf.constant(xy[1:2]), spec).numpy()[0]


@pytest.mark.slow
def test_the_same_csv_preprocessed_twice_gives_the_same_validation_rows(
        preprocessed, preprocessed_by_two_workers):
    """Two preprocess runs in different processes write the same rows as different
    tf.Example bytes (feature order); the validation fold is made of the same rows both
    times, so the same command trains the same model. One run is a test worker's, the other
    two worker processes' of Beam's multi-processing runner."""
    from training.data import choice_fold, make_dataset_fn
    outs = [preprocessed[0], preprocessed_by_two_workers]
    raw = [sorted(r.numpy() for r in tf.data.TFRecordDataset(split_files(o, "train"),
                                                               compression_type="GZIP"))
           for o in outs]
    assert raw[0] != raw[1]  # the bytes differ (a protobuf map's order, per process)

    def fold_rows(data_dir):
        info = load_feature_info(data_dir)
        ds = make_dataset_fn(split_files(data_dir, "train"), info, 512, training=False,
                             holdout=choice_fold(1, defaults.CHOICE_FOLDS), scale_label=False)()
        rows = []
        for f, y, _ in ds:
            cols = [f[n].numpy().reshape(-1) for n in info.numeric] + [y.numpy().reshape(-1)]
            rows += [tuple(float(c[i]) for c in cols) for i in range(len(cols[-1]))]
        return sorted(rows)
    first = fold_rows(outs[0])
    assert first and first == fold_rows(outs[1])


def test_rows_of_equal_values_are_told_apart_by_the_key(tmp_path):
    """Passengers of equal class, sex and missing age, some survived and some not: hashed by
    values, each label's group lands whole in one fold, and holding it out leaves only the
    other label's rows of that group to train on. With a key each row has its own fold."""
    from preprocessing.contract.schema import Schema
    from training.data import FeatureInfo, choice_fold, make_dataset_fn
    path = str(tmp_path / "train.tfrecord.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as w:
        for i in range(400):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"p%d" % i])),
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0])),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2]))}))
                .SerializeToString())
    spec = {"id": tf.io.FixedLenFeature([], tf.string),
            "x": tf.io.FixedLenFeature([], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}
    schema = Schema.from_dict({"label": "y", "key": "id", "columns": [
        {"name": "id", "type": "string"}, {"name": "x", "type": "float"},
        {"name": "y", "type": "int"}]})

    def fold_labels(info):
        out = []
        for k in range(4):
            ds = make_dataset_fn([path], info, 64, training=False, holdout=choice_fold(k, 4))()
            out.append(sorted(int(v) for _, y, _ in ds for v in y.numpy()))
        return out
    keyed = fold_labels(FeatureInfo(label="y", task="classification", numeric=["x"],
                                    categorical={}, feature_spec=spec, raw_schema=schema))
    assert sum(len(f) for f in keyed) == 400
    assert all(60 < len(f) < 140 and 0.3 < sum(f) / len(f) < 0.7 for f in keyed), keyed
    by_values = fold_labels(FeatureInfo(label="y", task="classification", numeric=["x"],
                                        categorical={}, feature_spec=spec))
    for label in (0, 1):  # each label's 200 rows whole in one fold
        assert sorted(f.count(label) for f in by_values) == [0, 0, 0, 200], by_values
