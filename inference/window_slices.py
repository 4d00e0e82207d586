"""stream_predict `--slice_by`: per monitoring window, the metrics by slice of the messages
that carry the label column (a labelled stream: delayed ground truth replayed, or a canary
feed). A `slice_metrics` record per window, beside `window_stats`; messages without the
label are not counted here (they are in `window_stats`)."""
from __future__ import annotations

from typing import Optional, Tuple

import apache_beam as beam
from apache_beam.transforms import window

from inference.model.shadow import columnar
from preprocessing.accounting.rejects import Reject
from preprocessing.reference.slices import Slicer, SliceSums


class LabelledRows(beam.DoFn):
    """(MessageMeta, PredictionResult) -> (raw values, model output) at the message's event
    time, for the rows whose message carries the label."""

    def __init__(self, label: str):
        self.label = label

    def process(self, keyed):
        meta, result = keyed
        if isinstance(result.inference, Reject) or result.example.get(self.label) is None:
            return
        yield window.TimestampedValue((result.example, result.inference), meta.event_time)


class SliceMetricsFn(beam.CombineFn):
    """(raw values, output) rows -> {"event": "slice_metrics", "labelled", "slices"}."""

    def __init__(self, task: str, label: str, slicer: Slicer,
                 label_range: Optional[Tuple[float, float]] = None):
        self.task, self.label, self.slicer = task, label, slicer
        self.label_range = label_range

    def create_accumulator(self):
        return SliceSums(self.label_range)

    def add_input(self, acc, row):
        values, output = row
        keys = {c: self.slicer.keys(c, [values.get(c)]) for c in self.slicer.columns}
        return acc.add_outputs(self.task, columnar(self.task, [output]),
                               [values[self.label]], keys)

    def merge_accumulators(self, accs):
        out = self.create_accumulator()
        for a in accs:
            out = out.merge(a)
        return out

    def extract_output(self, acc):
        slices = acc.metrics(self.task)
        labelled = max((sum(m.get("examples", 0) for m in by.values())
                        for by in slices.values()), default=0)
        return {"event": "slice_metrics", "labelled": labelled, "slices": slices}
