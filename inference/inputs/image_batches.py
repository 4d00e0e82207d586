"""Batch prediction's image inputs: ImageItems (preprocessing.images.sources, read as preprocess
reads them) -> RowBatches of images normalised exactly as preprocess normalised the training
images (no train/serve skew)."""
from __future__ import annotations

from typing import Optional

import apache_beam as beam

from inference.inputs.image_sources import IMAGE_INPUT, ImageInputs
from inference.model import model_handler as mh
from preprocessing.accounting import rejects
from preprocessing.accounting.rejects import Reject
from preprocessing.accounting.tagged import typed_outputs
from preprocessing.images.checks import ImageLimits
from preprocessing.images.sources import ReadImageItems


class LoadImages(beam.DoFn):
    """Items -> RowBatches of normalised image bytes (the model's `image_bytes` input) with
    their keys and labels; unreadable or invalid images go to the dead letters with the
    reason (the same checks and normalisation as preprocess)."""

    def __init__(self, job: str, label: Optional[str], limits: ImageLimits):
        self.label = label or "label"
        self.limits = limits
        self.dead = rejects.DeadLetters(job)

    def setup(self):
        self._images = ImageInputs(self.limits)

    def process(self, items):
        images, keys, labels, sources = [], [], [], []
        for source, pos, raw, uri, obj, key, label in items:
            try:
                jpeg = (self._images.from_object(obj)[0] if obj is not None
                        else self._images.from_uri(uri))
            except Reject as e:
                yield self.dead.of(source, pos, raw, e)
                continue
            images.append(jpeg)
            keys.append(str(key) if key not in (None, "") else
                        uri or mh.default_key(source, pos))
            labels.append(label)
            sources.append((source, pos, raw))
        if images:
            yield mh.RowBatch((IMAGE_INPUT, self.label), [images, labels], keys, None, None,
                              sources)


class ReadImageInputs(beam.PTransform):
    """--input of an image model -> (RowBatches, read rejects, image rejects, tallies).

    `list_files`: .csv / .jsonl lists of images; `image_patterns`: globs of image files,
    matched in the pipeline (a glob of images may be huge: its paths stay out of the graph).
    `limits`: the ImageLimits preprocess normalised with; `job`: the metrics namespace."""

    def __init__(self, job: str, list_files, image_patterns, rows_per_chunk: int, input_format: str,
                 key_column: Optional[str], label: Optional[str], max_batch_size: int,
                 limits: ImageLimits):
        super().__init__()
        self.job = job
        self.list_files, self.image_patterns = list(list_files), list(image_patterns)
        self.rows_per_chunk, self.input_format = rows_per_chunk, input_format
        # Not self.label: that is the PTransform's own name.
        self.key_column, self.label_column = key_column, label
        self.max_batch_size, self.limits = max_batch_size, limits

    def expand(self, pbegin):
        items, read, counts = pbegin | "ReadItems" >> ReadImageItems(
            self.job, self.list_files, self.image_patterns, self.rows_per_chunk, self.input_format,
            self.key_column, self.label_column, skip_lists=True)
        loaded = (items
                  | "Spread" >> beam.Reshuffle()
                  | "Batch" >> beam.BatchElements(min_batch_size=1,
                                                  max_batch_size=self.max_batch_size)
                  | "Load" >> typed_outputs(
                      beam.ParDo(LoadImages(self.job, self.label_column, self.limits)),
                      mh.RowBatch, "rejects", main="batches"))
        return loaded.batches, read, loaded.rejects, counts
