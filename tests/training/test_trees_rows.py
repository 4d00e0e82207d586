"""How many train rows the trees hold (issue 61, item 3): a bound that follows the memory
the machine has, and past it a uniform sample of the rows, never the first rows read."""
from __future__ import annotations

import numpy as np
import pytest

from training.data import load_feature_info, split_files
from training.models import trees


def test_the_row_bound_follows_the_memory_available():
    per_row = 15 * trees.BYTES_PER_VALUE
    assert trees.row_limit(15, None)[0] == trees.MAX_ROWS
    assert trees.row_limit(15, 10 * trees.MAX_ROWS * per_row)[0] == trees.MAX_ROWS
    limit, why = trees.row_limit(15, 2**30)  # 1 GiB available
    assert limit == int(trees.MEMORY_SHARE * 2**30 / per_row) < trees.MAX_ROWS
    assert "1.0 GiB available" in why
    assert trees.row_limit(15, 0)[0] == 1
    assert trees.available_memory() is None or trees.available_memory() > 0


@pytest.mark.slow
def test_past_the_bound_the_trees_read_a_uniform_sample(preprocessed, caplog):
    data_dir, _ = preprocessed
    info = load_feature_info(data_dir)
    files = split_files(data_dir, "train")
    features = trees.feature_semantics(info)
    everything, labels = trees.read_columns(files, info, features, None)
    n = len(labels)
    assert n == info.split_rows["train"]
    sample, sampled_labels = trees.read_columns(files, info, features, None, limit=n // 4)
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
    again, _ = trees.read_columns(files, info, features, None, limit=n // 4)
    assert np.array_equal(again[name], sample[name])
