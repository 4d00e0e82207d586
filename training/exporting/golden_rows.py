"""The eval split less the golden set's rows: what `--refit_on_eval` adds to the model exported.

The golden set (preprocess's sample of the eval split's raw rows, copied into each export)
is what the model gate and the tuner judge a new version on against the serving one. A
model trained on those rows would be judged on rows it learned: a retrain on new data would
then look worse than the version serving and be refused. So they are left out: each golden
row goes through the transform the export serves with, and the eval records whose model
inputs equal one's are not added (floats within RTOL: the two transforms may differ in the
last bits). A golden row found nowhere in the eval split adds nothing at all. The eval split
is read and written a batch at a time: memory holds the golden set (at most golden.MAX_ROWS
rows), not the eval split.

A golden set under golden_score.NOISY_ROWS rows is too small for the gate's tolerance to
tell two versions apart, and such tables are the ones a tenth of their rows matters to. Its
rows are added too (once every one is found in the eval split), and the export says it
learned them (golden.EXPORT_GOLDEN_LEARNED): the gate then compares no metric on them.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import NamedTuple, Optional, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from preprocessing.reference import golden, golden_score
from training.data import FeatureInfo
from training.exporting.requests import predict_raw_parsing

BATCH = 1024
FILE = "eval-less-golden.tfrecord.gz"
# Floats match within this: the Beam and in-process transforms may differ in the last bits
# (the taxi's haversine distance: 0.5377065 vs 0.5377066), and rounding both to a number of
# digits still splits a pair that straddles a boundary.
RTOL, ATOL = 1e-4, 1e-6


def _rows(parsed: dict, names) -> Tuple[np.ndarray, np.ndarray]:
    """(each row's non-float inputs as one byte string, its float inputs [rows, n])."""
    exact, floats = [], []
    count = int(tf.shape(parsed[names[0]])[0])
    for name in names:
        v = tf.reshape(parsed[name], [count, -1])
        if v.dtype.is_floating:
            floats.append(tf.cast(v, tf.float64).numpy())
            continue
        if v.dtype != tf.string:
            v = tf.strings.as_string(v)
        exact.append(tf.strings.reduce_join(v, axis=1, separator=","))
    keys = tf.strings.join(exact, separator="|").numpy() if exact else \
        np.full(count, b"", dtype=object)
    return keys, np.concatenate(floats, axis=1) if floats else np.zeros((count, 0))


def golden_inputs(data_dir: str, info: FeatureInfo) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """The model inputs of the golden set's rows, transformed as served (_rows); None
    without a golden set."""
    path = os.path.join(data_dir, golden.GOLDEN_DIR, golden.GOLDEN_FILE)
    if not tf.io.gfile.exists(path):
        return None
    examples = golden.read_examples(path)
    spec, names = predict_raw_parsing(info.raw_schema)  # as serving_default parses them
    layer = tft.TFTransformOutput(data_dir).transform_features_layer()
    parts = []
    for i in range(0, len(examples), BATCH):
        parsed = tf.io.parse_example(tf.constant(examples[i:i + BATCH]), spec)
        transformed = layer({names[k]: v for k, v in parsed.items()})
        parts.append(_rows(transformed, info.input_names))
    if not parts:
        return np.zeros(0, dtype=object), np.zeros((0, 0))
    return np.concatenate([k for k, _ in parts]), np.concatenate([f for _, f in parts])


class GoldenIndex:
    """The golden rows (golden_inputs) by their exact part, and which of them have matched an
    eval row so far: the eval split is matched a batch at a time, never held whole."""

    def __init__(self, gold: Tuple[np.ndarray, np.ndarray]):
        self.by_key: dict = {}
        for i, k in enumerate(gold[0]):
            self.by_key.setdefault(k, []).append(i)
        self.floats = gold[1]
        self.found = np.zeros(len(gold[0]), dtype=bool)

    def match(self, keys: np.ndarray, floats: np.ndarray) -> np.ndarray:
        """A mask of the rows (`keys`, `floats`: _rows) equal to a golden row."""
        mask = np.zeros(len(keys), dtype=bool)
        for j, k in enumerate(keys):
            rows = self.by_key.get(k)
            if rows is None:
                continue
            close = np.all(np.isclose(floats[j], self.floats[rows], rtol=RTOL, atol=ATOL,
                                      equal_nan=True), axis=1)
            if close.any():
                mask[j] = True
                self.found[np.asarray(rows)[close]] = True
        return mask

    @property
    def missing(self) -> int:
        """How many golden rows matched no row yet."""
        return int((~self.found).sum())


class Added(NamedTuple):
    """What eval_less_golden gives the last refit."""
    files: Optional[list]  # the eval records to add, or None: none
    rows: int              # how many records they hold
    why: str
    learned_golden: bool = False  # the golden set's rows are among them (NOISY_ROWS)


def eval_less_golden(data_dir: str, info: FeatureInfo, eval_files) -> Added:
    """The eval records whose inputs are no golden row's: all of `eval_files` without a
    golden set, or with one under golden_score.NOISY_ROWS rows that the eval split holds
    whole (learned_golden), else one file in a temporary folder of its own (the caller
    removes it). None when the golden set cannot be read, or a golden row is not found
    among the eval records (nothing can then be added safely), or every eval record is one."""
    try:
        gold = golden_inputs(data_dir, info)
    except (golden.GoldenSetError, tf.errors.OpError) as e:  # nothing told apart: none added
        return Added(None, 0, f"{str(e).splitlines()[0][:300]}: no eval row is added")
    eval_rows = int(info.split_rows.get("eval") or 0)
    if gold is None:
        return Added(list(eval_files), eval_rows, "every eval row: no golden set")
    golden_rows = len(gold[0])
    learnable = golden_rows < golden_score.NOISY_ROWS  # every row, once each golden one is found
    folder = None if learnable else tempfile.mkdtemp(prefix="refit_on_eval_")
    try:
        seen, kept, index = _write_less_golden(
            gold, info, eval_files, folder and os.path.join(folder, FILE))
    except BaseException:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    why = None
    if not seen:
        why = "the eval split is empty"
    elif index.missing:
        why = (f"{index.missing} of the golden set's {golden_rows} rows were not found in "
               f"the eval split")
    elif learnable:
        return Added(list(eval_files), seen, (
            f"every eval row, the golden set's {golden_rows} too: under "
            f"{golden_score.NOISY_ROWS} rows the gate cannot tell versions apart by them, "
            f"and the export says it learned them"), learned_golden=True)
    elif not kept:
        why = "every eval row is in the golden set (preprocess --golden_rows)"
    if why:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
        return Added(None, 0, why)
    return Added([os.path.join(folder, FILE)], kept,
                 f"the eval rows less the {seen - kept} of the golden set")


def _write_less_golden(gold, info: FeatureInfo, eval_files, path: Optional[str]
                       ) -> Tuple[int, int, GoldenIndex]:
    """Matches the eval records to the golden rows a batch at a time, and writes to `path`
    (when given) those that match none; (how many records were read, how many match none,
    the index of golden rows found)."""
    spec = {k: info.feature_spec[k] for k in info.input_names}
    index, seen, kept = GoldenIndex(gold), 0, 0
    with contextlib.ExitStack() as stack:
        w = stack.enter_context(tf.io.TFRecordWriter(
            path, tf.io.TFRecordOptions(compression_type="GZIP"))) if path else None
        for batch in tf.data.TFRecordDataset(eval_files, compression_type="GZIP").batch(BATCH):
            mask = index.match(*_rows(tf.io.parse_example(batch, spec), info.input_names))
            seen += len(mask)
            kept += int((~mask).sum())
            if w is not None:
                for record, golden_row in zip(batch.numpy(), mask):
                    if not golden_row:
                        w.write(record)
    return seen, kept, index
