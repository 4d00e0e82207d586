"""Gated model swaps: a newer version serves only after it has predicted the golden set
(labelled raw rows, preprocessing/golden.py) with no error and no NaN, and its metric there
is no worse than the serving version's by more than a tolerance.

The metric is RMSE (regression; worse = higher, the tolerance relative: 0.05 lets it be 5%
higher) or accuracy (classification; worse = lower, the tolerance absolute: 0.05 = five
points). The golden set is `--golden_set FILE` (raw tf.Examples in a TFRecord file, gzip or
not, or a CSV with a header, label included), else the one the serving version's export
carries (assets.extra/golden.tfrecord, written by training from preprocess's eval split),
else the candidate's. With none, a newer version cannot be checked: it serves, with a
warning saying so. A version whose schema needs a column the golden set lacks fails to
score it and is refused: give a `--golden_set` with that column.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import logging
from typing import Optional

import numpy as np
from apache_beam.io.filesystems import FileSystems

from preprocessing import golden
from preprocessing.evaluation import EvalSums
from preprocessing.golden import GoldenSetError
from preprocessing.schema import Schema

DEFAULT_MAX_METRIC_REGRESSION = 0.05
CALL_ROWS = 1024  # rows per model call while scoring a golden set


@dataclasses.dataclass(frozen=True)
class GoldenSet:
    source: str
    examples: tuple      # serialized raw tf.Examples with a label
    labels: tuple        # float (regression) or str (classification), aligned

    def __len__(self):
        return len(self.examples)


@dataclasses.dataclass(frozen=True)
class Score:
    metric: str                   # "rmse" or "accuracy"
    value: Optional[float] = None
    error: Optional[str] = None   # why the version could not score the set: a reason code
    detail: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Verdict:
    accepted: bool
    record: dict                  # the version_accepted / version_refused record


def read_golden(path: str, schema: Schema) -> GoldenSet:
    """The labelled rows of `path` (at most golden.MAX_ROWS; rows without a label skipped)."""
    data = golden.read_bounded(path)
    if path.lower().endswith(".csv"):
        examples = _csv_examples(data, schema, path)
    else:
        examples = golden.tfrecord_examples(data, path)
    if len(examples) > golden.MAX_ROWS:
        raise GoldenSetError(f"the golden set {path} has more than {golden.MAX_ROWS:,} rows")
    labels = golden.example_labels(examples, schema, CALL_ROWS)
    keep = [i for i, v in enumerate(labels) if v is not None]
    return GoldenSet(path, tuple(examples[i] for i in keep), tuple(labels[i] for i in keep))


def _csv_examples(data: bytes, schema: Schema, path: str) -> list:
    from preprocessing import parsing
    from preprocessing.rejects import Reject
    from preprocessing.schema import SchemaError
    rows = csv.reader(io.StringIO(data.decode("utf-8", "replace")))
    header = next(rows, None)
    if not header:
        raise GoldenSetError(f"the golden set {path} is empty")
    try:
        names = parsing.header_names(header, path)
        parser = parsing.RowParser(schema, names)
    except (SchemaError, ValueError) as e:
        raise GoldenSetError(f"the golden set {path}: {e}") from None
    lacking = [c.name for c in schema.serving_columns() if c.name not in names
               and c.default is None] + ([] if schema.label in names else [schema.label])
    if lacking:
        raise GoldenSetError(f"the golden set {path} lacks the model's column(s) "
                             f"{', '.join(lacking)} (its header: {', '.join(names)[:300]})")
    out, bad, first = [], 0, None
    for fields in rows:
        try:
            out.append(golden.example_bytes(schema, parser.parse(fields)))
        except Reject as e:
            bad += 1
            first = first or f"{e.reason}: {e.detail}"
    if bad and not out:
        raise GoldenSetError(f"the golden set {path}: none of its {bad} rows parse "
                             f"(the first: {str(first)[:200]})")
    if bad:
        logging.warning("golden set %s: %d rows that do not parse are left out", path, bad)
    return out


def score(version, golden_set: GoldenSet, task: str) -> Score:
    """The version's metric on the golden set, or why it could not give one."""
    metric = "rmse" if task == "regression" else "accuracy"
    fn = version.module.signatures.get("serving_default")
    if fn is None:
        return Score(metric, error="model_error",
                     detail="the export has no serving_default signature")
    try:
        outputs = golden.serve_examples(fn, golden_set.examples, CALL_ROWS)
    except Exception as e:
        return Score(metric, error="model_error", detail=(
            str(e).strip().splitlines() or [type(e).__name__])[0][:200])
    for name, v in outputs.items():
        if v.dtype.kind == "f" and not np.isfinite(v).all():
            bad = int((~np.isfinite(v.reshape(len(v), -1))).any(axis=1).sum())
            return Score(metric, error="non_finite_prediction",
                         detail=f"{name} is NaN or infinite on {bad} of {len(v)} golden rows")
    sums = EvalSums().add_outputs(task, outputs, golden_set.labels)  # the trainer's formulas
    return Score(metric, float(sums.metrics(task)[metric]))


def decide(candidate: Score, current: Optional[Score], tolerance: float) -> tuple:
    """(accepted, reason) for a candidate scored against the serving version."""
    if candidate.error:
        return False, candidate.error
    if current is None or current.error:
        return True, "no_baseline"  # nothing to compare with: it scored the set cleanly
    if candidate.metric == "rmse":
        worse = candidate.value > current.value * (1 + tolerance) + 1e-12
    else:
        worse = candidate.value < current.value - tolerance - 1e-12
    return (False, "metric_regression") if worse else (True, "within_tolerance")


class Gate:
    """What a prediction job checks a newer version with: `--golden_set` (or each candidate's
    own) and `--max_metric_regression`. Golden sets are read once per process."""

    def __init__(self, golden_set: Optional[str] = None,
                 max_metric_regression: float = DEFAULT_MAX_METRIC_REGRESSION):
        self.golden_set = golden_set
        self.tolerance = max_metric_regression
        self._sets: dict = {}

    def golden_for(self, candidate, current) -> Optional[str]:
        """--golden_set, else the serving version's own (the trusted one: a bad export
        brings a bad golden set with it), else the candidate's."""
        if self.golden_set:
            return self.golden_set
        for version in (current, candidate):
            own = FileSystems.join(version.path, golden.EXPORT_GOLDEN)
            if FileSystems.exists(own):
                return own
        return None

    def _load(self, path: str, schema: Schema) -> GoldenSet:
        if path not in self._sets:
            self._sets[path] = read_golden(path, schema)
        return self._sets[path]

    def check(self, candidate, current) -> Verdict:
        """Candidate and current are loaded versions (model_handler._Version)."""
        base = {"candidate_version": candidate.version, "current_version": current.version,
                "max_metric_regression": self.tolerance}
        path = self.golden_for(candidate, current)
        if path is None:
            logging.warning("model version %s has no golden set and no --golden_set was given:"
                            " it serves unchecked", candidate.version)
            return Verdict(True, dict(base, event="version_accepted", reason="no_golden_set"))
        try:
            rows = self._load(path, candidate.schema)
        except GoldenSetError as e:
            return Verdict(False, dict(base, event="version_refused", reason="bad_golden_set",
                                       detail=str(e), golden_set=path))
        if not len(rows):
            return Verdict(False, dict(base, event="version_refused", reason="bad_golden_set",
                                       detail="no labelled rows", golden_set=path))
        task = candidate.schema.task
        cand, cur = score(candidate, rows, task), score(current, rows, task)
        accepted, reason = decide(cand, cur, self.tolerance)
        record = dict(base, event="version_accepted" if accepted else "version_refused",
                      reason=reason, metric=cand.metric, candidate_metric=cand.value,
                      current_metric=cur.value, golden_set=path, golden_rows=len(rows))
        if cand.error:
            record["detail"] = cand.detail
        return Verdict(accepted, record)
