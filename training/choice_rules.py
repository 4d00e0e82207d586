"""The rules `--model auto` keeps a candidate by (training/selection.py scores them).

The candidates are the network, the boosted trees and their blend (training/models/blend.py),
each scored row by row (row_losses) on the same held-out train rows. "Clearly lower" below
means a mean loss lower by more than one standard error of the paired difference on those
rows.

- The blend is kept by default: the average of two different models is rarely worse than
  the better one and often better than both.
- If one family is clearly lower than the other, averaging in the worse one would cost:
  that family is kept, unless the blend is clearly lower than it.
- A blend kept weighs the two families half each, unless the blend at another weight of
  BLEND_WEIGHTS is clearly lower (choose_blend_weight); `--model blend` keeps half each.
- Under MIN_DECISION_ROWS rows nothing is decided (the blend is kept): a standard error
  from a few rows is itself noise (a 5-row slice of a 150-row table once chose the trees,
  whose error on the rows that followed was the largest of the three).
- The trees' shape is chosen first, on the same rows (choose_shape): oblique splits with
  many-valued categories' frequent values split by CART's search (training/models/trees.py
  AUTO_ENCODINGS; an entity's copy alone, its values: ENTITY_FIRST), unless the trees of
  another split axis, with every value seen twice, with those categories as their mean
  labels (training/models/category_means.py), split by YDF's RANDOM search or with leaves of
  20 rows are lower by AXIS_ERRORS (ENCODING_ERRORS for the encoding, search or leaf size
  alone) standard errors.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from training.models.blend import BLEND
from training.models.trees import TreesShape

TREES = "boosted_trees"
MIN_DECISION_ROWS = 30   # a smaller validation slice keeps the blend
# Axis-aligned trees replace the oblique ones (lower on all 11 of the benchmark's regression
# tables) only when lower by this many standard errors. Switched at 1.4 to 2.3, four tables
# scored no better or worse on test (titanic2, wage, the demo's taxi data, boot's aids
# 1.15x -> 1.26x); the four that gained were ahead by 4.1 to 8.2 (docs/performance.md).
AXIS_ERRORS = 3.0
# Trees with many-valued categories as their mean labels, split by RANDOM search, or with
# leaves of 20 rows replace the first shape when lower by this many standard errors (a shape
# of another split axis too: AXIS_ERRORS). Leaves of 20 rows, YDF alone (4 folds, 3 seeds of
# 23 small tables): kept at 2 on 11 table-seeds, 6 gaining on test, 2 the same, 3 losing
# (texmex's liver, a label at chance, on two) (docs/performance.md).
# causaldata's social_insure (village, address), seed 1: lower by 2.4, kept as categories,
# -0.092 accuracy against scikit-learn's (docs/performance.md).
ENCODING_ERRORS = 2.0
# The network's share in a blend kept. On txhousing's seed 0 the blend weighing it 0.25 was
# clearly lower on 5,675 held-out rows (mean loss 1,825 against half each's 1,979), and its
# test RMSE went 0.803x -> 0.703x scikit-learn's (docs/performance.md).
BLEND_WEIGHTS = (0.25, 0.5, 0.75)


def clearly_lower(loss: np.ndarray, than: np.ndarray, errors: float = 1.0
                  ) -> Tuple[bool, str]:
    """(whether `loss` has a mean lower than `than`'s by more than `errors` standard errors
    of their paired difference, the figures)."""
    diff = np.asarray(loss, np.float64) - np.asarray(than, np.float64)
    n = len(diff)
    se = float(diff.std(ddof=1) / np.sqrt(n)) if n > 1 else float("inf")
    mean = float(diff.mean()) if n else 0.0
    return mean < -errors * se, f"{mean:.4g} (standard error {se:.4g})"


def choose_family(losses: Dict[str, np.ndarray], network: str,
                  rows: str = "validation slice") -> Tuple[str, str]:
    """(candidate kept, why) from the per-row losses of `network`, TREES and BLEND on the
    same rows (`rows` says which), by the rule of the module's docstring."""
    n = len(losses[BLEND])
    head = f"{rows} of {n} rows"
    if n < MIN_DECISION_ROWS:
        return BLEND, (f"{head}, under {MIN_DECISION_ROWS}: too few to tell the candidates "
                       f"apart; the blend is kept")
    trees_lower, trees_vs_net = clearly_lower(losses[TREES], losses[network])
    net_lower, _ = clearly_lower(losses[network], losses[TREES])
    better = TREES if trees_lower else network if net_lower else None
    why = f"{head}: mean loss of the trees minus the network's {trees_vs_net}"
    if better is None:
        return BLEND, why + "; neither clearly lower: the blend is kept"
    blend_lower, blend_vs = clearly_lower(losses[BLEND], losses[better])
    why += f"; the blend minus {better} {blend_vs}"
    if blend_lower:
        return BLEND, why + f"; the blend is clearly lower than {better}: kept"
    return better, why + f"; {better} is clearly lower than the other family: kept"


def blend_name(network_weight: float) -> str:
    """The name a blend is scored under: BLEND at half each, else with its weight."""
    return BLEND if network_weight == 0.5 else f"{BLEND}@{network_weight}"


def choose_blend_weight(losses: Dict[float, np.ndarray]) -> Tuple[float, str]:
    """(the network's weight in a blend kept, why) from the per-row losses of the blend at
    each weight of BLEND_WEIGHTS on the same rows: half each, unless another weight's loss
    is clearly lower; then the lowest of those."""
    compared = {w: clearly_lower(v, losses[0.5]) for w, v in losses.items() if w != 0.5}
    lower = [w for w in compared if compared[w][0]]
    weight = min(lower, key=lambda w: float(np.mean(losses[w]))) if lower else 0.5
    return weight, (f"the network weighs {weight} in it (mean loss minus half each's: " +
                    ", ".join(f"{w} {compared[w][1]}" for w in sorted(compared)) + ")")


def choose_shape(losses: Dict[TreesShape, np.ndarray]) -> Tuple[TreesShape, str]:
    """(trees' shape, why) from the per-row losses of each shape's trees on the same
    held-out rows (the default shape first): the first, unless others are clearly lower,
    by AXIS_ERRORS standard errors for another split axis (a 1% difference on a few hundred
    rows is noise: ISLR's Hitters kept axis-aligned trees for one and lost 19% on test),
    ENCODING_ERRORS for another category encoding, search or leaf size alone; then the
    lowest of those."""
    first, *others = losses
    if not others:
        return first, ("the one grown (--split_axis and --category_encoding, or no rows "
                       "held out)")
    n = len(losses[first])
    if n < MIN_DECISION_ROWS:
        return first, f"{n} held-out rows, under {MIN_DECISION_ROWS}: {first} kept"
    def errors(shape):
        return ENCODING_ERRORS if shape.axis == first.axis else AXIS_ERRORS
    compared = {s: clearly_lower(losses[s], losses[first], errors(s)) for s in others}
    lower = [s for s in others if compared[s][0]]
    shown = min(lower or others, key=lambda s: float(np.mean(losses[s])))
    why = (f"mean loss on {n} held-out rows of {shown} minus {first}'s {compared[shown][1]}"
           + (f" (the lowest of {len(others)} others)" if len(others) > 1 else ""))
    if lower:
        return shown, why + f": lower by over {errors(shown):g} standard errors, {shown} kept"
    return first, why + f": not lower by {errors(shown):g} standard errors, {first} kept"
