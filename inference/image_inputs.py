"""Batch prediction's image inputs: list files (CSV with a `uri` column, JSON lines with a uri
or base64 bytes) and globs of image files -> RowBatches of images normalised exactly as
preprocess normalised the training images (no train/serve skew)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import apache_beam as beam
from apache_beam.io import fileio

from inference import model_handler as mh
from inference.batch import JOB
from preprocessing import counting, parsing, reading, rejects
from preprocessing.images import ImageLimits
from preprocessing.values import parse_json


class ImageItem(NamedTuple):
    """One image to score: where it was listed (source file and line, the raw record), its uri
    or JSON object (base64 bytes), its key and label (None when not given)."""
    source: str
    pos: Optional[int]
    raw: str
    uri: Optional[str]
    obj: Optional[dict]
    key: Optional[str]
    label: Optional[str]


class ListedImages(beam.DoFn):
    """Records of list files -> ImageItems.

    csv: a header with a `uri` column (and optionally the label and --key_column); relative
    uris resolve against the list file's folder. jsonl: objects with `uri` or base64 bytes
    (`{"image_bytes": {"b64": ...}}` / `{"b64": ...}`), optionally the label and a key.
    """

    def __init__(self, key: Optional[str], label: Optional[str]):
        self.key = key or "key"
        self.label = label or "label"
        self.rejects = {}

    def process(self, chunk):
        path, fmt, header, records = chunk
        base = path.rsplit("/", 1)[0]
        if fmt == "csv":
            pos = {h: i for i, h in enumerate(header)}
            if "uri" not in pos:
                for line, text in records:
                    yield self._reject(path, line, text, "missing_column",
                                       f"a list of images needs a 'uri' column (header {header})")
                return
            for (line, text), fields in zip(records, parsing.split_fields([t for _, t in records])):
                if fields is None or len(fields) != len(header):
                    yield self._reject(path, line, text, "wrong_column_count",
                                       f"expected {len(header)} fields ({', '.join(header)})")
                    continue
                row = {h: fields[i].strip() for h, i in pos.items()}
                yield ImageItem(path, line, text, reading.resolve_uri(base, row["uri"]), None,
                                row.get(self.key), row.get(self.label))
            return
        for line, text in records:
            try:
                obj = parse_json(text)
                if not isinstance(obj, dict):
                    raise rejects.Reject("invalid_json", "expected a JSON object")
            except rejects.Reject as e:
                yield self._reject(path, line, text, e.reason, e.detail)
                continue
            uri = obj.get("uri")
            if isinstance(uri, str):
                obj = dict(obj, uri=reading.resolve_uri(base, uri))
            label = obj.get(self.label)
            # The object itself travels on: LoadImages reads it with ImageInputs.from_object.
            yield ImageItem(path, line, text, obj.get("uri"), obj, obj.get(self.key),
                            None if label is None else str(label))

    def _reject(self, path, line, raw, reason, detail):
        return rejects.reject(JOB, self.rejects, path, line, raw, reason, detail)


class ImageFiles(beam.DoFn):
    """Image files matched by --input -> items (each file is a row read); a file's parent
    folder is its label, as in preprocess's class-folder layout."""

    def __init__(self):
        from inference.images import LIST_EXTENSIONS
        self.list_extensions = LIST_EXTENSIONS
        self.tally = counting.Tally(JOB)

    def process(self, metadata):
        path = metadata.path
        if not path.lower().endswith(self.list_extensions):  # list files are read as such
            yield self.tally("rows_read")
            parts = path.rstrip("/").rsplit("/", 2)
            yield ImageItem(path, None, path, path, None, None,
                            parts[-2] if len(parts) == 3 else None)


class LoadImages(beam.DoFn):
    """Items -> RowBatches of normalised image bytes (the model's `image_bytes` input) with
    their keys and labels; unreadable or invalid images go to the dead letters with the
    reason (the same checks and normalisation as preprocess)."""

    def __init__(self, label: Optional[str], limits: ImageLimits):
        self.label = label or "label"
        self.limits = limits
        self.rejects = {}

    def setup(self):
        from inference.images import ImageInputs
        self._images = ImageInputs(self.limits)

    def process(self, items):
        from inference.images import IMAGE_INPUT
        from preprocessing.rejects import Reject
        images, keys, labels, sources = [], [], [], []
        for source, pos, raw, uri, obj, key, label in items:
            try:
                jpeg = (self._images.from_object(obj)[0] if obj is not None
                        else self._images.from_uri(uri))
            except Reject as e:
                yield rejects.reject(JOB, self.rejects, source, pos, raw, e.reason, e.detail)
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
    `limits`: the ImageLimits preprocess normalised with."""

    def __init__(self, list_files, image_patterns, rows_per_chunk: int, input_format: str,
                 key_column: Optional[str], label: Optional[str], max_batch_size: int,
                 limits: ImageLimits):
        super().__init__()
        self.list_files, self.image_patterns = list(list_files), list(image_patterns)
        self.rows_per_chunk, self.input_format = rows_per_chunk, input_format
        # Not self.label: that is the PTransform's own name.
        self.key_column, self.label_column = key_column, label
        self.max_batch_size, self.limits = max_batch_size, limits

    def expand(self, pbegin):
        sources, read_rejects, tallies = [], [], []
        if self.list_files:
            chunks, list_rejects, counts = pbegin | "ReadLists" >> reading.ReadChunks(
                JOB, self.list_files, self.rows_per_chunk, self.input_format)
            tallies.append(counts)
            listed = chunks | "ListItems" >> beam.ParDo(
                ListedImages(self.key_column, self.label_column)).with_outputs("rejects", main="items")
            sources.append(listed.items)
            read_rejects += [list_rejects, listed.rejects]
        if self.image_patterns:
            files = (pbegin | "ImagePatterns" >> beam.Create(self.image_patterns)
                     | "MatchImages" >> fileio.MatchAll()
                     | "FileItems" >> beam.ParDo(ImageFiles()).with_outputs(counting.COUNTS,
                                                                            main="items"))
            sources.append(files.items)
            tallies.append(files[counting.COUNTS])
        items = tuple(sources) | "AllItems" >> beam.Flatten()
        loaded = (items
                  | "Spread" >> beam.Reshuffle()
                  | "Batch" >> beam.BatchElements(min_batch_size=1,
                                                  max_batch_size=self.max_batch_size)
                  | "Load" >> beam.ParDo(LoadImages(self.label_column, self.limits)).with_outputs(
                      "rejects", main="batches"))
        read = (tuple(read_rejects) | "ReadRejects" >> beam.Flatten()) if read_rejects else \
            (pbegin | "NoReadRejects" >> beam.Create([]))
        counts = tuple(tallies) | "ReadTallies" >> beam.Flatten()
        return loaded.batches, read, loaded.rejects, counts
