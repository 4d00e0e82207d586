"""The clock part of a column's statistics (ColumnStats): whether every present value is a
clock text (13:30, 2:31:38) or a duration (58:12 beside 1:02:03, 1:02.35), and the column
read as seconds (`clock_view`), for schema inference (infer._as_numbers)."""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from preprocessing.contract.values import DURATION
from preprocessing.parsing.columns import clock_readings, mask
from preprocessing.schema_inference.strays import STRAY_TEXT_SHARE, few, keep_first

# A clock column of at most this many distinct times is a few slots (a shift, the hours a
# shop updates its prices): categories, as text. Read as seconds, such a column did worse
# (stevedata turnips' 3 times: 0.950x / 0.873x / 0.914x of scikit-learn's RMSE as text,
# 0.987x / 0.965x / 0.975x as seconds).
CLOCK_SLOTS = 10


class ClockStats:
    """ColumnStats' methods over its clock fields (clocks_only, clock_colons,
    clock_fraction, clock_long, clock_ap, unclocked, unclocked_texts, clock_view)."""

    def _view_as_clock(self, s: pa.Array, na: pa.Array) -> None:
        """Feeds clock_view the stripped values `s` (before they are added here; `na`: those
        of NA_TOKENS) read as seconds, the few that are no clock text as empty, while they
        are few (STRAY_TEXT_SHARE); until the first present value the view would equal these
        statistics, so it is copied then. A two-part text is read as H:MM, or as M:SS.ff
        where it has a fraction: the view's figures decide the column's type and
        distinctness, which neither reading changes."""
        present = mask(pc.invert(pc.or_(pc.equal(s, ""), na)))
        n = int(present.sum())
        if n == 0:
            if self.clock_view is not None:
                self.clock_view.add(s)
            return
        limit = STRAY_TEXT_SHARE * (self.present + n)
        colons = pc.count_substring(s, ":").to_numpy(zero_copy_only=False)
        colon = colons > 0
        self.unclocked += int((present & ~colon).sum())  # numbers or words
        if self.unclocked <= limit:
            hours_first, ok, minutes_first, as_duration = clock_readings(s)
            self.unclocked += int((present & colon & ~ok & ~as_duration).sum())
        if self.unclocked > limit:
            self.clocks_only, self.clock_view = False, None
            return
        odd = present & ~(ok | as_duration)
        if odd.any():
            keep_first(self.unclocked_texts, s.filter(pa.array(odd)))
        clocks = present & (ok | as_duration)
        self.clock_colons.update(np.unique(colons[clocks]).tolist())
        self.clock_fraction |= bool((clocks & ~ok).any())
        self.clock_ap |= bool((clocks & ~as_duration).any())
        self.clock_long |= bool((ok & (colons == 1) & (hours_first >= 24 * 3600)).any())
        if self.clock_view is None:
            self.clock_view = dataclasses.replace(copy.deepcopy(self), reads_commas=False,
                                                  clocks_only=False)
        seconds = np.where(ok, hours_first, minutes_first)
        self.clock_view.add(pc.if_else(pa.array(clocks), pc.cast(pa.array(seconds), pa.string()),
                                       pc.if_else(pa.array(odd), "", s)))

    def clock_kind(self):
        """How the clock texts read: True (a time of day, or hours first), values.DURATION
        (elapsed times: M:SS under an hour beside H:MM:SS, as races' results are written, or
        M:SS.ff), or None: two-part texts of times of day beside three-part ones (13:30,
        1:02:03: no one reading tells minutes from hours there), or a fraction beside am/pm."""
        if not self.clock_ap and (self.clock_fraction or
                                  (self.clock_long and self.clock_colons == {1, 2})):
            return DURATION
        if self.clock_fraction or len(self.clock_colons) != 1:
            return None
        return True

    def clock_numbers(self) -> tuple:
        """(the statistics of the column read as seconds (ColumnSpec.clock), the texts read
        as missing there) where every present value is a clock text of one reading
        (clock_kind) but for a few texts (strays.few, in at most STRAY_TEXT_SHARE of the values),
        with more than CLOCK_SLOTS distinct times; else (None, ())."""
        view = self.clock_view
        if not self.clocks_only or view is None or self.clock_kind() is None \
                or view.rows != self.rows or not view.numeric or not few(self.unclocked_texts) \
                or (view.distinct_count is not None and view.distinct_count <= CLOCK_SLOTS):
            return None, ()
        return view, tuple(sorted(self.unclocked_texts))
