"""Per-row losses, the one measure that compares the families' held-out rows
(training/selection.py) and the rise in loss that permutation importance reports
(training/reporting/importance.py)."""
from __future__ import annotations

from typing import Optional

import numpy as np


def row_losses(out: np.ndarray, y: np.ndarray, weight: Optional[np.ndarray] = None):
    """Per-row losses: regression (`weight` None) the squared error of the predictions
    `out`; classification the Brier score of the probabilities from `out` (logits or
    log-probabilities) for the rows of weight > 0. A 0/1 loss on a slice of a few hundred
    rows rarely tells two classifiers apart; probabilities do, and bounded, so one row
    cannot decide."""
    if weight is None:
        return (np.asarray(out, np.float64) - y) ** 2
    logits = np.asarray(out, np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    seen = weight > 0
    onehot = np.eye(logits.shape[-1])[np.where(seen, y, 0).astype(int)]
    return ((probs - onehot) ** 2).sum(-1)[seen]
