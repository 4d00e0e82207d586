"""Each train row twice for the trees where a feature names an entity (a household over its
purchases, a patient over visits): once as read, once with the entity "never seen".

A derived `entity` feature with an exact vocabulary (preprocessing/features/transform.py)
gives each entity seen in train its own id and every other entity one more id. Trees that
split on the entity's id read its rows' labels, which lifts accuracy on the entities they
trained on, and send an entity they never saw down arbitrary branches: a copy of the id
lost 0.12-0.30 accuracy on test households never trained on (docs/performance.md). Given
each row a second time with the entity's id set to the "never seen" one, the same forest
learns the known entities from the first copies and a new entity from the second, which
the other features alone must answer. The twins are made after the rows are read, so a
row and its twin fall in the same held-out fold, and after the cross-fitted category means
(category_means.py) are taken, so no row's label reaches its own mean through its twin.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from training.data import Entity

COPIES = 2  # a row and its twin: the trees hold twice the rows read


def copies(entities: Dict[str, Entity]) -> int:
    """How many times the trees hold each row read (tree_rows.read_columns bounds that)."""
    return COPIES if entities else 1


def twin(columns: Dict[str, np.ndarray], labels: np.ndarray, entities: Dict[str, Entity],
         means=()) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
    """(columns, labels) with every row followed, after all of them, by its twin: each
    feature of `entities` set to its never-seen id, or where it reaches the trees as mean
    labels (`means`, CategoryMeans), to the means of that id; and the number it was made of
    missing (NaN) wherever the entity is never seen, as TreesModel serves it (blank).
    Unchanged when no feature of `entities` is among the columns."""
    encoded = {m.feature: m for m in means}
    present = {n: e for n, e in entities.items() if n in columns or n in encoded}
    if not present:
        return columns, labels
    rows = len(labels)
    out = {name: np.concatenate([values, values]) for name, values in columns.items()}
    for name, entity in present.items():
        unknown = np.full(rows, entity.unknown, np.int64)
        if name in encoded:
            m = encoded[name]
            values = m.values(unknown)
            for j, column in enumerate(m.names):
                out[column][rows:] = values[:, j]
            # (the ids are gone: a row read with an entity past the vocabulary's kept
            # values keeps its number here)
            never = np.arange(2 * rows) >= rows
        else:
            out[name][rows:] = unknown.astype(columns[name].dtype)
            never = out[name] == entity.unknown
        if entity.number in out:
            out[entity.number] = np.where(never, np.nan, out[entity.number]).astype(
                out[entity.number].dtype)
    return out, np.concatenate([labels, labels])
