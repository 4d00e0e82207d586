"""The checks a Schema must pass (Schema.validate): every spec, inferred or written by hand,
is checked here before any data is read, each failure a SchemaError naming what to fix."""
from __future__ import annotations

from preprocessing.contract.kinds import (
    DATETIME_NUMBERS,
    DATETIME_PARTS,
    DERIVED_OPS,
    DTYPES,
    NUMERIC_TRANSFORMS,
    TASKS,
    TRANSFORMS,
    SchemaError,
)
from preprocessing.contract.units import UNITS, is_unit
from preprocessing.contract.values import (
    DATE_ORDER_FORMS,
    DATE_ORDERS,
    DECIMAL_MARKS,
    DURATION,
    GROUPING_MARKS,
    coerce_value,
    looks_like_datetime,
)


def validate(schema) -> None:
    """Raises SchemaError on the first thing wrong with `schema`: its columns (types,
    transforms and their settings, defaults), label, key, task, derived features and
    crosses, and that no two make one transformed feature."""
    seen = _columns(schema)
    if schema.label not in seen:
        raise SchemaError(f"label column '{schema.label}' is not among the columns {sorted(seen)}")
    if schema.key is not None and schema.key not in seen:
        raise SchemaError(f"key column '{schema.key}' is not among the columns {sorted(seen)}")
    if schema.key == schema.label:
        raise SchemaError("the key column cannot also be the label")
    if not schema.feature_columns():
        raise SchemaError(f"no feature columns: the table has only the label '{schema.label}'"
                          + (f" and the key '{schema.key}'" if schema.key else "")
                          + "; a model needs at least one input column")
    if schema.task not in TASKS:
        raise SchemaError(f"task '{schema.task}' is not one of {TASKS}")
    if schema.task == "regression" and schema.column(schema.label).type == "string":
        raise SchemaError(f"label '{schema.label}' is a string column: the task must be classification")
    _derived(schema, seen)
    _crosses(schema)
    _unique_outputs(schema)


def _columns(schema) -> set:
    """The column names, each column checked on its own."""
    if not schema.columns:
        raise SchemaError("spec has no columns")
    seen = set()
    for c in schema.columns:
        if c.name in seen:
            raise SchemaError(f"column '{c.name}' is declared twice")
        seen.add(c.name)
        if c.type not in DTYPES:
            raise SchemaError(f"column '{c.name}': type '{c.type}' is not one of {DTYPES}")
        if c.transform not in TRANSFORMS:
            raise SchemaError(
                f"column '{c.name}': transform '{c.transform}' is not one of {TRANSFORMS}")
        if c.type == "string" and c.transform in NUMERIC_TRANSFORMS:
            raise SchemaError(
                f"column '{c.name}': transform '{c.transform}' needs a numeric column")
        if c.type != "string" and c.transform in ("datetime", "image"):
            raise SchemaError(f"column '{c.name}': transform '{c.transform}' needs a string "
                              f"column")
        if c.transform == "datetime":
            bad = [p for p in c.parts if p not in DATETIME_PARTS and p not in DATETIME_NUMBERS]
            if bad or not c.parts:
                raise SchemaError(f"column '{c.name}': datetime parts {list(c.parts)} must be "
                                  f"a non-empty subset of "
                                  f"{list(DATETIME_PARTS) + list(DATETIME_NUMBERS)}")
        for attr in ("num_buckets", "hash_buckets"):
            if getattr(c, attr) < 1:
                raise SchemaError(f"column '{c.name}': {attr} must be >= 1")
        if c.num_oov_buckets < 0 or (c.top_k is not None and c.top_k < 1):
            raise SchemaError(f"column '{c.name}': top_k must be >= 1 and num_oov_buckets >= 0")
        if c.imputed and (c.type != "float" or c.transform not in NUMERIC_TRANSFORMS):
            raise SchemaError(f"column '{c.name}': default 'mean' needs a float column "
                              f"with a numeric transform")
        # An int column's mark is a comma where points group its thousands (1.315 in a ';'
        # file): its values hold no mark, and the grouping must not be the decimal's.
        if c.decimal not in DECIMAL_MARKS or (c.decimal != "." and c.type != "float" and not (
                c.type == "int" and c.grouping == ".")):
            raise SchemaError(f"column '{c.name}': decimal {c.decimal!r} must be '.', or ',' "
                              f"for a float column (or an int column grouped by '.')")
        if c.grouping not in GROUPING_MARKS or (c.grouping and (
                c.type not in ("float", "int") or c.grouping == c.decimal or c.clock)):
            raise SchemaError(f"column '{c.name}': grouping {c.grouping!r} must be '', or ',' "
                              f"(or '.' beside decimal ',') for a number column not written "
                              f"as a clock")
        if not is_unit(c.unit) or (c.unit and (c.type not in ("float", "int") or c.clock)):
            raise SchemaError(f"column '{c.name}': unit {c.unit!r} must be '', one of "
                              f"{list(UNITS[1:])} or a word (kg, km/h, °C) for a number column "
                              f"not written as a clock")
        if not (isinstance(c.clock, bool) or c.clock == DURATION) or \
                (c.clock and (c.type != "float" or c.decimal != ".")):
            raise SchemaError(f"column '{c.name}': clock {c.clock!r} must be false, or true "
                              f"(a time of day) or '{DURATION}' for a float column written "
                              f"with decimal points")
        if c.date_order not in DATE_ORDERS or (c.date_order != "ymd" and
                                               c.transform != "datetime"):
            raise SchemaError(f"column '{c.name}': date_order {c.date_order!r} must be 'ymd', "
                              f"or 'mdy' / 'dmy' / 'ym' for a datetime column")
        if c.transform == "datetime" and c.default is not None and \
                not looks_like_datetime(str(c.default), c.date_order):
            raise SchemaError(f"column '{c.name}': default {c.default!r} is not "
                              f"{DATE_ORDER_FORMS[c.date_order]}")
        if c.default is not None and not c.imputed:
            try:
                coerce_value(str(c.default), c.type, clock=c.clock)
            except ValueError as e:
                raise SchemaError(f"column '{c.name}': default {c.default!r}: {e}") from None
    return seen


def _derived(schema, seen: set) -> None:
    """Each derived feature: a known op on columns (`seen`; numeric ones but for `entity`,
    whose values are text anyway), a name of its own."""
    features = {c.name for c in schema.serving_columns()}
    for d in schema.derived:
        if d.op not in DERIVED_OPS:
            raise SchemaError(f"derived '{d.name}': op '{d.op}' is not one of {list(DERIVED_OPS)}")
        if len(d.inputs) != DERIVED_OPS[d.op]:
            raise SchemaError(f"derived '{d.name}': op '{d.op}' takes {DERIVED_OPS[d.op]} inputs")
        for i in d.inputs:
            if d.op == "entity" and i not in features:  # served, and not the label
                raise SchemaError(f"derived '{d.name}': input '{i}' must be a feature column "
                                  f"(not the label, the key or a column left out)")
            if i not in seen or (d.op != "entity" and schema.column(i).type == "string"):
                raise SchemaError(f"derived '{d.name}': input '{i}' must be a numeric column")
        if d.op == "entity":
            if d.transform not in ("vocabulary", "hash") or \
                    (d.transform == "hash" and d.hash_buckets < 1):
                raise SchemaError(f"derived '{d.name}': op 'entity' is a category: transform "
                                  f"vocabulary, or hash with hash_buckets >= 1")
        elif d.transform not in ("zscore", "scale_0_1", "passthrough"):
            raise SchemaError(f"derived '{d.name}': transform must be zscore, scale_0_1 or passthrough")
        if d.name in seen:
            raise SchemaError(f"derived '{d.name}' clashes with a column name")


def _crosses(schema) -> None:
    """Each cross: two or more categorical transformed features, at least one bucket; no
    entity's exact copy or its string source (the twin rows that teach an entity never
    seen blank the copy, not a cross: training/models/entity_twins.py)."""
    categorical = schema.categorical_outputs()
    entity = set(schema.entity_vocabularies()) | set(schema.entity_sources())
    for x in schema.crosses:
        if len(x.features) < 2:
            raise SchemaError(f"cross {list(x.features)}: needs at least two features")
        for f in x.features:
            if f in entity:
                raise SchemaError(f"cross {list(x.features)}: '{f}' names an entity, whose "
                                  f"never-seen id a cross would hide; cross other features")
            if f not in categorical or f.startswith("cross_"):
                raise SchemaError(
                    f"cross {list(x.features)}: '{f}' is not a categorical transformed feature "
                    f"(one of {sorted(k for k in categorical if not k.startswith('cross_'))})")
        if x.hash_buckets < 1:
            raise SchemaError(f"cross {list(x.features)}: hash_buckets must be >= 1")


def _unique_outputs(schema) -> None:
    """No two columns, derived features or crosses make one transformed feature."""
    made = {}
    for name, what in schema.transformed_origins():
        if name in made:
            raise SchemaError(f"{made[name]} and {what} both make the transformed feature "
                              f"'{name}': rename one of the columns")
        made[name] = what
