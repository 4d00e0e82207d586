"""Missingness augmentation (training/models/missingness.py): present values of imputed
columns hidden as missing while the network trains."""
from __future__ import annotations

import csv

import numpy as np
import pytest
import tensorflow as tf

from preprocessing.files import saved_models
from tests.helpers import small_train_config


def _info(other: str, flag: str):
    """A FeatureInfo of one imputed numeric column `v` (z-score, bucket and the flag named
    `flag`) and a z-scored column named `other`."""
    from preprocessing.contract.schema import ColumnSpec, Schema
    from training.data import FeatureInfo
    schema = Schema(columns=(ColumnSpec("v", "float", "numeric", default="mean", num_buckets=4),
                             ColumnSpec(other, "float", "zscore"), ColumnSpec("y", "float")),
                    label="y", task="regression")
    return FeatureInfo(label="y", task="regression", numeric=["v", other],
                       categorical={"v_bucket": 4, flag: 2}, feature_spec={},
                       raw_schema=schema)


def _missing_table():
    """The FeatureInfo of `v` and a size `s`, and a dataset_fn of 4 batches of 1,000 rows:
    `v` missing in every 4th row."""
    info = _info("s", "v_missing")
    n = 1_000
    missing = (np.arange(n) % 4 == 0).astype(np.int64)
    batch = ({"v": np.where(missing, 0.0, 1.5).astype(np.float32),
              "v_bucket": np.where(missing, 2, 3).astype(np.int64), "v_missing": missing,
              "s": np.linspace(-1, 1, n).astype(np.float32)},
             np.arange(n, dtype=np.float32), np.ones(n, np.float32))
    return info, lambda ctx=None: tf.data.Dataset.from_tensors(batch).repeat(4)


def test_the_network_trains_with_present_imputed_values_hidden_as_missing():
    from training.models.missingness import imputed_groups, with_hidden_values
    info, dataset_fn = _missing_table()
    assert imputed_groups(info) == {"v_missing": ["v", "v_bucket"]}
    # A user's column named `v_missing` is not the flag: that one is `v_missing_`.
    assert imputed_groups(_info("v_missing", "v_missing_")) == {"v_missing_": ["v", "v_bucket"]}
    stored = {"v_missing": {"v": np.float32(0.0), "v_bucket": np.int64(2)}}
    hidden = with_hidden_values(dataset_fn, stored, 0.2, seed=7)
    batches = list(hidden())
    assert len(batches) == 4
    for (f, y, _), (f0, y0, _) in zip(batches, dataset_fn()):
        flag, was = f["v_missing"].numpy(), f0["v_missing"].numpy()
        now_hidden = (flag == 1) & (was == 0)
        assert 0.15 < now_hidden.sum() / (was == 0).sum() < 0.25    # the rate, of present rows
        assert (flag[was == 1] == 1).all()                          # missing stays missing
        np.testing.assert_array_equal(f["v"].numpy()[now_hidden], 0.0)   # the stored value
        np.testing.assert_array_equal(f["v_bucket"].numpy()[now_hidden], 2)
        np.testing.assert_array_equal(f["v"].numpy()[flag == 0], 1.5)    # the rest as it was
        np.testing.assert_array_equal(f["s"].numpy(), f0["s"].numpy())
        np.testing.assert_array_equal(y.numpy(), y0.numpy())
    # Each batch hides other rows; the same seed hides the same rows again.
    first = [b[0]["v_missing"].numpy() for b in batches]
    assert not (first[0] == first[1]).all()
    again = [b[0]["v_missing"].numpy() for b in with_hidden_values(dataset_fn, stored, 0.2, 7)()]
    assert all((a == b).all() for a, b in zip(first, again))
    assert with_hidden_values(dataset_fn, stored, 0.0, 7) is dataset_fn


def test_the_stored_missing_value_is_read_from_a_missing_row(tmp_path):
    from training.models.missingness import imputed_values
    info, _ = _missing_table()
    path = str(tmp_path / "train.tfrecord.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as w:
        for i in range(20):
            miss = int(i == 13)
            feats = {"v": [0.25 if miss else 2.0 + i], "s": [float(i)], "y": [float(i)]}
            ex = {k: tf.train.Feature(float_list=tf.train.FloatList(value=v))
                  for k, v in feats.items()}
            ex.update({k: tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
                       for k, v in (("v_bucket", 1 if miss else 3), ("v_missing", miss))})
            w.write(tf.train.Example(features=tf.train.Features(feature=ex)).SerializeToString())
    info.feature_spec = {**{k: tf.io.FixedLenFeature([], tf.float32) for k in ("v", "s", "y")},
                         **{k: tf.io.FixedLenFeature([], tf.int64) for k in ("v_bucket",
                                                                               "v_missing")}}
    found = imputed_values([path], info, {"v_missing": ["v", "v_bucket"]})
    assert found == {"v_missing": {"v": pytest.approx(0.25), "v_bucket": 1}}
    assert imputed_values([path], info, {}) == {}


def _sales_table(path, rows=1_200, seed=5):
    """The issue's class: sales with a long tail; `listings` missing for most small entities
    and never for large ones."""
    rng = np.random.default_rng(seed)
    size = rng.lognormal(5.0, 1.2, rows)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["volume", "price", "listings", "month", "sales"])
        small = size < np.median(size)
        for s, sm in zip(size, small):
            sales = s * rng.normal(1.0, 0.05)
            price = rng.normal(150_000, 10_000)
            listings = "" if sm and rng.random() < 0.6 else f"{4 * s * rng.normal(1, 0.1):.1f}"
            w.writerow([f"{sales * price:.0f}", f"{price:.0f}", listings,
                        int(rng.integers(1, 13)), f"{sales:.1f}"])
    return float(np.quantile(size, 0.99))


@pytest.mark.slow
def test_a_large_entitys_missing_value_does_not_make_it_small(tmp_path):
    """Missing values only ever seen on small entities: the network (default
    --hide_missing 0.1) predicts a large entity's row with the value missing from its other
    columns, near its size (without hiding, --hide_missing 0, it predicted 1,029 for 1,984:
    a smaller entity's sales)."""
    from beam_jobs import preprocess
    from training import train_and_evaluate
    big = _sales_table(str(tmp_path / "sales.csv"))
    preprocess.run(["--input", str(tmp_path / "sales.csv"), "--output", str(tmp_path / "prep"),
                    "--label_column", "sales", "--num_shards", "1"])
    m = train_and_evaluate(small_train_config(str(tmp_path / "prep"), str(tmp_path / "job"),
                                              epochs=30))
    fn = saved_models.load(m["export_dir"]).signatures["predict_raw"]
    specs = fn.structured_input_signature[1]
    row = {"volume": big * 150_000, "price": 150_000, "listings": float("nan"), "month": 6}
    raw = {k: tf.constant([round(row[k]) if specs[k].dtype.is_integer else row[k]],
                          specs[k].dtype) for k in specs if k in row}
    pred = float(fn(**raw)["predictions"].numpy().ravel()[0])
    assert m["config"]["hide_missing"] == 0.1
    assert 0.75 * big < pred < 1.25 * big, (pred, big)
