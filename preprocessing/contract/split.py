"""Deterministic train/eval/test split by hashing the key (or the whole record).

A stable hash (not Python's salted `hash`) makes the split identical on every run, on every
runner and with any number of workers: the same key always lands in the same split.
"""
from __future__ import annotations

import hashlib
from typing import Sequence, Tuple

import numpy as np

SPLITS = ("train", "eval", "test")


def parse_fractions(text: str) -> Tuple[float, float, float]:
    """'0.8,0.1,0.1' -> (0.8, 0.1, 0.1); two values mean no test split."""
    try:
        parts = [float(p) for p in str(text).split(",")]
    except ValueError:
        raise ValueError(f"--split must be comma-separated numbers, got {text!r}") from None
    if len(parts) == 2:
        parts.append(0.0)
    if len(parts) != 3 or any(p < 0 for p in parts) or abs(sum(parts) - 1.0) > 1e-6 or parts[0] <= 0:
        raise ValueError(f"--split needs 2 or 3 non-negative fractions summing to 1 with a "
                         f"non-empty train split, got {text!r}")
    return tuple(parts)


def boundaries(fractions: Sequence[float]) -> Tuple[int, ...]:
    """Cumulative thresholds on a 64-bit hash space."""
    total, out = 0.0, []
    for f in fractions[:-1]:
        total += f
        out.append(int(total * 2 ** 64))
    return tuple(out)


def _digest(key) -> bytes:
    """The 8-byte BLAKE2b of a key (a string; a number key is hashed as its str())."""
    text = key if isinstance(key, str) else str(key)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()


def split_index(key, bounds: Sequence[int]) -> int:
    """The split of one key."""
    h = int.from_bytes(_digest(key), "big")
    for i, b in enumerate(bounds):
        if h < b:
            return i
    return len(bounds)


def split_indices(keys: Sequence, bounds: Sequence[int]) -> np.ndarray:
    """split_index of each key, as an int8 array (the same hash; the comparisons in numpy)."""
    hashes = np.frombuffer(b"".join([_digest(k) for k in keys]), dtype=">u8")
    # A bound of 2**64 (a split ending at fraction 1.0) is above every hash: it moves none.
    reachable = np.array([b for b in bounds if b < 2 ** 64], dtype=np.uint64)
    return np.searchsorted(reachable, hashes, side="right").astype(np.int8)
