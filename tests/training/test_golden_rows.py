"""--refit_on_eval adds only the eval rows the golden set does not hold: the gate and the
tuner judge a new version on those rows, which it must not have learned
(training/exporting/golden_rows.py)."""
from __future__ import annotations

import os
import shutil

import numpy as np
import tensorflow as tf

from preprocessing.reference import golden, golden_score
from training import data as data_lib
from training.exporting import golden_rows


def with_golden(data_dir: str, dest, keep=None, edit=None) -> str:
    """A copy of a preprocess output whose golden set holds its first `keep` rows, each
    passed through `edit` (a tf.train.Example -> None) when given."""
    shutil.copytree(data_dir, dest)
    path = os.path.join(dest, golden.GOLDEN_DIR, golden.GOLDEN_FILE)
    examples = golden.tfrecord_examples(golden.read_bounded(path), path)[:keep]
    with tf.io.TFRecordWriter(path) as w:
        for raw in examples:
            if edit:
                example = tf.train.Example.FromString(raw)
                edit(example)
                raw = example.SerializeToString()
            w.write(raw)
    return str(dest)


def golden_matches(gold, keys, floats):
    """(the mask of `keys` / `floats` rows equal to a golden row, how many golden rows
    matched none), in one batch."""
    index = golden_rows.GoldenIndex(gold)
    return index.match(keys, floats), index.missing


def _added(data_dir):
    info = data_lib.load_feature_info(data_dir)
    return info, golden_rows.eval_less_golden(
        data_dir, info, data_lib.split_files(data_dir, "eval"))


def test_the_golden_rows_are_left_out_of_the_eval_rows_added(preprocessed, tmp_path,
                                                             monkeypatch):
    monkeypatch.setattr(golden_score, "NOISY_ROWS", 10)  # 50 golden rows judge versions
    data_dir = with_golden(preprocessed[0], tmp_path / "data", keep=50)
    info, (files, rows, why, learned) = _added(data_dir)
    assert not learned
    eval_rows = info.split_rows["eval"]
    assert files and 0 < rows <= eval_rows - 50 and why.startswith("the eval rows less the ")
    dropped = int(why.split()[-5])
    assert rows + dropped == eval_rows and dropped >= 50
    gold = golden_rows.golden_inputs(data_dir, info)
    assert len(gold[0]) == 50
    spec = {k: info.feature_spec[k] for k in info.input_names}
    added = [golden_rows._rows(tf.io.parse_example(b, spec), info.input_names)
             for b in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(512)]
    keys = np.concatenate([k for k, _ in added])
    floats = np.concatenate([f for _, f in added])
    mask, missing = golden_matches(gold, keys, floats)
    assert len(keys) == rows and not mask.any() and missing == 50  # none of them is left
    shutil.rmtree(os.path.dirname(files[0]))  # the caller's to remove (the trainer does)


def test_floats_match_within_the_transforms_last_bits():
    """A golden row matches an eval row whose floats differ in the 7th digit (the taxi's
    distance, 0.5377065 vs 0.5377066, split rows rounded to 6 digits), not one whose
    strings or floats differ."""
    gold = (np.array([b"29|Cash"], dtype=object), np.array([[0.5377065, np.nan]]))
    keys = np.array([b"29|Cash", b"29|Cash", b"29|Card", b"29|Cash"], dtype=object)
    floats = np.array([[0.5377066, np.nan], [0.5377065, 0.0], [0.5377065, np.nan],
                       [0.54, np.nan]])
    mask, missing = golden_matches(gold, keys, floats)
    assert mask.tolist() == [True, False, False, False] and missing == 0
    assert golden_matches(gold, keys[1:], floats[1:])[1] == 1


def test_matching_a_batch_at_a_time_finds_what_matching_all_at_once_does():
    """The eval split is matched a batch at a time (never held whole): a golden row found in
    an earlier batch stays found, and an eval row repeated in two batches is left out twice."""
    gold = (np.array([b"a", b"b", b"c"], dtype=object), np.array([[1.0], [2.0], [3.0]]))
    keys = np.array([b"a", b"x", b"b", b"a", b"c", b"b"], dtype=object)
    floats = np.array([[1.0], [1.0], [2.0], [1.0], [3.5], [2.0]])
    whole, missing = golden_matches(gold, keys, floats)
    assert whole.tolist() == [True, False, True, True, False, True] and missing == 1
    index = golden_rows.GoldenIndex(gold)
    parts = [index.match(keys[i:i + 2], floats[i:i + 2]) for i in range(0, 6, 2)]
    assert np.concatenate(parts).tolist() == whole.tolist() and index.missing == 1
    assert index.found.tolist() == [True, True, False]


def test_nothing_is_added_when_the_golden_set_is_the_whole_eval_split(preprocessed, tmp_path):
    """The default 500 golden rows hold every eval row of a small table."""
    info, (files, rows, why, learned) = _added(preprocessed[0])
    assert golden_score.NOISY_ROWS <= info.split_rows["eval"] < golden.DEFAULT_ROWS
    assert (files, rows, learned) == (None, 0, False)
    assert "every eval row is in the golden set" in why


def test_a_golden_set_too_small_to_judge_by_is_learned_too_and_the_export_says_so(
        preprocessed, tmp_path):
    """Under NOISY_ROWS golden rows the gate's tolerance is within its noise: every eval row
    is added, the golden set's too, once each golden row is found in the eval split."""
    data_dir = with_golden(preprocessed[0], tmp_path / "data", keep=golden_score.NOISY_ROWS - 1)
    info, (files, rows, why, learned) = _added(data_dir)
    assert files == data_lib.split_files(data_dir, "eval") and learned
    assert rows == info.split_rows["eval"]
    assert why.startswith(f"every eval row, the golden set's {golden_score.NOISY_ROWS - 1} too")
    # One golden row that is no eval row's: nothing can be said learned, nothing is added.
    def edit(example):
        example.features.feature["pickup_latitude"].float_list.value[:] = [10.0]
    data_dir = with_golden(preprocessed[0], tmp_path / "edited", keep=20, edit=edit)
    assert _added(data_dir)[1][:2] == (None, 0)


def test_a_golden_row_not_found_in_the_eval_split_adds_nothing(preprocessed, tmp_path):
    """A golden set that is not the eval split's sample (edited, or from other data): the
    rows it holds cannot be told apart, so none is added."""
    def edit(example):  # a model input, far outside the train range (clipped to its edge)
        example.features.feature["pickup_latitude"].float_list.value[:] = [10.0]
    data_dir = with_golden(preprocessed[0], tmp_path / "data", keep=20, edit=edit)
    _, (files, rows, why, learned) = _added(data_dir)
    assert (files, rows, learned) == (None, 0, False)
    assert "were not found in the eval split" in why


def test_without_a_golden_set_every_eval_row_is_added(preprocessed, tmp_path):
    data_dir = with_golden(preprocessed[0], tmp_path / "data")
    os.remove(os.path.join(data_dir, golden.GOLDEN_DIR, golden.GOLDEN_FILE))
    info, (files, rows, why, learned) = _added(data_dir)
    assert files == data_lib.split_files(data_dir, "eval") and not learned
    assert rows == info.split_rows["eval"] and "no golden set" in why


def test_a_golden_set_that_cannot_be_read_adds_nothing_and_says_why(preprocessed, tmp_path):
    data_dir = with_golden(preprocessed[0], tmp_path / "data")
    with open(os.path.join(data_dir, golden.GOLDEN_DIR, golden.GOLDEN_FILE), "wb") as f:
        f.write(b"\x00not a TFRecord" * 8)
    _, (files, rows, why, _learned) = _added(data_dir)
    assert (files, rows) == (None, 0)
    assert "is not a TFRecord file of tf.Examples" in why and why.endswith("no eval row is added")
