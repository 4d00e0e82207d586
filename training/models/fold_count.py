"""How many rounds of boosted trees `--model auto` keeps on a small table: chosen on the
curves of the cross-fitted folds (each fold's trees, grown without it, scored on it after
every round; training/models/trees.py TreesRun.fold_losses and fold_errors)."""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class FoldCount:
    """The count of rounds the folds chose, and what it came from."""
    by_loss: int                     # the lowest loss summed over the folds
    by_errors: Optional[int]         # the fewest errors (a classification), loss breaking ties
    reached: int                     # the rounds every fold's curve reaches

    @property
    def rounds(self) -> int:
        """The larger of the two: a classification's held-out accuracy often still rises
        for many rounds past its lowest log loss (modeldata's hpc_data: 85-99 rounds by
        log loss, 202-291 by errors, docs/performance.md), while its errors alone are as
        often lowest after a handful of rounds, by chance on a few rows."""
        return max(self.by_loss, self.by_errors or 0)

    def errors_unsettled(self, look_ahead: int, most: int) -> bool:
        """The fewest errors came within `look_ahead` rounds of the curves' end, and the
        folds stopped short of `most` (on their loss): more rounds may have fewer errors."""
        return self.by_errors is not None and self.reached < most and \
            self.by_errors > self.reached - look_ahead

    def why(self, folds: int) -> str:
        if self.by_errors is None:
            return f"the count with the lowest loss summed over the {folds} cross-fitted folds"
        return (f"the larger of the counts with the lowest log loss ({self.by_loss}) and the "
                f"fewest errors ({self.by_errors}) summed over the {folds} cross-fitted folds")


def fold_count(fold_losses: Sequence[np.ndarray],
               fold_errors: Optional[Sequence[np.ndarray]] = None) -> FoldCount:
    """The folds' count over the rounds every fold's curve reaches: `fold_losses` (and, for
    a classification, `fold_errors`), one curve a fold, summed. 300 trees at a shrinkage of
    0.05 overfit a small noisy table (docs/performance.md)."""
    reached = min(len(f) for f in fold_losses)
    loss = np.sum([f[:reached] for f in fold_losses], axis=0)
    by_errors = None
    if fold_errors is not None:
        reached = min(reached, min(len(e) for e in fold_errors))
        loss = loss[:reached]
        errors = np.sum([e[:reached] for e in fold_errors], axis=0)
        # YDF logs accuracy as a float32: errors within a thousandth of a row are a tie
        by_errors = int(np.lexsort((loss, np.round(errors, 3)))[0]) + 1
    return FoldCount(int(np.argmin(loss)) + 1, by_errors, reached)

