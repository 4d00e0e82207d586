"""The words a schema is written in (types, transforms, datetime parts, derived ops, tasks)
and its error: shared by the Schema (schema.py) and its checks (checks.py)."""
from __future__ import annotations

from preprocessing.contract.values import DTYPE_TABLE

DTYPES = tuple(DTYPE_TABLE)
TRANSFORMS = ("numeric", "zscore", "scale_0_1", "vocabulary", "bucketize", "hash", "datetime",
              "passthrough", "identity", "image", "none")
NUMERIC_TRANSFORMS = ("numeric", "zscore", "scale_0_1", "bucketize", "passthrough")
# `default: mean` (float columns): a missing value is read as NaN and the transform graph
# replaces it with the train split's mean, adding a `<name>_missing` 0/1 feature.
MEAN_DEFAULT = "mean"
# Datetime part -> number of values (the categorical cardinality the model sees).
DATETIME_PARTS = {"hour": 24, "weekday": 7, "month": 12, "day": 31, "minute": 60}
# Parts that are numbers, not categories: `days` since 1970-01-01 (a trend over time), and
# `time_of_day` in minutes since midnight (an hour's minutes in order: 9:55 beside 10:00).
DATETIME_NUMBERS = ("days", "time_of_day")
DERIVED_OPS = {"haversine_km": 4, "entity": 1}
# `entity`: a number that names an entity (a household, a patient) hashed as a category too
# (schema inference adds it for a repeated column named like a key).
TASKS = ("regression", "classification")
# Most classes a classification label may have (Vertex AI's tabular bound too): past it a
# label is rarely classes (a number with text in it, a name), and the trees grow a tree per
# class per round. Schema inference refuses such a label at launch; a spec may still declare
# one (`--model auto` then trains no trees past training.defaults.AUTO_TREE_MAX_ROW_CLASSES).
MAX_LABEL_CLASSES = 500


class SchemaError(ValueError):
    """A spec that cannot be used; the message says which field and why."""
