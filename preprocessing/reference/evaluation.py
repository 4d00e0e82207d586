"""The evaluation formulas training and batch prediction share, so that batch prediction over
the eval split reproduces the trainer's metrics.json exactly: sums that merge, and one
`metrics()` from them."""
from __future__ import annotations

import dataclasses
import math

import numpy as np


@dataclasses.dataclass
class EvalSums:
    """Running sums over labelled examples: n, squared and absolute error (regression), and
    correct predictions and label weight (classification; weight 0 = an unknown label)."""
    n: int = 0
    sq: float = 0.0
    ab: float = 0.0
    correct: float = 0.0
    weight: float = 0.0

    def add_regression(self, predictions, labels) -> None:
        err = np.asarray(predictions, np.float64) - np.asarray(labels, np.float64)
        self.n += len(err)
        self.sq += float(np.sum(err * err))
        self.ab += float(np.sum(np.abs(err)))

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
                        self.correct + other.correct, self.weight + other.weight)

    def metrics(self, task: str) -> dict:
        if self.n == 0:
            return {"examples": 0}
        if task == "regression":
            return {"examples": self.n, "rmse": math.sqrt(self.sq / self.n),
                    "mae": self.ab / self.n}
        return {"examples": self.n, "accuracy": self.correct / max(self.weight, 1.0),
                "unknown_label_examples": int(self.n - self.weight)}
