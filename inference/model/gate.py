"""Gated model swaps: a newer version serves only after it has predicted the golden set
(labelled raw rows, preprocessing/reference/golden.py) with no error and no NaN, and its metric there
is no worse than the serving version's by more than a tolerance.

The metric is RMSE (regression; worse = higher, the tolerance relative: 0.05 lets it be 5%
higher) or accuracy (classification; worse = lower, the tolerance absolute: 0.05 = five
points). The golden set is `--golden_set FILE` (raw tf.Examples in a TFRecord file, gzip or
not, or a CSV with a header, label included), else the one the serving version's export
carries (assets.extra/golden.tfrecord, written by training from preprocess's eval split),
else the candidate's. With none, a newer version cannot be checked: it serves, with a
warning saying so. A version whose schema needs a column the golden set lacks fails to
score it and is refused: give a `--golden_set` with that column.

With `--slice_by` and `--max_slice_regression`, a version that passes overall is refused
too when a slice of the golden set (preprocessing/reference/slices.py; at least
MIN_SLICE_ROWS rows) is worse than the serving version's there by more than that tolerance:
the overall metric can improve while one slice gets worse. The slices of a number are the
serving version's train quintiles.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Dict, Optional, Sequence

from preprocessing.contract.schema import Schema
from preprocessing.reference.golden import GoldenSetError
from preprocessing.reference.golden_score import (  # noqa: F401 (the rule's names, used from here too)
    CALL_ROWS,
    DEFAULT_MAX_METRIC_REGRESSION,
    GoldenSet,
    Score,
    decide,
    golden_slice_keys,
    is_worse,
    judge,
    own_golden_set,
    read_golden,
    score,
)
from preprocessing.reference.slices import SliceError
from preprocessing.reference.statistics import load_train_statistics


@dataclasses.dataclass(frozen=True)
class Verdict:
    accepted: bool
    record: dict                  # the version_accepted / version_refused record


class Gate:
    """What a prediction job checks a newer version with: `--golden_set` (or each candidate's
    own) and `--max_metric_regression`. Golden sets are read once per process."""

    def __init__(self, golden_set: Optional[str] = None,
                 max_metric_regression: float = DEFAULT_MAX_METRIC_REGRESSION,
                 slice_by: Sequence[str] = (), max_slice_regression: Optional[float] = None):
        self.golden_set = golden_set
        self.tolerance = max_metric_regression
        self.slice_by = tuple(slice_by) if max_slice_regression is not None else ()
        self.slice_tolerance = max_slice_regression
        self._sets: dict = {}

    def golden_for(self, candidate, current) -> Optional[str]:
        """--golden_set, else golden_score.own_golden_set."""
        return self.golden_set or own_golden_set(current.path, candidate.path)

    def _load(self, path: str, schema: Schema) -> GoldenSet:
        if path not in self._sets:
            self._sets[path] = read_golden(path, schema)
        return self._sets[path]

    def check(self, candidate, current) -> Verdict:
        """Candidate and current are loaded versions (model_handler._Version)."""
        base = {"candidate_version": candidate.version, "current_version": current.version,
                "max_metric_regression": self.tolerance}
        path = self.golden_for(candidate, current)
        if path is None:
            logging.warning("model version %s has no golden set and no --golden_set was given:"
                            " it serves unchecked", candidate.version)
            return Verdict(True, dict(base, event="version_accepted", reason="no_golden_set"))
        try:
            rows = self._load(path, candidate.schema)
        except GoldenSetError as e:
            return Verdict(False, dict(base, event="version_refused", reason="bad_golden_set",
                                       detail=str(e), golden_set=path))
        if not len(rows):
            return Verdict(False, dict(base, event="version_refused", reason="bad_golden_set",
                                       detail="no labelled rows", golden_set=path))
        try:
            keys = self._slice_keys(rows, current)
        except SliceError as e:
            return Verdict(False, dict(base, event="version_refused", reason="bad_slice_by",
                                       detail=str(e), golden_set=path))
        accepted, found = judge(candidate, current, rows, candidate.schema.task,
                                self.tolerance, keys, self.slice_tolerance)
        return Verdict(accepted, dict(base, event="version_accepted" if accepted
                                      else "version_refused", golden_set=path, **found))

    def _slice_keys(self, rows: GoldenSet, current) -> Optional[Dict[str, list]]:
        """Each golden row's slice per --slice_by column (the serving version's train
        quintiles bound a number's), or None without --max_slice_regression."""
        if not self.slice_by:
            return None
        return golden_slice_keys(self.slice_by, rows, current.schema,
                                 load_train_statistics(current.path))
