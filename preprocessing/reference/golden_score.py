"""The gate's rule, shared by every step that lets a new version serve (the prediction jobs'
model swaps, inference/model/gate.py; the tuner's best trial, training/tune.py): a version scores
the golden set (labelled raw rows) with no error and no NaN, and its metric there is no worse
than the serving version's by more than a tolerance.

RMSE (regression; worse = higher, the tolerance relative: 0.05 lets it be 5% higher) or
accuracy (classification; worse = lower, the tolerance absolute: 0.05 = five points).
"""
from __future__ import annotations

import csv
import dataclasses
import io
import logging
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from preprocessing.accounting.rejects import Reject
from preprocessing.contract.schema import Schema, SchemaError
from preprocessing.parsing import csv_records, row_parser
from preprocessing.reference import golden
from preprocessing.reference.evaluation import EvalSums
from preprocessing.reference.golden import GoldenSetError
from preprocessing.reference.slices import Slicer, SliceSums, regressed

DEFAULT_MAX_METRIC_REGRESSION = 0.05
# Under this many golden rows the default tolerance lies within the gate's own noise: two
# standard errors of a paired accuracy difference, at 15% of rows predicted differently,
# exceed 0.05 below about 240 rows. There the rows are worth more to the model than to the
# gate: training learns them too (training/exporting/golden_rows.py) and its export says so
# (golden.EXPORT_GOLDEN_LEARNED), and a version's metric is not compared on rows it learned.
NOISY_ROWS = 240
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
    slices: Optional[dict] = None  # with slice keys: SliceSums.metrics over the set


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
    rows = csv.reader(io.StringIO(data.decode("utf-8", "replace")))
    header = next(rows, None)
    if not header:
        raise GoldenSetError(f"the golden set {path} is empty")
    try:
        names = csv_records.header_names(header, path)
        parser = row_parser.RowParser(schema, names)
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


def score(version, golden_set: GoldenSet, task: str,
          slice_keys: Optional[Dict[str, List[str]]] = None) -> Score:
    """The version's metric on the golden set, or why it could not give one; with
    `slice_keys` (column -> each golden row's slice), its metrics by slice too."""
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
    by_slice = None if not slice_keys else SliceSums().add_outputs(
        task, outputs, golden_set.labels, slice_keys).metrics(task)
    return Score(metric, float(sums.metrics(task)[metric]), slices=by_slice)


def own_golden_set(current_path: str, candidate_path: str) -> Optional[str]:
    """The golden set a swap is judged on when none is given: the serving version's own (the
    trusted one: a bad export brings a bad golden set with it), else the candidate's."""
    from apache_beam.io.filesystems import FileSystems
    for path in (current_path, candidate_path):
        own = FileSystems.join(path, golden.EXPORT_GOLDEN)
        if FileSystems.exists(own):
            return own
    return None


def learned(version_path: Optional[str], golden_path: str) -> bool:
    """Whether the version at `version_path` learned the golden set at `golden_path`: its
    export says it learned its own golden set, and that set holds the same bytes."""
    from apache_beam.io.filesystems import FileSystems
    if not version_path or not FileSystems.exists(
            FileSystems.join(version_path, golden.EXPORT_GOLDEN_LEARNED)):
        return False
    own = FileSystems.join(version_path, golden.EXPORT_GOLDEN)
    if own == golden_path:
        return True
    try:
        return golden.read_bounded(own) == golden.read_bounded(golden_path)
    except (GoldenSetError, OSError):
        return False


def decide(candidate: Score, current: Optional[Score], tolerance: float) -> tuple:
    """(accepted, reason) for a candidate scored against the serving version."""
    if candidate.error:
        return False, candidate.error
    if current is None or current.error:
        return True, "no_baseline"  # nothing to compare with: it scored the set cleanly
    if is_worse(candidate.metric, candidate.value, current.value, tolerance):
        return False, "metric_regression"
    return True, "within_tolerance"


def judge(candidate, current, rows: GoldenSet, task: str, tolerance: float,
          slice_keys: Optional[Dict[str, List[str]]] = None,
          slice_tolerance: Optional[float] = None) -> Tuple[bool, dict]:
    """The gate's whole rule, for every step that lets a version serve: (accepted, its
    record). Overall by `decide`; then, with `slice_keys` (column -> each golden row's
    slice), a version no worse overall is refused when a slice with enough golden rows is
    worse by more than `slice_tolerance` (the overall metric can improve while one slice
    gets worse). `candidate` / `current`: loaded versions (`.module`)."""
    cand = score(candidate, rows, task, slice_keys)
    cur = score(current, rows, task, slice_keys)
    accepted, reason = decide(cand, cur, tolerance)
    record = dict(reason=reason, metric=cand.metric, candidate_metric=cand.value,
                  current_metric=cur.value, golden_rows=len(rows))
    if cand.error:
        record["detail"] = cand.detail
    elif not cur.error and any(learned(getattr(v, "path", None), rows.source)
                               for v in (candidate, current)):
        # A version scored on rows it learned: its metric says nothing of new rows. Only a
        # failure to score the set (above) refuses.
        return True, dict(record, reason="golden_set_learned", detail=(
            f"a version learned these {len(rows)} golden rows (under {NOISY_ROWS}): the "
            f"metric is not compared"))
    if accepted and slice_keys and cand.slices and cur.slices and not cur.error:
        worse = regressed(cand.slices, cur.slices, cand.metric, slice_tolerance, is_worse)
        record.update(max_slice_regression=slice_tolerance,
                      slices_compared=sum(not m["small"] for c in cand.slices.values()
                                          for m in c.values()))
        if worse:
            accepted = False
            record.update(reason="slice_regression", slices_regressed=worse, detail=(
                f"{worse[0]['slice']}: {cand.metric} {worse[0]['candidate']:.4g} against "
                f"{worse[0]['current']:.4g} over {worse[0]['examples']} golden rows"))
    return accepted, record


def golden_slice_keys(columns: Sequence[str], rows: GoldenSet, schema: Schema,
                      train_stats: Optional[dict]) -> Dict[str, List[str]]:
    """Each golden row's slice per column (a number's by the serving version's train
    quintiles, `train_stats`). Raises SliceError for a column the rows cannot be sliced by."""
    slicer = Slicer.of(columns, schema, train_stats)
    return {c: slicer.keys(c, golden.example_values(list(rows.examples), schema, c))
            for c in slicer.columns}


def is_worse(metric: str, candidate: float, current: float, tolerance: float) -> bool:
    """The gate's rule: RMSE higher by more than `tolerance` relative, accuracy lower by
    more than `tolerance` absolute."""
    if metric == "rmse":
        return candidate > current * (1 + tolerance) + 1e-12
    return candidate < current - tolerance - 1e-12
