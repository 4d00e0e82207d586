"""The rows the boosted trees train on: read from the train split's TFRecords into memory,
bounded by what the machine holds (a seeded uniform sample past that, never the first rows)."""
from __future__ import annotations

import logging
from typing import Dict, NamedTuple, Optional, Tuple

import numpy as np

from training import data as data_lib
from training.data import FeatureInfo

log = logging.getLogger("training")

# At most `--trees_max_rows` train rows are held for the trees (row_limit). Past that, or past
# the rows the machine's memory holds, the trees read a uniform sample: the rows may
# use MEMORY_SHARE of the memory available when training starts, at BYTES_PER_VALUE a value:
# YDF's training took 19.8 bytes a value more than before it (2M rows x 15 values, our
# arrays included; 20.9 at 500k), and joining the read batches holds our arrays twice for
# a moment (8 bytes a value at most, each).
MEMORY_SHARE = 0.5
BYTES_PER_VALUE = 40
READ_BATCH = 8192


def available_memory() -> Optional[int]:
    """Bytes this process may still use: the kernel's MemAvailable, within a cgroup (v2)
    memory limit (a container's); None where neither can be read."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            found += [int(line.split()[1]) * 1024 for line in f
                      if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit.isdigit():
            found.append(max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def row_limit(values_per_row: int, available: Optional[int], cap: int) -> Tuple[int, str]:
    """(rows the trees may hold, why): `cap` (--trees_max_rows), or fewer where MEMORY_SHARE
    of the available memory holds fewer rows of `values_per_row` values."""
    if available is None:
        return cap, f"--trees_max_rows {cap:,} (the available memory is unknown)"
    by_memory = int(MEMORY_SHARE * available / (BYTES_PER_VALUE * max(values_per_row, 1)))
    if by_memory >= cap:
        return cap, f"--trees_max_rows {cap:,}"
    return max(by_memory, 1), (f"at most {by_memory:,} rows: {MEMORY_SHARE:.0%} of the "
                               f"{available / 2**30:.1f} GiB available at "
                               f"{BYTES_PER_VALUE} bytes a value")


class TreeRows(NamedTuple):
    columns: Dict[str, np.ndarray]  # feature columns
    labels: np.ndarray              # labels as stored
    # The bound was reached (a sample, or the first rows past a split's count): reading more
    # rows (the refit's whole split) would hold no more of them.
    capped: bool


def read_columns(files, info: FeatureInfo, features, holdout: Optional[data_lib.Holdout],
                 cap: int, seed: int = 0, copies: int = 1) -> TreeRows:
    """The train records `holdout` keeps; rows whose class was never seen in train (weight 0)
    are left out. More rows than row_limit's (`cap`, or fewer where this machine's memory
    holds fewer) are a uniform sample of about that many rows (seeded), never the first rows
    of the files (an input sorted by date would be its oldest rows). `copies`: the trees
    hold each row that many times (entity_twins.py), which the bound counts."""
    limit, why = row_limit((len(features) + 1) * copies, available_memory(),
                           max(cap // copies, 1))
    if copies > 1:
        why += f", each row held {copies} times (entity twins)"
    expected = int(info.split_rows.get("train") or 0)
    if holdout is not None:
        expected = int(expected * (1 / holdout.folds if holdout.only
                                   else 1 - 1 / holdout.folds)) + 1
    rate = min(1.0, limit / expected) if expected else 1.0
    if rate < 1.0:
        log.warning("boosted_trees: a uniform sample of about %s of %s train rows (%s)",
                    f"{limit:,}", f"{expected:,}", why)
    rng = np.random.default_rng(seed)
    ds = data_lib.make_dataset_fn(files, info, READ_BATCH, training=False, holdout=holdout,
                                  scale_label=False)()
    cols: Dict[str, list] = {name: [] for name in features}
    labels, rows = [], 0
    for batch, label, weight in ds:
        keep = weight.numpy() > 0
        if rate < 1.0:
            keep &= rng.random(len(keep)) < rate
        for name in features:
            cols[name].append(batch[name].numpy()[keep])
        y = label.numpy()
        labels.append((y[:, 0] if y.ndim == 2 else y)[keep])
        rows += int(keep.sum())
        if rows >= limit:
            if rate >= 1.0:  # more rows than the split said: the bound still holds
                log.warning("boosted_trees: stopped at %s train rows (%s)", f"{limit:,}", why)
            break
    if not rows:
        raise ValueError(f"no train rows reached the trees (from {len(files)} file(s))")
    out = {name: np.concatenate(v)[:limit] for name, v in cols.items()}
    return TreeRows(out, np.concatenate(labels)[:limit] if labels else np.zeros(0),
                    capped=rate < 1.0 or rows >= limit)
