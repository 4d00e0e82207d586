"""`training.task --slice_by COL`: the exported model's metrics by slice on the golden set
(preprocess's uniform sample of the eval split's raw rows, copied beside the export), sliced
and scored as the prediction jobs' gate does (preprocessing/reference/slices.py,
golden_score.score): a number by the train split's quintiles, a string by its values.

The eval split's TFRecords hold transformed features only, so the raw values a user slices
by are read from the golden set, which is at most golden.MAX_ROWS rows."""
from __future__ import annotations

import os
import types
from typing import Optional, Sequence

from preprocessing.files import saved_models
from preprocessing.reference.golden import EXPORT_GOLDEN, GOLDEN_DIR, GOLDEN_FILE, example_values
from preprocessing.reference.golden_score import read_golden, score
from preprocessing.reference.slices import Slicer
from preprocessing.reference.statistics import STATISTICS_FILE, read_statistics


def check_slice_by(columns: Sequence[str], schema, data_dir: str) -> Optional[Slicer]:
    """The Slicer of --slice_by, before any training (SliceError names a column the data
    cannot be sliced by); None without --slice_by."""
    if not columns:
        return None
    return Slicer.of(columns, schema, read_statistics(os.path.join(data_dir, STATISTICS_FILE)))


def eval_slices(slicer: Slicer, export_dir: str, data_dir: str, schema) -> dict:
    """{"measured_on", "rows", "slices": {column: {slice: metrics}}} of the exported model
    on the golden set (or a note why there is none)."""
    path = os.path.join(export_dir, EXPORT_GOLDEN)
    if not os.path.exists(path):
        return {"note": f"no golden set ({os.path.join(data_dir, GOLDEN_DIR, GOLDEN_FILE)} "
                        "is missing: preprocess with --golden_rows > 0)"}
    version = types.SimpleNamespace(path=export_dir, module=saved_models.load(export_dir))
    rows = read_golden(path, schema)
    keys = {c: slicer.keys(c, example_values(list(rows.examples), schema, c))
            for c in slicer.columns}
    result = score(version, rows, schema.task, keys)
    if result.error:
        return {"note": f"{result.error}: {result.detail}"}
    return {"measured_on": "the golden set: a uniform sample of the eval split's rows",
            "rows": len(rows), "slices": result.slices}
