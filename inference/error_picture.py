"""What batch_predict's report draws the errors from, mergeable across workers: for a
classifier the confusion counts (label x predicted class), for a regression a uniform
sample of (label, prediction) pairs for a residual plot. Bounded whatever the input: the
sample keeps the SAMPLE rows of smallest random key (bottom-k sampling: merging two samples
gives a sample of the union), the counts at most MAX_CELLS cells (the rarest folded into
OTHER) and MAX_CLASSES classes in the output."""
from __future__ import annotations

import dataclasses
import heapq
import random
from typing import Dict, List, Tuple

import numpy as np

SAMPLE = 1000
MAX_CELLS = 10_000
MAX_CLASSES = 20
OTHER = "(other)"


@dataclasses.dataclass
class ErrorPicture:
    confusion: Dict[Tuple[str, str], int] = dataclasses.field(default_factory=dict)
    sample: List[Tuple[float, float, float]] = dataclasses.field(default_factory=list)

    def add_outputs(self, task: str, outputs: dict, labels) -> "ErrorPicture":
        """The model's column-wise outputs against `labels` (None: no label, left out)."""
        has = [i for i, v in enumerate(labels) if v is not None]
        if not has:
            return self
        if task == "regression":
            preds = np.asarray(outputs["predictions"], np.float64).reshape(len(labels), -1)
            pairs = [(random.random(), float(labels[i]), float(preds[i, 0])) for i in has]
            self.sample = heapq.nsmallest(SAMPLE, self.sample + pairs)
        else:
            classes = np.asarray(outputs["classes"]).reshape(len(labels), -1)[:, 0].tolist()
            for i in has:
                c = classes[i]
                cell = (str(labels[i]), c.decode("utf-8") if isinstance(c, bytes) else str(c))
                self.confusion[cell] = self.confusion.get(cell, 0) + 1
            self._bound()
        return self

    def _bound(self) -> None:
        if len(self.confusion) <= MAX_CELLS:
            return
        keep = dict(heapq.nlargest(MAX_CELLS - 1, self.confusion.items(), key=lambda kv: kv[1]))
        folded = sum(self.confusion.values()) - sum(keep.values())
        keep[(OTHER, OTHER)] = keep.get((OTHER, OTHER), 0) + folded
        self.confusion = keep

    def merge(self, other: "ErrorPicture") -> "ErrorPicture":
        out = ErrorPicture(dict(self.confusion), heapq.nsmallest(SAMPLE,
                                                                 self.sample + other.sample))
        for cell, n in other.confusion.items():
            out.confusion[cell] = out.confusion.get(cell, 0) + n
        out._bound()
        return out

    def to_dict(self, task: str) -> dict:
        """{"residual_sample": {"labels", "predictions"}} or {"confusion_matrix": {"classes",
        "counts"}} (rows: labels, columns: predictions; the most frequent MAX_CLASSES labels,
        the rest as OTHER); empty when nothing was added."""
        if task == "regression":
            if not self.sample:
                return {}
            return {"residual_sample": {"labels": [s[1] for s in self.sample],
                                        "predictions": [s[2] for s in self.sample]}}
        if not self.confusion:
            return {}
        totals: Dict[str, int] = {}
        for (label, _), n in self.confusion.items():
            totals[label] = totals.get(label, 0) + n
        top = sorted(totals, key=lambda k: (-totals[k], k))[:MAX_CLASSES]
        classes = sorted(top) + ([OTHER] if len(totals) > len(top) or any(
            p not in top for _, p in self.confusion) else [])
        index = {c: i for i, c in enumerate(classes)}
        counts = [[0] * len(classes) for _ in classes]
        for (label, pred), n in self.confusion.items():
            counts[index.get(label, index.get(OTHER, 0))][index.get(pred, index.get(OTHER, 0))] \
                += n
        return {"confusion_matrix": {"classes": classes, "counts": counts}}
