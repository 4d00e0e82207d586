"""Why a record is rejected, and the one dead-letter record every job writes for it.

`Reject(reason, detail)` is the one error type parsing (CSV, JSON, tf.Example), image checks
and the model raise; `REASONS` is the one registry of reasons (a reason not listed here is a
programming error, caught by a test). Every job writes a rejected record as the same JSON
object, `dead_letter(...)`: job, source, line (or position), raw, reason, detail, plus
job-specific extras (streaming adds the message id, latency and event time).
"""
from __future__ import annotations

import json
from typing import Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms import window

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
    "missing_column": "the file's header lacks a required column",
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


def dead_letter_record(job: str, source: str, line, raw, reason: str, detail: str,
                       **extra) -> dict:
    """The dead-letter object: where the record came from, what it was, and why."""
    if reason not in REASONS:
        raise ValueError(f"unknown reject reason {reason!r}: add it to REASONS")
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    rec = {"job": job, "source": source, "line": line, "raw": raw, "reason": reason,
           "detail": detail}
    rec.update(extra)
    return rec


def dead_letter(job: str, source: str, line: Optional[int], raw, reason: str, detail: str,
                **extra) -> str:
    """`dead_letter_record` as one JSON line (what the batch jobs write)."""
    return json.dumps(dead_letter_record(job, source, line, raw, reason, detail, **extra),
                      ensure_ascii=False)


class DeadLetters:
    """The one way a DoFn rejects a record: counts it under the metric `rejected_<reason>`
    (namespace `job`) and returns its dead letter on the `rejects` output, as a JSON line
    (`as_json`, what the batch jobs write) or the record itself (streaming, which adds
    extras and an event `timestamp`)."""

    def __init__(self, job: str, as_json: bool = True):
        self.job, self.as_json = job, as_json
        self._counters = {}  # reason -> Counter, made on first use

    def __call__(self, source: str, line, raw, reason: str, detail: str, timestamp=None,
                 **extra) -> beam.pvalue.TaggedOutput:
        counter = self._counters.get(reason)
        if counter is None:
            counter = self._counters[reason] = Metrics.counter(self.job, f"rejected_{reason}")
        counter.inc()
        make = dead_letter if self.as_json else dead_letter_record
        value = make(self.job, source, line, raw, reason, detail, **extra)
        if timestamp is not None:
            value = window.TimestampedValue(value, timestamp)
        return beam.pvalue.TaggedOutput("rejects", value)

    def of(self, source: str, line, raw, e: Reject, **kw) -> beam.pvalue.TaggedOutput:
        """The dead letter of a raised Reject."""
        return self(source, line, raw, e.reason, e.detail, **kw)


class WriteDeadLetters(beam.PTransform):
    """Writes dead-letter JSON lines under `<dir>/rejects-*.jsonl`."""

    def __init__(self, directory: str):
        super().__init__()
        self.directory = directory

    def expand(self, pcoll):
        return pcoll | "WriteRejects" >> beam.io.WriteToText(
            FileSystems.join(self.directory, "rejects"), file_name_suffix=".jsonl")
