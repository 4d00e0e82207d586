"""Why a record is rejected, and the one dead-letter record every job writes for it.

`Reject(reason, detail)` is the one error type parsing (CSV, JSON, tf.Example), image checks
and the model raise; `REASONS` is the one registry of reasons (a reason not listed here is a
programming error, caught by a test). Every job carries a rejected record as the same
`DeadLetter` (job, source, line or position, raw, reason, detail, plus job-specific extras:
streaming adds the message id and event time) and writes it as the same JSON object.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms import window

REJECTS = "rejects"  # the tagged output carrying a step's DeadLetters

REASONS = {
    # CSV / JSON / tf.Example records
    "bad_encoding": "a line that is not UTF-8",
    "truncated_file": "a compressed file that ends before its end marker (rows before the cut "
                      "are kept; the run is not marked complete)",
    "corrupt_file": "a file whose compression (.gz, .bz2) is not what its extension says",
    "bad_header": "a CSV file whose header row cannot be read (not UTF-8, CR-only line ends, "
                  "a name twice, over the record bounds); its rows are not read",
    "unreadable_file": "an input that is not a regular file (a device, a pipe, a folder) or "
                       "that the job may not read",
    "malformed_csv": "a record that is not valid CSV",
    "unterminated_quote": "a quote not closed within --max_record_lines / --max_record_bytes",
    "record_too_large": "a line over --max_record_bytes",
    "wrong_column_count": "a record with another number of fields than the header",
    "missing_column": "the file's header lacks a column the job reads",
    "missing_value": "an empty field without a default",
    "unparsable_number": "a field that is not a number of the column's type",
    "non_finite_number": "NaN or infinity in a numeric column",
    "number_out_of_range": "a number beyond its column's storage (float32, int64), or a "
                           "non-zero float that would be stored as 0",
    "unparsable_datetime": "a datetime field not in YYYY-MM-DD HH:MM:SS[.fff][Z|UTC|+HH:MM]",
    "invalid_json": "a line or message that is not the JSON expected",
    "bad_example": "a record that is not a serialized tf.Example",
    # images
    "empty_file": "an image file of zero bytes",
    "not_an_image": "bytes that are no image format",
    "format_mismatch": "an image whose format differs from its file extension",
    "truncated": "an incomplete or corrupt image",
    "too_many_pixels": "an image over --max_pixels (decompression bombs)",
    "unreadable_uri": "an image uri that cannot be read",
    "not_a_file": "an image uri that is not a regular file (a device, a folder, a pipe)",
    "image_too_large": "an image file over --max_image_bytes",
    "oversized_metadata": "an image whose embedded metadata (a PNG text chunk, ICC profile) "
                          "is over the decoder's safety bound",
    "degenerate_image": "an image with a side under 8 px or sides more than 32:1 apart",
    "unknown_label": "an image label outside --classes, or none",
    "missing_image": "an image instance without uri or bytes",
    "uri_not_allowed": "an image uri outside --allowed_uri_prefixes (streaming: none allowed "
                       "until the operator names some); said before any read, so it does not "
                       "tell whether the file exists",
    "uri_read_timeout": "an image uri whose read did not finish within --uri_read_timeout_secs "
                        "(after the retries)",
    "message_too_large": "a message over --max_message_bytes",
    "bad_message": "a message the parser failed on unexpectedly (the error is in the detail)",
    "bad_attribute": "a message attribute the job reads that cannot be read (an event-time "
                     "attribute that is no time, or one outside the years 1970-9999)",
    # a redrive (beam_jobs/redrive.py)
    "duplicate_key": "a redriven row whose key already has a prediction",
    "redrive_no_header": "a redriven CSV row whose source file's header cannot be read",
    # the model
    "model_rejected": "a row the model could not score",
    "non_finite_prediction": "a row the model scored as NaN or infinity (an input far outside "
                             "what it was trained on): written as a dead letter, never as "
                             "invalid JSON",
    # sinks
    "bigquery_insert_refused": "a prediction BigQuery's streaming insert refused (its error in "
                               "the detail); the other outputs have it",
}


# File-level reasons: a run with one of them publishes what it read but is not complete.
FILE_REASONS = ("truncated_file", "corrupt_file", "unreadable_file", "bad_header")


class Reject(Exception):
    """A record that cannot be used: `reason` (a key of REASONS) and a human `detail`."""

    def __init__(self, reason: str, detail: str):
        if reason not in REASONS:
            raise ValueError(f"unknown reject reason {reason!r}: add it to REASONS")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    def __reduce__(self):  # pickled between pipeline stages (e.g. a model's rejection)
        return Reject, (self.reason, self.detail)


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """The one dead-letter record, in flight in every job (serialised only at the sinks:
    `to_json`, `to_dict`): where the record came from, what it was, and why; `extra` holds
    job-specific fields (streaming: the message id, its event time). `verbatim`: a published
    letter a redrive keeps as it was, written back byte for byte."""
    job: str
    source: str
    line: Any                   # a line number, a position, or None
    raw: Optional[str]
    reason: str
    detail: str
    extra: Tuple[Tuple[str, Any], ...] = ()
    verbatim: Optional[str] = None

    def get(self, name: str, default=None):
        """A field or an extra by name (an extra the letter lacks: `default`)."""
        if name in _FIELDS:
            return getattr(self, name)
        return dict(self.extra).get(name, default)

    def to_dict(self) -> dict:
        if self.verbatim is not None:
            return json.loads(self.verbatim)
        out = {f: getattr(self, f) for f in _FIELDS}
        out.update(self.extra)
        return out

    def to_json(self) -> str:
        if self.verbatim is not None:
            return self.verbatim
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def of_json(cls, line: str, record: dict) -> "DeadLetter":
        """A published letter (`line`, parsed as `record`), kept as it was."""
        known = {f: record.get(f) for f in _FIELDS}
        return cls(**known, extra=tuple((k, v) for k, v in record.items() if k not in _FIELDS),
                   verbatim=line)


_FIELDS = ("job", "source", "line", "raw", "reason", "detail")


def dead_letter_record(job: str, source: str, line, raw, reason: str, detail: str,
                       **extra) -> DeadLetter:
    """The dead letter of a rejected record (raw bytes decoded, the reason checked)."""
    if reason not in REASONS:
        raise ValueError(f"unknown reject reason {reason!r}: add it to REASONS")
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    return DeadLetter(job, source, line, raw, reason, detail, tuple(extra.items()))


class DeadLetters:
    """The one way a DoFn rejects a record: counts it under the metric `rejected_<reason>`
    (namespace `job`) and returns its DeadLetter on the `rejects` output (with an event
    `timestamp` where streaming gives one)."""

    def __init__(self, job: str):
        self.job = job
        self._counters = {}  # reason -> Counter, made on first use

    def __call__(self, source: str, line, raw, reason: str, detail: str, timestamp=None,
                 **extra) -> beam.pvalue.TaggedOutput:
        counter = self._counters.get(reason)
        if counter is None:
            counter = self._counters[reason] = Metrics.counter(self.job, f"rejected_{reason}")
        counter.inc()
        value = dead_letter_record(self.job, source, line, raw, reason, detail, **extra)
        if timestamp is not None:
            value = window.TimestampedValue(value, timestamp)
        return beam.pvalue.TaggedOutput(REJECTS, value)

    def of(self, source: str, line, raw, e: Reject, **kw) -> beam.pvalue.TaggedOutput:
        """The dead letter of a raised Reject."""
        return self(source, line, raw, e.reason, e.detail, **kw)


class WriteDeadLetters(beam.PTransform):
    """Writes DeadLetters as JSON lines under `<dir>/rejects-*.jsonl`."""

    def __init__(self, directory: str):
        super().__init__()
        self.directory = directory

    def expand(self, pcoll):
        return (pcoll | "ToJson" >> beam.Map(DeadLetter.to_json).with_output_types(str)
                | "WriteRejects" >> beam.io.WriteToText(
                    FileSystems.join(self.directory, "rejects"), file_name_suffix=".jsonl"))
