"""Stray texts in a numeric column: a few values that are no number (a price's "unknown",
a capture time's `9.12`), read as missing while they are few, short and rare."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

# A numeric column's text values are counted exactly while they are at most this share of
# its present values (a price with a stray "unknown"); past it the column is text and its
# count stops (matching every value of a text column would cost the profile its speed).
STRAY_TEXT_SHARE = 0.01
STRAY_TEXT_VALUES = 10       # distinct texts a numeric feature may read as missing
STRAY_TEXT_CHARS = 40        # and their longest: a longer text is data, not a missing mark


def keep_first(texts: dict, odd: pa.Array) -> None:
    """Adds the distinct values of `odd` to `texts` (an ordered set) while it holds at most
    STRAY_TEXT_VALUES: one more than that says there are too many to read as missing."""
    if len(texts) <= STRAY_TEXT_VALUES:
        texts.update(dict.fromkeys(pc.unique(odd).slice(0, STRAY_TEXT_VALUES + 1).to_pylist()))


def few(texts) -> bool:
    """Few and short enough to be missing marks (STRAY_TEXT_VALUES, STRAY_TEXT_CHARS)."""
    return len(texts) <= STRAY_TEXT_VALUES and all(len(t) <= STRAY_TEXT_CHARS for t in texts)
