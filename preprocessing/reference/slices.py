"""Evaluation by slice (TFMA's slicing, inside the jobs): `--slice_by COL[,COL...]` groups
labelled rows by each column's value, a number by its train split's quintiles, and each
slice's metrics are the trainer's formulas (EvalSums) over its rows. A slice of fewer than
MIN_SLICE_ROWS rows is marked `small`, not hidden, and the gate does not judge a version by it.
"""
from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from preprocessing.contract.schema import Schema
from preprocessing.reference.evaluation import EvalSums

MIN_SLICE_ROWS = 30
QUINTILE_DECILES = (2, 4, 6, 8)  # the train deciles that bound a number's five slices
MISSING = "(missing)"
MAX_SLICES = 100  # values of one column kept as slices; the rarer ones are grouped
OTHER = "(other)"


class SliceError(ValueError):
    """A --slice_by the model's schema or statistics cannot slice by."""


def parse_slice_by(values: Iterable[str]) -> Tuple[str, ...]:
    """The columns of repeated `--slice_by a,b` flags, in order, each once."""
    out: List[str] = []
    for value in values or ():
        for name in str(value).split(","):
            name = name.strip()
            if name and name not in out:
                out.append(name)
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Slicer:
    """How rows are sliced: the columns, a number's inner quintile edges from the train
    statistics, and each string column's values kept as slices (the train split's most
    frequent MAX_SLICES; None: every value)."""
    columns: Tuple[str, ...]
    edges: Dict[str, Tuple[float, ...]] = dataclasses.field(default_factory=dict)
    kept: Dict[str, Optional[frozenset]] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, columns: Sequence[str], schema: Schema, train_stats: Optional[dict]
           ) -> "Slicer":
        """Checks `columns` against the schema (no label, no unknown name) and reads a
        number's quintiles from `train_stats` (the export's train statistics)."""
        features = ((train_stats or {}).get("features")) or {}
        names = [c.name for c in schema.columns]
        edges, kept = {}, {}
        for name in columns:
            if name not in names:
                raise SliceError(f"--slice_by {name} is not a column of the model's schema "
                                 f"(its columns: {', '.join(names)[:300]})")
            if name == schema.label:
                raise SliceError(f"--slice_by {name} is the label; slice by a feature")
            stats = features.get(name) or {}
            if stats.get("type") == "number":
                qs = stats.get("quantiles")
                if not qs:
                    raise SliceError(f"--slice_by {name}: the export's train statistics "
                                     "have no quantiles of it (retrain to keep them)")
                edges[name] = tuple(sorted({float(qs[i]) for i in QUINTILE_DECILES}))
            elif schema.column(name).type in ("float", "int") and not stats:
                raise SliceError(f"--slice_by {name} is a number the export's train "
                                 "statistics do not cover: its slices cannot be bounded")
            else:
                top = stats.get("top_values") or []
                kept[name] = (None if len(top) <= MAX_SLICES and stats.get("values_complete")
                              else frozenset(str(v) for v, _ in top[:MAX_SLICES])) \
                    if stats else None
        return cls(tuple(columns), edges, kept)

    def key(self, column: str, value) -> str:
        """The slice of one value of `column`."""
        if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
            return MISSING
        if column in self.edges:
            return number_slice(float(value), self.edges[column])
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        kept = self.kept.get(column)
        return text if kept is None or text in kept else OTHER

    def keys(self, column: str, values) -> List[str]:
        return [self.key(column, v) for v in values]


def number_slice(value: float, edges: Sequence[float]) -> str:
    """The quintile interval holding `value`: "< a", "[a, b)", ..., ">= d"."""
    i = bisect.bisect_right(edges, value)
    if i == 0:
        return f"< {edges[0]:.4g}"
    if i == len(edges):
        return f">= {edges[-1]:.4g}"
    return f"[{edges[i - 1]:.4g}, {edges[i]:.4g})"


class SliceSums:
    """EvalSums per (column, slice): running, mergeable, picklable (a Beam accumulator)."""

    def __init__(self, label_range: Optional[Tuple[float, float]] = None):
        self.label_range = label_range
        self.sums: Dict[Tuple[str, str], EvalSums] = {}

    def add_outputs(self, task: str, outputs: dict, labels, keys: Dict[str, List[str]]
                    ) -> "SliceSums":
        """`outputs` and `labels` as EvalSums.add_outputs takes them; `keys`: column -> each
        row's slice."""
        for column, row_keys in keys.items():
            groups: Dict[str, List[int]] = {}
            for i, k in enumerate(row_keys):
                groups.setdefault(k, []).append(i)
            for k, rows in groups.items():
                if (column, k) not in self.sums and self._count(column) >= MAX_SLICES:
                    k = OTHER  # a column of more values than statistics bounded
                part = {name: np.asarray(v)[rows] for name, v in outputs.items()}
                acc = self.sums.setdefault((column, k), EvalSums(label_range=self.label_range))
                acc.add_outputs(task, part, [labels[i] for i in rows])
        return self

    def _count(self, column: str) -> int:
        return sum(1 for c, _ in self.sums if c == column)

    def merge(self, other: "SliceSums") -> "SliceSums":
        out = SliceSums(self.label_range or other.label_range)
        for part in (self, other):
            for k, acc in part.sums.items():
                out.sums[k] = out.sums[k].merge(acc) if k in out.sums else acc
        return out

    def metrics(self, task: str, min_rows: int = MIN_SLICE_ROWS) -> dict:
        """{column: {slice: metrics (EvalSums.metrics) + small}}, slices in order."""
        out: Dict[str, dict] = {}
        for (column, k), acc in sorted(self.sums.items()):
            m = acc.metrics(task)
            m.pop("labels_outside_train_range", None)
            m["small"] = m["examples"] < min_rows
            out.setdefault(column, {})[k] = m
        return out


def regressed(candidate: dict, current: dict, metric: str, tolerance: float, worse
              ) -> List[dict]:
    """The slices (SliceSums.metrics of both versions on the same rows) where the candidate
    is worse than the current by more than `tolerance` (the `worse(metric, candidate,
    current, tolerance)` rule), skipping small ones; worst first."""
    out = []
    for column, slices in candidate.items():
        for k, cand in slices.items():
            cur = (current.get(column) or {}).get(k)
            if cur is None or cand.get("small") or metric not in cand or metric not in cur:
                continue
            if worse(metric, cand[metric], cur[metric], tolerance):
                out.append({"slice": f"{column}={k}", "examples": cand["examples"],
                            "candidate": cand[metric], "current": cur[metric]})
    return sorted(out, key=lambda r: -abs(r["candidate"] - r["current"]))


def slice_table(by_slice: dict, indent: str = "  ") -> str:
    """SliceSums.metrics as aligned lines for a terminal: slice, rows, each figure, and
    `small` where a slice has under MIN_SLICE_ROWS rows."""
    rows = [(f"{column}={k}", m) for column, slices in by_slice.items()
            for k, m in slices.items()]
    if not rows:
        return f"{indent}(no labelled rows)"
    figures = [f for f in ("rmse", "mae", "accuracy") if any(f in m for _, m in rows)]
    width = max(len(name) for name, _ in rows)
    head = f"{indent}{'slice':<{width}}  {'rows':>9}" + "".join(f"  {f:>9}" for f in figures)
    lines = [head]
    for name, m in rows:
        cells = "".join(f"  {m[f]:>9.4f}" if f in m else f"  {'':>9}" for f in figures)
        lines.append(f"{indent}{name:<{width}}  {m['examples']:>9,}{cells}"
                     + ("  small" if m.get("small") else ""))
    return "\n".join(lines)
