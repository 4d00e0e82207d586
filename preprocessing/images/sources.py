"""Where images to use come from, for every job: list files (a labels CSV with a `uri`
column; JSON lines with a uri or base64 bytes) and globs of image files (a file's parent
folder is its label, the class-folder layout) -> ImageItems, the one image item type.
Preprocess and batch prediction read images the same way from here; what each does with an
item (split and write, or score) is its own."""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import apache_beam as beam
from apache_beam.io import fileio

from preprocessing.accounting import counting
from preprocessing.accounting.rejects import DeadLetter, DeadLetters, Reject
from preprocessing.accounting.tagged import typed_outputs
from preprocessing.contract.values import parse_json
from preprocessing.files import reading
from preprocessing.parsing import csv_records

LIST_EXTENSIONS = (".csv", ".json", ".jsonl", ".ndjson", ".txt")


class ImageItem(NamedTuple):
    """One image: where it was listed (source file and line, the raw record), its uri or JSON
    object (base64 bytes), its key and label (None when not given)."""
    source: str
    pos: Optional[int]
    raw: str
    uri: Optional[str]
    obj: Optional[dict]
    key: Optional[str]
    label: Optional[str]


class ListedImages(beam.DoFn):
    """Records of list files -> ImageItems.

    csv: a header with a `uri` column (and optionally the label and key columns); relative
    uris resolve against the list file's folder. jsonl: objects with `uri` or base64 bytes
    (`{"image_bytes": {"b64": ...}}` / `{"b64": ...}`), optionally the label and a key.
    """

    def __init__(self, job: str, key: Optional[str], label: Optional[str]):
        self.key = key or "key"
        self.label = label or "label"
        self.dead = DeadLetters(job)

    def process(self, chunk):
        path, fmt, header, records = chunk
        base = path.rsplit("/", 1)[0]
        if fmt == "csv":
            yield from self._csv(path, base, header, records)
            return
        for line, text in records:
            try:
                obj = parse_json(text)
                if not isinstance(obj, dict):
                    raise Reject("invalid_json", "expected a JSON object")
            except Reject as e:
                yield self.dead.of(path, line, text, e)
                continue
            uri = obj.get("uri")
            if isinstance(uri, str):
                obj = dict(obj, uri=reading.resolve_uri(base, uri))
            label = obj.get(self.label)
            # The object itself travels on: the image is read from it (bytes or uri) later.
            yield ImageItem(path, line, text, obj.get("uri"), obj, obj.get(self.key),
                            None if label is None else str(label))

    def _csv(self, path, base, header, records):
        pos = {h: i for i, h in enumerate(header)}
        if "uri" not in pos:
            for line, text in records:
                yield self.dead(path, line, text, "missing_column",
                                f"a list of images needs a 'uri' column (header {header})")
            return
        for (line, text), fields in zip(records, csv_records.split_fields([t for _, t in records])):
            if fields is None or len(fields) != len(header):
                yield self.dead(path, line, text, "wrong_column_count",
                                f"expected {len(header)} fields ({', '.join(header)})")
                continue
            row = {h: fields[i].strip() for h, i in pos.items()}
            yield ImageItem(path, line, text, reading.resolve_uri(base, row["uri"]), None,
                            row.get(self.key), row.get(self.label))


class ImageFiles(beam.DoFn):
    """Matched image files -> ImageItems (each file is a row read); a file's parent folder
    is its label. With `skip_lists`, list files among them are left out (they are read as
    lists)."""

    def __init__(self, job: str, skip_lists: bool = False):
        self.skip_lists = skip_lists
        self.tally = counting.Tally(job)

    def process(self, metadata):
        path = metadata.path
        if self.skip_lists and path.lower().endswith(LIST_EXTENSIONS):
            return
        yield self.tally("rows_read")
        parts = path.rstrip("/").rsplit("/", 2)
        yield ImageItem(path, None, path, path, None, None,
                        parts[-2] if len(parts) == 3 else None)


class ReadImageItems(beam.PTransform):
    """List files and globs of image files -> (ImageItems, rejects, (name, n) tallies).

    `header`: list CSVs without a header row, whose columns are these. Globs are matched in
    the pipeline (a glob of images may be huge: its paths stay out of the graph)."""

    def __init__(self, job: str, list_files: Sequence[str] = (),
                 image_patterns: Sequence[str] = (), rows_per_chunk: int = 500,
                 input_format: str = "auto", key: Optional[str] = None,
                 label: Optional[str] = None, header: Optional[tuple] = None,
                 skip_lists: bool = False):
        super().__init__()
        self.job = job
        self.list_files, self.image_patterns = list(list_files), list(image_patterns)
        self.rows_per_chunk, self.input_format = rows_per_chunk, input_format
        # Not self.label: that is the PTransform's own name.
        self.key_column, self.label_column, self.header = key, label, header
        self.skip_lists = skip_lists

    def expand(self, pbegin):
        sources, dead, tallies = [], [], []
        if self.list_files:
            chunks, read_rejects, counts = pbegin | "ReadLists" >> reading.ReadChunks(
                self.job, self.list_files, self.rows_per_chunk, self.input_format,
                header=self.header)
            listed = chunks | "ListItems" >> typed_outputs(beam.ParDo(ListedImages(
                self.job, self.key_column, self.label_column)), ImageItem, "rejects",
                main="items")
            sources.append(listed.items)
            dead += [read_rejects, listed.rejects]
            tallies.append(counts)
        if self.image_patterns:
            files = (pbegin | "ImagePatterns" >> beam.Create(self.image_patterns)
                     | "MatchImages" >> fileio.MatchAll()
                     | "FileItems" >> typed_outputs(
                         beam.ParDo(ImageFiles(self.job, self.skip_lists)), ImageItem,
                         counting.COUNTS, main="items"))
            sources.append(files.items)
            tallies.append(files[counting.COUNTS])
        items = tuple(sources) | "AllItems" >> beam.Flatten()
        rejects = ((tuple(dead) | "ListRejects" >> beam.Flatten()) if dead else
                   (pbegin | "NoListRejects" >> beam.Create([]).with_output_types(DeadLetter)))
        counts = tuple(tallies) | "ReadTallies" >> beam.Flatten()
        return items, rejects, counts
