"""The evaluation formulas training and batch prediction share, so that batch prediction over
the eval split reproduces the trainer's metrics.json exactly: sums that merge, and one
`metrics()` from them."""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

import numpy as np


@dataclasses.dataclass
class EvalSums:
    """Running sums over labelled examples: n, squared and absolute error (regression), and
    correct predictions and label weight (classification; weight 0 = an unknown label).
    Given the train labels' range, regression also counts the rows whose label lies outside
    it and their squared error: rows no model bounded by its training labels can reach."""
    n: int = 0
    sq: float = 0.0
    ab: float = 0.0
    correct: float = 0.0
    weight: float = 0.0
    outside: int = 0
    outside_sq: float = 0.0
    label_range: Optional[Tuple[float, float]] = None

    def add_regression(self, predictions, labels) -> None:
        labels = np.asarray(labels, np.float64)
        err = np.asarray(predictions, np.float64) - labels
        self.n += len(err)
        self.sq += float(np.sum(err * err))
        self.ab += float(np.sum(np.abs(err)))
        if self.label_range is not None:
            out = (labels < self.label_range[0]) | (labels > self.label_range[1])
            self.outside += int(out.sum())
            self.outside_sq += float(np.sum(err[out] ** 2))

    def add_classification(self, is_correct, weights=None) -> None:
        is_correct = np.asarray(is_correct, np.float64)
        w = np.ones_like(is_correct) if weights is None else np.asarray(weights, np.float64)
        self.n += len(is_correct)
        self.correct += float(np.sum(is_correct * w))
        self.weight += float(np.sum(w))

    def add_outputs(self, task: str, outputs: dict, labels) -> "EvalSums":
        """The model's column-wise outputs (`predictions`, or `classes` as bytes) against
        `labels` aligned with them; rows whose label is None are left out."""
        has = [i for i, v in enumerate(labels) if v is not None]
        if not has:
            return self
        if task == "regression":
            self.add_regression(np.asarray(outputs["predictions"])[has],
                                [float(labels[i]) for i in has])
        else:
            classes = np.asarray(outputs["classes"])[has].tolist()
            self.add_classification([(c.decode("utf-8") if isinstance(c, bytes) else str(c))
                                     == str(labels[i]) for c, i in zip(classes, has)])
        return self

    def merge(self, other: "EvalSums") -> "EvalSums":
        return EvalSums(self.n + other.n, self.sq + other.sq, self.ab + other.ab,
                        self.correct + other.correct, self.weight + other.weight,
                        self.outside + other.outside, self.outside_sq + other.outside_sq,
                        self.label_range or other.label_range)

    def metrics(self, task: str) -> dict:
        if self.n == 0:
            return {"examples": 0}
        if task == "regression":
            out = {"examples": self.n, "rmse": math.sqrt(self.sq / self.n),
                   "mae": self.ab / self.n}
            if self.outside:
                inside = self.n - self.outside
                out["labels_outside_train_range"] = {
                    "examples": self.outside, "train_range": list(self.label_range),
                    "share_of_squared_error": self.outside_sq / self.sq if self.sq else 0.0,
                    "rmse_of_the_others": math.sqrt((self.sq - self.outside_sq) / inside)
                    if inside else None}
            return out
        return {"examples": self.n, "accuracy": self.correct / max(self.weight, 1.0),
                "unknown_label_examples": int(self.n - self.weight)}


def metrics_table(metrics: dict, indent: str = "  ") -> str:
    """`metrics` as aligned `name  value` lines for a terminal (nested figures by dotted
    name; integers with thousands separators, other numbers to 4 decimals)."""
    rows = list(_flat(metrics))
    if not rows:
        return f"{indent}(none)"
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{indent}{name:<{width}}  {figure_text(value)}" for name, value in rows)


def _flat(metrics: dict, prefix: str = ""):
    for name, value in metrics.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", value


def figure_text(value) -> str:
    """A value as a table shows it (the terminal's and report.html's): integers with
    thousands separators, other numbers to 4 decimals (past a million, whole), None "-"."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:,.4f}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(figure_text(v) for v in value)
    return str(value)
