"""How many train rows the trees hold (issue 61, item 3): a bound that follows the memory
the machine has, and past it a uniform sample of the rows, never the first rows read."""
from __future__ import annotations

import numpy as np
import pytest

from training.data import load_feature_info, split_files
from training.models import tree_rows, trees


def test_the_row_bound_follows_the_memory_available():
    per_row = 15 * tree_rows.BYTES_PER_VALUE
    cap = 5_000_000
    assert tree_rows.row_limit(15, None, cap) == (
        cap, "--trees_max_rows 5,000,000 (the available memory is unknown)")
    assert tree_rows.row_limit(15, 10 * cap * per_row, cap) == (cap, "--trees_max_rows 5,000,000")
    limit, why = tree_rows.row_limit(15, 2**30, cap)  # 1 GiB available
    assert limit == int(tree_rows.MEMORY_SHARE * 2**30 / per_row) < cap
    assert "1.0 GiB available" in why
    assert tree_rows.row_limit(15, 0, cap)[0] == 1
    assert tree_rows.available_memory() is None or tree_rows.available_memory() > 0


@pytest.mark.slow
def test_past_the_bound_the_trees_read_a_uniform_sample(preprocessed, caplog):
    data_dir, _ = preprocessed
    info = load_feature_info(data_dir)
    files = split_files(data_dir, "train")
    features = trees.feature_semantics(info)
    everything, labels, capped = tree_rows.read_columns(files, info, features, None, 10**9)
    n = len(labels)
    assert n == info.split_rows["train"] and not capped
    sample, sampled_labels, capped = tree_rows.read_columns(files, info, features, None, n // 4)
    assert capped
    got = len(sampled_labels)
    assert 0.8 * n / 4 <= got <= n // 4
    assert "a uniform sample of about" in caplog.text
    # Drawn from the whole split: the sampled rows' positions span it, not its first quarter.
    name = next(iter(features))
    first = everything[name][: n // 4]
    assert not np.array_equal(sample[name], first[:got])
    positions = np.flatnonzero(np.isin(everything[name], sample[name]))
    assert positions.max() > 0.9 * n
    # Seeded: the same sample again.
    again, _, _ = tree_rows.read_columns(files, info, features, None, n // 4)
    assert np.array_equal(again[name], sample[name])


def test_a_long_step_logs_a_heartbeat_until_it_ends(caplog):
    """YDF grows trees on millions of rows for many minutes without a word of its own."""
    import time

    from training.callbacks import heartbeat
    with caplog.at_level("INFO", logger="training"):
        with heartbeat("boosted_trees: growing", every=0.05):
            time.sleep(0.32)
        beats = len(caplog.records)
        time.sleep(0.15)
    assert beats >= 3 and all("boosted_trees: growing: " in r.getMessage() and "min so far"
                              in r.getMessage() for r in caplog.records)
    assert len(caplog.records) == beats  # none after the block


@pytest.mark.slow
def test_trees_that_held_the_row_bound_are_exported_not_grown_again(preprocessed, tmp_path,
                                                                     caplog):
    """--model auto grows the trees less the validation slice, then again on the whole
    split; trees that already held --trees_max_rows are kept (a refit would read a sample
    of the same size, and on millions of rows each growth takes most of the run)."""
    from tests.helpers import small_train_config
    from training.data import Holdout
    from training.selection import _trees_kept
    data_dir, _ = preprocessed
    info = load_feature_info(data_dir)
    files = split_files(data_dir, "train")
    n = info.split_rows["train"]
    less_slice = Holdout(True).other()

    def grown_and_kept(cap):
        cfg = small_train_config(data_dir, str(tmp_path), model="auto", trees_max_rows=cap,
                                 num_trees=20, split_axis="AXIS_ALIGNED")
        grown = trees.train_trees(cfg, info, files, less_slice)
        return grown, _trees_kept(cfg, info, files, grown, grown.shape, rounds=None)

    with caplog.at_level("INFO", logger="training"):
        grown, kept = grown_and_kept(n // 4)
    assert grown.capped and grown.rows <= n // 4 and kept is grown
    assert f"the trees grown on a sample of {grown.rows:,} rows are kept" in caplog.text
    grown, kept = grown_and_kept(10 * n)  # under the bound: grown again, on every train row
    assert not grown.capped and grown.rows < n
    assert kept is not grown and kept.rows == n
