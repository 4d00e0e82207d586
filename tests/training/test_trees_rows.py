"""How many train rows the trees hold (issue 61, item 3): a bound that follows the memory
the machine has, and past it a uniform sample of the rows, never the first rows read."""
from __future__ import annotations

import numpy as np
import pytest

from training.data import load_feature_info, split_files
from training.models import tree_rows, trees


def test_the_row_bound_follows_the_memory_available():
    per_row = 15 * tree_rows.BYTES_PER_VALUE
    assert tree_rows.row_limit(15, None)[0] == tree_rows.MAX_ROWS
    assert tree_rows.row_limit(15, 10 * tree_rows.MAX_ROWS * per_row)[0] == tree_rows.MAX_ROWS
    limit, why = tree_rows.row_limit(15, 2**30)  # 1 GiB available
    assert limit == int(tree_rows.MEMORY_SHARE * 2**30 / per_row) < tree_rows.MAX_ROWS
    assert "1.0 GiB available" in why
    assert tree_rows.row_limit(15, 0)[0] == 1
    assert tree_rows.available_memory() is None or tree_rows.available_memory() > 0


@pytest.mark.slow
def test_past_the_bound_the_trees_read_a_uniform_sample(preprocessed, caplog):
    data_dir, _ = preprocessed
    info = load_feature_info(data_dir)
    files = split_files(data_dir, "train")
    features = trees.feature_semantics(info)
    everything, labels = tree_rows.read_columns(files, info, features, None)
    n = len(labels)
    assert n == info.split_rows["train"]
    sample, sampled_labels = tree_rows.read_columns(files, info, features, None, limit=n // 4)
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
    again, _ = tree_rows.read_columns(files, info, features, None, limit=n // 4)
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
