"""The tabular model over transformed features: a small pure function of the feature metadata.

`tf_keras` (Keras 2), not Keras 3: only Keras 2 runs Model.fit under ParameterServerStrategy,
and it serves all four strategies with the same code. The model takes transformed features;
the export wraps it with the tf.transform layer so serving takes raw features.
"""
from __future__ import annotations

import tensorflow as tf
import tf_keras as keras

from preprocessing.features.image_transform import IMAGE_SIZE
from training.config import TrainConfig
from training.data import FeatureInfo
from training.guards import TrainingError


def build_model(info: FeatureInfo, cfg: TrainConfig) -> keras.Model:
    """Wide & deep (or plain DNN): embeddings for categorical ids, numeric as is.

    The wide part gives every category (crosses included) its own linear weight, which
    captures step effects such as a rush-hour surcharge directly; the deep part learns the
    smooth interactions.
    """
    if info.image:
        return build_cnn(info, cfg)
    inputs, deep, wide = {}, [], []
    for name in info.numeric:
        inputs[name] = keras.Input(shape=(), name=name, dtype=tf.float32)
    if info.numeric:
        deep.append(ColumnStack(name="numeric")([inputs[n] for n in info.numeric]))
    by_dim, read, entities = {}, {}, info.entities
    for name, card in info.categorical.items():
        inputs[name] = read[name] = keras.Input(shape=(), name=name, dtype=tf.int64)
        by_dim.setdefault(min(cfg.embedding_dim, card), []).append(name)
        if name in entities:
            read[name] = NeverSeen(entities[name].unknown, seed=cfg.seed,
                                   name=f"never_seen_{name}")(inputs[name])
    for dim, names in sorted(by_dim.items()):
        ids = [read[n] for n in names]
        cards = [info.categorical[n] for n in names]
        deep.append(StackedEmbedding(cards, dim, name=f"emb_{dim}")(ids))
    if info.categorical and cfg.model != "dnn":  # wide_deep, and the network `auto` trains
        names = list(info.categorical)
        wide.append(StackedEmbedding([info.categorical[n] for n in names], info.n_classes,
                                     total=True, name="wide")([read[n] for n in names]))
    if not deep:
        raise TrainingError("no model inputs: every transformed feature is the label, the key "
                            "or a passthrough string; preprocess a table with at least one "
                            "feature column (or give --model_module)")
    x = keras.layers.Concatenate(name="deep_in")(deep) if len(deep) > 1 else deep[0]
    for i, units in enumerate(cfg.hidden_units):
        x = keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(x)
        if cfg.dropout:
            x = keras.layers.Dropout(cfg.dropout, seed=cfg.seed)(x)
    out = keras.layers.Dense(info.n_classes, name="deep_out")(x)
    if wide:
        out = keras.layers.Add(name="wide_and_deep")([out] + wide)
    # Regression keeps [batch, 1]: Keras losses reduce over the last axis.
    model = keras.Model(inputs, out, name="dnn" if cfg.model == "dnn" else "wide_deep")
    return model


class ColumnStack(keras.layers.Layer):
    """k [batch] columns -> one [batch, k] tensor. One layer for all the numeric columns,
    not one per column: a table of 377 columns made a 1,900-layer model whose every fit
    spent ~40 s tracing it."""

    def call(self, columns):
        return tf.stack(columns, axis=1)


class NeverSeen(keras.layers.Layer):
    """In training, each id of an entity feature reads as `unknown` (the id of an entity
    never seen in train) with probability `rate`: what the trees' twin rows teach them
    (training/models/entity_twins.py), for a network that streams its rows. Its embedding
    rows for `unknown` then answer a new entity; at inference the ids pass unchanged."""

    def __init__(self, unknown: int, rate: float = 0.5, seed: int = 0, **kw):
        super().__init__(**kw)
        self.unknown, self.rate, self.seed = int(unknown), float(rate), int(seed)

    def call(self, ids, training=False):
        if not training:
            return ids
        drop = tf.random.uniform(tf.shape(ids), seed=self.seed) < self.rate
        return tf.where(drop, tf.constant(self.unknown, ids.dtype), ids)

    def get_config(self):
        return {**super().get_config(), "unknown": self.unknown, "rate": self.rate,
                "seed": self.seed}


class StackedEmbedding(keras.layers.Layer):
    """Embeddings of k categorical columns (cardinalities `cards`, ids in [0, card)) in one
    table, each column's rows at its own offset: [batch, k * dim], or with `total` the sum
    over the columns, [batch, dim] (the wide part: one linear weight per category). The
    same model as an Embedding layer per column, in one layer. An id outside its column's
    range is clipped to it (it never reads another column's rows)."""

    def __init__(self, cards, dim: int, total: bool = False, **kw):
        super().__init__(**kw)
        self.cards, self.dim, self.total = [int(c) for c in cards], int(dim), total

    def build(self, input_shape):
        self.table = self.add_weight(
            name="embeddings", shape=(sum(self.cards), self.dim),
            initializer=keras.initializers.RandomUniform(-0.05, 0.05))  # as Embedding's
        offsets = [0]
        for c in self.cards[:-1]:
            offsets.append(offsets[-1] + c)
        self.offsets = tf.constant(offsets, tf.int64)
        self.highest = tf.constant([c - 1 for c in self.cards], tf.int64)
        super().build(input_shape)

    def call(self, ids):
        ids = tf.clip_by_value(tf.stack([tf.cast(i, tf.int64) for i in ids], axis=1), 0,
                               self.highest)
        out = tf.cast(tf.gather(self.table, ids + self.offsets), self.compute_dtype)
        if self.total:
            return tf.reduce_sum(out, axis=1)
        return tf.reshape(out, [-1, len(self.cards) * self.dim])

    def get_config(self):
        return {**super().get_config(), "cards": self.cards, "dim": self.dim,
                "total": self.total}


def build_cnn(info: FeatureInfo, cfg: TrainConfig) -> keras.Model:
    """A small CNN over decoded [64, 64, 3] images; augmentation layers act in training only."""
    inp = keras.Input(shape=(IMAGE_SIZE, IMAGE_SIZE, 3), name=info.image)
    x = inp
    if cfg.augment:
        x = keras.layers.RandomFlip("horizontal_and_vertical", seed=cfg.seed)(x)
        x = keras.layers.RandomRotation(0.25, seed=cfg.seed)(x)
        x = keras.layers.RandomContrast(0.2, seed=cfg.seed)(x)
    if cfg.backbone != "small_cnn":
        x = _application(cfg.backbone, IMAGE_SIZE)(keras.layers.Rescaling(2.0, offset=-1.0)(x))
    else:
        for filters in (32, 64, 96):
            for _ in range(2):
                # Batch norm gets a small CNN off its initial plateau within a few epochs.
                x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
                x = keras.layers.BatchNormalization()(x)
                x = keras.layers.ReLU()(x)
            x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(cfg.hidden_units[0], activation="relu")(x)
    if cfg.dropout:
        x = keras.layers.Dropout(cfg.dropout, seed=cfg.seed)(x)
    out = keras.layers.Dense(info.n_classes, name="logits")(x)
    return keras.Model({info.image: inp}, out, name="cnn")


def _application(name: str, size: int) -> keras.Model:
    """A Keras application without its top, built with weights=None: nothing is downloaded
    (these machines may have no internet) and it trains from scratch on [-1, 1] inputs."""
    apps = keras.applications
    ctor = {"mobilenet_v2": apps.MobileNetV2, "resnet50": apps.ResNet50,
            "efficientnet_b0": apps.EfficientNetB0}[name]
    return ctor(include_top=False, weights=None, input_shape=(size, size, 3))


def compile_model(model: keras.Model, info: FeatureInfo, cfg: TrainConfig,
                  total_steps: int = 0, **kw) -> None:
    lr = cfg.learning_rate
    if cfg.lr_schedule == "cosine" and total_steps:
        # Decaying to zero settles the weights (and batch-norm statistics) at the end instead
        # of leaving the last epoch's accuracy to where a large step happened to land.
        lr = keras.optimizers.schedules.CosineDecay(lr, decay_steps=total_steps)
    opt = keras.optimizers.Adam(learning_rate=lr)
    if info.task == "regression":
        model.compile(optimizer=opt, loss="mse",
                      weighted_metrics=[keras.metrics.RootMeanSquaredError(name="rmse"),
                               keras.metrics.MeanAbsoluteError(name="mae")], **kw)
    else:
        model.compile(optimizer=opt,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
                      **kw)
