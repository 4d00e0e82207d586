"""The redrive job's steps (beam_jobs/redrive.py): reading dead-letter files back with a
bound, choosing fixed letters in place of published ones, parsing letters again with the
header their run recorded, and merging the new predictions into the output by key."""
from __future__ import annotations

import csv
import json
import logging
from typing import Dict, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from preprocessing.accounting import counting, rejects
from preprocessing.contract.values import parse_json
from preprocessing.files.reading import Chunk
from preprocessing.files.records import detect_format, read_records

# Dead letters whose `raw` is not the whole record, or no record at all (a duplicate_key
# letter holds the prediction a key already had): kept as they are.
NOT_REPLAYABLE = frozenset(rejects.FILE_REASONS) | {
    "record_too_large", "unterminated_quote", "empty_file", "duplicate_key"}


class SplitLetters(beam.DoFn):
    """Dead-letter lines -> (source, (line, raw)) to replay, or the line itself, kept (a
    dead letter that cannot be replayed). Every letter is a row of the original input."""

    def __init__(self, job: str):
        self.tally = counting.Tally(job)
        self.dead = rejects.DeadLetters(job)

    def process(self, line: str):
        if not line.strip():  # a blank line a hand edit left
            return
        yield self.tally("rows_read", 1)
        try:  # parse_json: a line nested past the parser's limit is no letter either
            rec = parse_json(line)
            source, raw, reason = rec["source"], rec["raw"], rec["reason"]
            if reason not in rejects.REASONS:
                raise ValueError(reason)
        except (rejects.Reject, ValueError, KeyError, TypeError):
            yield self.dead("", None, line[:10_000], "invalid_json",
                            "not a dead-letter record (source, line, raw, reason)")
            return
        if (reason in NOT_REPLAYABLE or not isinstance(raw, str)
                or detect_format(str(source)) == "tfrecord"):
            yield beam.pvalue.TaggedOutput("kept", rejects.DeadLetter.of_json(line, rec))
            return
        yield str(source), (rec.get("line"), raw)


class SourceChunks(beam.DoFn):
    """(source, [(line, raw)]) -> the parser's Chunks; a CSV source's rows with the header
    the run recorded for it (never the file as it is now). A CSV source without one keeps
    its rows as `redrive_no_header` dead letters."""

    def __init__(self, job: str, rows_per_chunk: int, headers: Dict[str, Tuple[str, ...]]):
        self.rows_per_chunk = rows_per_chunk
        self.headers = dict(headers)
        self.dead = rejects.DeadLetters(job)

    def process(self, grouped):
        source, rows = grouped
        rows = sorted(rows, key=lambda r: (len(str(r[0])), str(r[0])))
        fmt = detect_format(source)
        header = None
        if fmt == "csv":
            header = self.headers.get(source)
            if header is None:
                for line, raw in rows:
                    yield self.dead(source, line, raw, "redrive_no_header",
                                    f"the run recorded no header for {source}")
                return
        for i in range(0, len(rows), self.rows_per_chunk):
            yield Chunk(source, fmt, header, rows[i:i + self.rows_per_chunk])


class MergeByKey(beam.DoFn):
    """(key, {"old": [...], "new": [Predictions]}) -> the new Prediction to write, or a
    `duplicate_key` dead letter for a key already predicted, or redriven twice."""

    def __init__(self, job: str, source: str):
        self.source = source
        self.dead = rejects.DeadLetters(job)
        self.tally = counting.Tally(job)

    def process(self, grouped):
        key, parts = grouped
        taken = bool(list(parts["old"]))
        for rec in parts["new"]:
            if taken:
                yield self.dead(self.source, None, json.dumps(rec.to_dict()), "duplicate_key",
                                f"key {key!r} already has a prediction")
                continue
            taken = True
            yield self.tally("rows_written", 1)
            yield rec


class CopyFile(beam.DoFn):
    """A published file -> its copy in the staging folder (the publish replaces the
    managed names whole, so what is kept is staged again). The folder is made first: the
    sinks that also write there may not have made it yet (a copy into a missing local
    folder failed about one redrive in eight)."""

    def __init__(self, staging: str):
        self.staging = staging

    def setup(self):
        if not FileSystems.exists(self.staging):
            try:
                FileSystems.mkdirs(self.staging)
            except IOError:  # made meanwhile by a sink
                pass

    def process(self, path: str):
        target = FileSystems.join(self.staging, path.rstrip("/").rsplit("/", 1)[-1])
        FileSystems.copy([path], [target])
        yield target


class CarriedKeys(beam.DoFn):
    """A published prediction line (JSON, or a CSV record whose first field is the key:
    the run may have written CSV only) -> (key, None); each is a row read and written
    again."""

    def __init__(self, job: str, fmt: str = "jsonl"):
        self.fmt = fmt
        self.tally = counting.Tally(job)

    def process(self, line: str):
        if not line.strip():
            return
        yield self.tally("rows_read", 1)
        yield self.tally("rows_written", 1)
        if self.fmt == "csv":
            yield next(csv.reader([line]))[0], None
        else:
            yield json.loads(line)["key"], None


def letter_place(line: str):
    """A dead letter's (source, line): where its row was in the input."""
    try:
        rec = parse_json(line)
        return str(rec.get("source")), str(rec.get("line"))
    except (rejects.Reject, AttributeError):
        return "", line


class FixedFirst(beam.DoFn):
    """(place, {"published": [...], "fixed": [...]}) -> the published letter, or the first
    fixed one of its place in its stead. A fixed letter of no published place (a line or a
    key the run never read) or a second one for a place is not a row of the input: it is
    left out and counted (summary.json's `ignored`), never published."""

    def __init__(self, job: str):
        self.job = job  # the metrics namespace
        self.tally = counting.Tally(job)

    def process(self, grouped):
        place, parts = grouped
        published, fixed = list(parts["published"]), list(parts["fixed"])
        if not published:
            if fixed:
                logging.warning("%s: --rejects has %d letter(s) for %s, which no published "
                                "dead letter has: left out", self.job, len(fixed), place)
                yield self.tally("ignored_not_a_dead_letter", len(fixed))
            return
        if not fixed:
            yield from published
            return
        yield fixed[0]
        yield from published[1:]  # (a place written twice: the others stay as they were)
        if len(fixed) > 1:
            yield self.tally("ignored_second_fix", len(fixed) - 1)


# A dead letter holds a raw row (at most --max_record_bytes, 1 MiB by default) as JSON, whose
# escapes can make it several times longer; a longer line is no letter our jobs wrote.
LETTER_MAX_BYTES = 8 << 20


class ReadLetterLines(beam.DoFn):
    """A file pattern -> the non-blank lines of its files, each read with a bound: a line
    over `max_bytes` (a hand edit gone wrong) is read past in bounded pieces and becomes a
    `record_too_large` dead letter, as is a line that is not UTF-8 (`bad_encoding`)."""

    def __init__(self, job: str, max_bytes: int = LETTER_MAX_BYTES):
        self.max_bytes = max_bytes
        self.dead = rejects.DeadLetters(job)
        self.tally = counting.Tally(job)

    def process(self, pattern: str):
        for meta in FileSystems.match([pattern])[0].metadata_list:
            bad = []
            with FileSystems.open(meta.path) as f:
                # Never more than the file said it holds (x100 for a compressed one): a
                # device file reports 0 bytes and would otherwise be read forever.
                budget = (meta.size_in_bytes + 1) * (
                    100 if meta.path.endswith((".gz", ".bz2", ".zst", ".deflate")) else 1)
                reader = _Budget(f, budget)
                for _, text in read_records(reader, "jsonl", bad, max_bytes=self.max_bytes):
                    yield from self._rejected(meta.path, bad)
                    yield text
            yield from self._rejected(meta.path, bad)

    def _rejected(self, path: str, bad: list):
        for line, raw, reason, detail in bad:
            yield self.tally("rows_read", 1)
            yield self.dead(path, line, raw, reason, detail)
        bad.clear()


class _Budget:
    """A binary file whose readline stops (returns b"") after `left` bytes in all."""

    def __init__(self, f, left: int):
        self.f, self.left = f, left

    def readline(self, limit: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        line = self.f.readline(self.left if limit < 0 else min(limit, self.left))
        self.left -= len(line)
        return line
