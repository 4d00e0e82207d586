"""tf.data input pipeline over the preprocess job's gzip TFRecord shards, and feature metadata.

Fast-input-pipeline practice: files are sharded across workers first (records only when there
are too few files), shuffled and read in parallel with `interleave`, shuffled per record,
batched *before* parsing so `parse_example` runs once per batch, mapped with AUTOTUNE
parallelism and prefetched. With `cache`, minibatches are parsed once and cached parsed.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from preprocessing.contract.schema import RAW_SCHEMA_FILE, Schema
from preprocessing.features.image_transform import decode_batch
from preprocessing.features.transform import LABEL_VOCAB
from training import guards
from training.target import LabelScaler, read_labels

AUTOTUNE = tf.data.AUTOTUNE
# With --cache, records are shuffled once, parsed (and cached) in minibatches; minibatches are
# then shuffled and rebatched to the global batch size each epoch.
MINIBATCH = 64


class Entity(NamedTuple):
    """An entity's category (a derived `entity` feature): the id of an entity never seen in
    train (its vocabulary's last id), and the number it was made of (a model input, or
    None: a string column is no model input beside its copy, Schema.entity_sources), which
    says nothing of an entity never seen either."""
    unknown: int
    number: Optional[str]


@dataclass
class FeatureInfo:
    """What the model needs to know about the transformed features."""
    label: str
    task: str
    numeric: List[str]
    categorical: Dict[str, int]          # name -> cardinality
    feature_spec: dict                   # transformed feature spec (parsing), incl. label
    n_classes: int = 1
    class_names: List[str] = field(default_factory=list)
    split_rows: Dict[str, int] = field(default_factory=dict)
    raw_schema: Optional[Schema] = None
    image: Optional[str] = None          # the encoded-image feature, for image data
    label_scaler: Optional[LabelScaler] = None  # regression: the target the network learns

    @property
    def entities(self) -> Dict[str, Entity]:
        """Derived `entity` features with exact vocabularies -> their Entity."""
        schema = self.raw_schema
        if not schema:
            return {}
        out, exact = {}, schema.entity_vocabularies()
        for d in schema.derived:
            if d.name in exact and d.name in self.categorical:
                number = schema.tf_name(d.inputs[0])
                out[d.name] = Entity(self.categorical[d.name] - 1,
                                     number if number in self.numeric else None)
        return out

    @property
    def input_names(self) -> List[str]:
        if self.image:
            return [self.image]
        return self.numeric + list(self.categorical)

    @property
    def fold_spec(self) -> dict:
        """What a train record's fold is hashed from: the table's key when it has one (it
        tells apart rows of equal values, as preprocess's split does), else the model's
        inputs and label. Hashing equal values without a key would put every "3rd class,
        male, age missing, died" passenger in one fold: held out together, only that
        group's survivors would be left to train on (Titanic's validation accuracy 0.62 for
        an eval accuracy of 0.83)."""
        key = self.raw_schema.key if self.raw_schema else None
        key = key and self.raw_schema.tf_name(key)
        if key and key in self.feature_spec:
            return {key: self.feature_spec[key]}
        return {k: self.feature_spec[k] for k in self.input_names + [self.label]}


def _max_int_label(data_dir: str, name: str, limit: int = 1_000_000) -> int:
    """The largest id of an int label over (up to `limit` records of) the train split;
    LabelKeyError for a negative one."""
    files = split_files(data_dir, "train")
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP").take(limit).batch(10_000)
    spec = {name: tf.io.FixedLenFeature([], tf.int64)}
    low, high = 0, 0
    for batch in ds:
        v = tf.io.parse_example(batch, spec)[name]
        low, high = min(low, int(tf.reduce_min(v))), max(high, int(tf.reduce_max(v)))
    if low < 0:
        raise LabelKeyError(f"--label_key {name} has negative ids ({low}): class ids must be "
                            "0, 1, ...")
    return high


class MissingDataError(FileNotFoundError):
    """--data_dir is not a preprocess output, or has no shards of a split it needs."""


class EmptySplitError(ValueError):
    """The preprocess output has no train or no eval rows: nothing to train on or measure."""


def read_summary(data_dir: str) -> dict:
    """preprocess's summary.json of `data_dir` ({} for data that has none)."""
    path = os.path.join(data_dir, "summary.json")
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def check_splits(data_dir: str, summary: Optional[dict] = None) -> None:
    """Fails with a clear message when preprocess's summary says the train split is empty,
    or when the train and eval shards are not the files it wrote (guards.check_shards). An
    empty eval split is the trainer's call (check_eval_split)."""
    summary = read_summary(data_dir) if summary is None else summary
    splits = summary.get("splits", {})
    if splits.get("train", 1) == 0:
        raise EmptySplitError(
            f"the train split of {data_dir} is empty (preprocess wrote {splits}): "
            f"preprocess more rows, or give --split a larger train fraction")
    guards.check_shards(data_dir, summary.get("files"), ("train", "eval"))


def check_eval_split(data_dir: str, split_rows: Dict[str, int], cross_fitted: bool) -> bool:
    """Whether the eval split is empty (a table of a few dozen rows: its hashed tenth can
    hold none). Then only `--model auto` can measure a model, on the cross-fitted folds of
    the train split (`cross_fitted`); any other run fails with a clear message."""
    if split_rows.get("eval", 1) != 0:
        return False
    if not cross_fitted:
        raise EmptySplitError(
            f"the eval split of {data_dir} is empty (preprocess wrote {split_rows}): "
            f"preprocess more rows, give --split a larger eval fraction, or train a table "
            f"with --model auto (it then reports figures from folds of the train split)")
    return True


class LabelKeyError(ValueError):
    """--label_key names no usable transformed feature."""


def load_feature_info(data_dir: str, label_key: Optional[str] = None) -> FeatureInfo:
    """Reads the preprocess output: raw schema, transform output and run summary.

    `label_key`: a transformed feature to train on instead of the schema's raw label (TFX's
    `<name>_xf` convention): float -> regression; int -> classification over the ids
    0..max (an int label with two values is binary)."""
    import tensorflow_transform as tft

    for needed in ("transform_fn", RAW_SCHEMA_FILE):
        if not tf.io.gfile.exists(os.path.join(data_dir, needed)):
            raise MissingDataError(f"{data_dir} is not a preprocess output (no {needed})")
    summary = read_summary(data_dir)
    check_splits(data_dir, summary)
    tft_out = tft.TFTransformOutput(data_dir)
    schema = Schema.load(os.path.join(data_dir, RAW_SCHEMA_FILE))
    spec = tft_out.transformed_feature_spec()
    known_cat = schema.categorical_outputs()
    domains = {f.name: f.int_domain for f in tft_out.transformed_metadata.schema.feature
               if f.HasField("int_domain")}
    label, task = schema.tf_name(schema.label), schema.task
    if label_key:
        if label_key not in spec:
            raise LabelKeyError(f"--label_key {label_key} is not a transformed feature "
                                f"(have: {sorted(spec)})")
        label = label_key
        if spec[label_key].dtype == tf.float32:
            task = "regression"
        elif spec[label_key].dtype == tf.int64:
            task = "classification"
        else:
            raise LabelKeyError(f"--label_key {label_key} is a string: map it to int ids in "
                                "the preprocessing_fn (tft.compute_and_apply_vocabulary)")
    numeric, categorical = [], {}
    not_inputs = {label, schema.tf_name(schema.label), schema.key and schema.tf_name(schema.key),
                  *schema.entity_sources()}
    for name, s in sorted(spec.items()):
        if name in not_inputs:
            continue
        if s.dtype == tf.string:
            continue  # passthrough strings are not model inputs
        if s.dtype == tf.float32:
            numeric.append(name)
        elif name in known_cat:
            card = known_cat[name]
            if card is None:  # a vocabulary: its size is known after analysis
                oov = 1 if name in schema.entity_vocabularies() else \
                    schema.column_of_output(name).num_oov_buckets
                card = tft_out.vocabulary_size_by_name(name) + oov
            categorical[name] = card
        elif name in domains:  # a module file's categorical output with a declared domain
            categorical[name] = int(domains[name].max) + 1
        else:
            numeric.append(name)  # an int without a domain: used as a number
    image = next((schema.tf_name(c.name) for c in schema.columns if c.transform == "image"),
                 None)
    if image:  # image data: the model reads the decoded image only
        numeric, categorical = [], {}
    n_classes, class_names, scaler = _label_info(data_dir, tft_out, task, label, label_key,
                                                 schema.label, domains)
    split_rows = summary.get("splits", {})
    return FeatureInfo(label=label, task=task, numeric=numeric,
                       categorical=categorical, feature_spec=spec, n_classes=n_classes,
                       class_names=class_names, split_rows=split_rows, raw_schema=schema,
                       image=image, label_scaler=scaler)


def _label_info(data_dir: str, tft_out, task: str, label: str, label_key: Optional[str],
                raw_label: str, domains: dict):
    """(classes, class names, regression target scaling) of the transformed training label
    `label` (--label_key's, or the schema's `raw_label`), refusing a label that cannot be
    learnt (training.guards)."""
    n_classes, class_names = 1, []
    if task == "regression":
        labels = read_labels(split_files(data_dir, "train"), label)
        guards.check_labels_finite(labels, label_key or raw_label)
        guards.check_label(task, n_classes, class_names,
                           float(np.std(labels)) if len(labels) > 1 else None)
        return n_classes, class_names, LabelScaler.fit(labels)
    if label_key:  # int class ids
        top = int(domains[label].max) if label in domains else _max_int_label(data_dir, label)
        n_classes = max(2, top + 1)
        class_names = [str(i) for i in range(n_classes)]
    else:
        class_names = [v.decode() if isinstance(v, bytes) else str(v)
                       for v in _label_vocabulary(tft_out)]
        n_classes = len(class_names)
    guards.check_label(task, n_classes, class_names, None)
    return n_classes, class_names, None


def _label_vocabulary(tft_out) -> list:
    """The label's classes (outputs of earlier versions named that vocabulary `label`)."""
    try:
        return tft_out.vocabulary_by_name(LABEL_VOCAB)
    except (ValueError, OSError, tf.errors.NotFoundError):
        return tft_out.vocabulary_by_name("label")


def split_files(data_dir: str, split: str, missing_ok: bool = False) -> List[str]:
    """The split's shards, in order (none: MissingDataError, or [] when `missing_ok`)."""
    files = sorted(tf.io.gfile.glob(os.path.join(data_dir, split, "*.tfrecord.gz")))
    if not files and not missing_ok:
        raise MissingDataError(f"no TFRecords for split '{split}' under {data_dir}")
    return files


HOLDOUT_BUCKETS = 10  # 1 in 10 train records (by a hash of its values) is the holdout


HOLDOUT_READ_BATCH = 1024  # records parsed together to find their fold


def row_contents(records, spec: dict):
    """Each serialized tf.Example's values of `spec`, features in name order, as one
    string: what a record's fold is hashed from (FeatureInfo.fold_spec). Not its bytes: the
    encoder writes the features of a tf.Example in an order that differs between runs (a
    protobuf map), so the same CSV preprocessed twice would put other rows in each fold.
    Floats by their bits."""
    parsed = tf.io.parse_example(records, spec)
    parts = []
    for name in sorted(parsed):
        v = parsed[name]
        v = tf.reshape(v, [tf.shape(v)[0], -1])
        if v.dtype.is_floating:
            v = tf.bitcast(tf.cast(v, tf.float32), tf.int32)
        if v.dtype != tf.string:
            v = tf.strings.as_string(v)
        parts.append(tf.strings.reduce_join(v, axis=1, separator=","))
    return tf.strings.join(parts, separator="|")


@dataclass(frozen=True)
class Holdout:
    """Fold `fold` of `folds` of the train split, by a hash of each record's values: `only`
    its records, or (only=False) every record but them. The default fold is the validation
    slice, 1 record in HOLDOUT_BUCKETS."""
    only: bool
    fold: int = 0
    folds: int = HOLDOUT_BUCKETS

    def __post_init__(self):
        if not 0 <= self.fold < self.folds:
            raise ValueError(f"fold {self.fold} of {self.folds}")

    def other(self) -> "Holdout":
        """The rest of the train split: the records this one leaves out."""
        return Holdout(not self.only, self.fold, self.folds)


def choice_fold(fold: int, choice_folds: int) -> Holdout:
    """The records of validation fold `fold` when the model choice is cross-fitted over
    `choice_folds` folds of the train split (each record in one); 1: the validation slice
    alone (1 in HOLDOUT_BUCKETS records)."""
    return Holdout(True) if choice_folds == 1 else Holdout(True, fold, choice_folds)


def _held_out(records: tf.data.Dataset, holdout: Holdout, spec: dict) -> tf.data.Dataset:
    """The serialized records `holdout` keeps (its fold only, or all but it)."""
    return records.batch(HOLDOUT_READ_BATCH).map(
        lambda batch: tf.boolean_mask(batch, tf.equal(
            tf.strings.to_hash_bucket_fast(row_contents(batch, spec), holdout.folds)
            == holdout.fold, holdout.only)),
        num_parallel_calls=AUTOTUNE, deterministic=True).unbatch()


def make_dataset_fn(files: List[str], info: FeatureInfo, global_batch_size: int,
                    training: bool, shuffle_buffer: int = 50_000, cache: bool = False,
                    seed: int = 42, repeat: Optional[bool] = None,
                    holdout: Optional[Holdout] = None, scale_label: bool = True):
    """Returns dataset_fn(input_context=None) -> dataset of (features, label, weight);
    regression labels as info.label_scaler maps them. `holdout`: the records of a hashed
    fold of the train split only, or all but them (early stopping's and the model choice's
    validation data, never the eval split); None: all. `scale_label=False`: labels as
    stored."""
    repeat = training if repeat is None else repeat
    scaler = info.label_scaler if scale_label else None
    spec = {k: info.feature_spec[k] for k in info.input_names + [info.label]}
    classification = info.task == "classification"

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        label = parsed.pop(info.label)
        if info.image:  # decoded here, in parallel tf.data map calls
            parsed[info.image] = decode_batch(parsed[info.image])
        if classification:
            # -1 marks an eval class never seen in train: keep the row, give it no weight.
            weight = tf.cast(label >= 0, tf.float32)
            label = tf.maximum(label, 0)
        else:
            weight = tf.ones_like(label, dtype=tf.float32)
            if scaler is not None:
                label = scaler.forward(label)
            label = tf.expand_dims(label, -1)  # [batch, 1], like the model's output
        return parsed, label, weight

    def dataset_fn(input_context: Optional[tf.distribute.InputContext] = None):
        batch_size = global_batch_size
        pipelines, pipeline_id = 1, 0
        if input_context is not None:
            batch_size = input_context.get_per_replica_batch_size(global_batch_size)
            pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
        ds = tf.data.Dataset.from_tensor_slices(files)
        shard_records = pipelines > 1 and len(files) < pipelines
        if pipelines > 1 and not shard_records:
            ds = ds.shard(pipelines, pipeline_id)  # each worker reads its own files
        if training:
            ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        ds = ds.interleave(
            lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP", buffer_size=1 << 20),
            cycle_length=max(1, min(len(files), 8)), num_parallel_calls=AUTOTUNE,
            deterministic=not training)
        if shard_records:
            ds = ds.shard(pipelines, pipeline_id)
        if holdout is not None:
            ds = _held_out(ds, holdout, info.fold_spec)
        if training and cache:
            # Parse minibatches once, cache them parsed, then shuffle minibatches and
            # rebatch: after the first epoch no per-record work is left at all (on a few
            # cores the input pipeline shares the CPU with the training step).
            # Records are shuffled once before they are grouped: minibatches are random mixes
            # even when the files are sorted (by class, say). This costs the first epoch only.
            ds = ds.shuffle(shuffle_buffer, seed=seed)
            ds = ds.batch(MINIBATCH)
            ds = ds.map(parse, num_parallel_calls=AUTOTUNE, deterministic=False)
            ds = ds.cache()
            ds = ds.shuffle(max(2, shuffle_buffer // MINIBATCH), seed=seed,
                            reshuffle_each_iteration=True)
            if repeat:
                ds = ds.repeat()
            ds = ds.rebatch(batch_size, drop_remainder=True)
            return ds.prefetch(AUTOTUNE)
        if cache:
            ds = ds.cache()
        if training:
            ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        if repeat:
            ds = ds.repeat()
        ds = ds.batch(batch_size, drop_remainder=training)
        ds = ds.map(parse, num_parallel_calls=AUTOTUNE, deterministic=not training)
        return ds.prefetch(AUTOTUNE)

    return dataset_fn


def steps_for(rows: int, batch_size: int) -> int:
    return max(1, math.ceil(rows / batch_size))
