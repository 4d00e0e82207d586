"""Where predictions go besides files: the output columns (CSV) and the BigQuery table, one
definition for the batch and the streaming job."""
from __future__ import annotations

import csv
import io
import json
from typing import List, Optional, Sequence

import apache_beam as beam

from inference.outputs import bigquery_client
from preprocessing.accounting import rejects


def prediction_columns(task: str, key: str = "key", passthrough: Sequence[str] = (),
                       label: bool = False, extra: Sequence[str] = ()) -> List[str]:
    """A prediction record's fields in output order: the key, the model's outputs (regression:
    prediction; classification: class, class_id, probabilities), model_version, passthrough
    columns, the label (batch --evaluate_label), then `extra` (streaming: latency, event time)."""
    outputs = ["prediction"] if task == "regression" else ["class", "class_id", "probabilities"]
    return ([key] + outputs + ["model_version"] + list(passthrough)
            + (["label"] if label else []) + list(extra))


_BQ_TYPES = {"prediction": "FLOAT", "class_id": "INTEGER", "probabilities": "FLOAT",
             "latency_ms": "FLOAT", "event_time": "FLOAT"}


def bigquery_fields(columns: Sequence[str]) -> List[dict]:
    """BigQuery schema fields for `prediction_columns(...)` (passthrough and label as STRING)."""
    return [{"name": c, "type": _BQ_TYPES.get(c, "STRING"),
             **({"mode": "REPEATED"} if c == "probabilities" else {})} for c in columns]


def csv_line(rec: dict, columns: Sequence[str]) -> str:
    """One record as a CSV line of `columns` (lists and objects as JSON, None as empty)."""
    buf = io.StringIO()
    values = []
    for c in columns:
        v = rec.get(c)
        values.append(json.dumps(v) if isinstance(v, (list, dict)) else ("" if v is None else v))
    # RFC 4180: a field holding a comma, quote, CR or LF is quoted (the csv module quotes
    # only what holds the delimiter, the quote or its line terminator's characters).
    csv.writer(buf, lineterminator="\r\n").writerow(values)
    return buf.getvalue()[:-2]


class WaitForLoadJobs(beam.DoFn):
    """Waits until each BigQuery load job is done and fails the run if one failed. Beam
    starts the load jobs of a direct (one-partition) write without waiting for them, so
    without this a job whose load was refused (a schema or type mismatch) still succeeded."""

    def __init__(self, client=None, poll_secs: float = 2.0, timeout_secs: float = 6 * 3600):
        self.client, self.poll_secs, self.timeout_secs = client, poll_secs, timeout_secs

    def setup(self):
        from apache_beam.io.gcp.bigquery_tools import BigQueryWrapper
        self.bq = BigQueryWrapper(client=self.client)

    def process(self, destination_and_job):
        destination, job = destination_and_job
        self.bq.wait_for_bq_job(job, sleep_duration_sec=self.poll_secs,
                                max_retries=max(1, int(self.timeout_secs / self.poll_secs)))
        yield f"{destination} {job.jobId}"


class WriteBigQuery(beam.PTransform):
    """Predictions -> BigQuery. Batch (`run_date` given): file loads into the date's
    day partition `table$YYYYMMDD`, truncated, so a re-run of a date replaces it, and the
    output (one line per finished load job) is complete only once the loads are done.
    `partitioned=False` truncates the whole table instead (for stores without partition
    decorators, such as the local emulator). Streaming: streaming inserts, appended; rows
    BigQuery refuses come out as the `failed` output (retried only on transient errors, so
    one bad row cannot stall the stream). `client`: Beam's `test_client`; by default one on
    $BIGQUERY_EMULATOR_HOST when that is set."""

    def __init__(self, table: str, columns: Sequence[str], run_date: Optional[str] = None,
                 partitioned: bool = True, client=None):
        super().__init__()
        bigquery_client.parse_table(table)
        self.table, self.columns, self.run_date = table, list(columns), run_date
        self.partitioned = partitioned
        self.client = client if client is not None else bigquery_client.emulator_client(table)

    def expand(self, records):
        columns, fields = self.columns, bigquery_fields(self.columns)
        strings = [f["name"] for f in fields if f["type"] == "STRING"]

        def to_row(rec) -> dict:  # the dict Beam's BigQuery sink takes
            record = rec.to_dict()
            row = {k: record.get(k) for k in columns}
            for c in strings:
                row[c] = None if row[c] is None else str(row[c])
            return row

        rows = records | "ToRow" >> beam.Map(to_row)
        disposition = beam.io.BigQueryDisposition
        if self.run_date:
            target = (bigquery_client.partition(self.table, self.run_date)
                      if self.partitioned else self.table)
            result = rows | "Write" >> beam.io.WriteToBigQuery(
                target, schema={"fields": fields},
                create_disposition=disposition.CREATE_IF_NEEDED,
                write_disposition=disposition.WRITE_TRUNCATE,
                method=beam.io.WriteToBigQuery.Method.FILE_LOADS,
                additional_bq_parameters={"timePartitioning": {"type": "DAY"}},
                test_client=self.client)
            return (result.destination_load_jobid_pairs
                    | "WaitForLoadJobs" >> beam.ParDo(WaitForLoadJobs(self.client)))
        from apache_beam.io.gcp.bigquery_tools import RetryStrategy
        result = rows | "Write" >> beam.io.WriteToBigQuery(
            self.table, schema={"fields": fields},
            create_disposition=disposition.CREATE_IF_NEEDED,
            write_disposition=disposition.WRITE_APPEND,
            method=beam.io.WriteToBigQuery.Method.STREAMING_INSERTS,
            insert_retry_strategy=RetryStrategy.RETRY_ON_TRANSIENT_ERROR,
            test_client=self.client)
        return result.failed_rows_with_errors


class InsertFailures(beam.DoFn):
    """(destination, row, errors) that streaming inserts could not write -> dead letters
    (`bigquery_insert_refused`), so a refused row is counted and kept, not lost."""

    def __init__(self, job: str):
        self.job = job

    def setup(self):
        self.dead = rejects.DeadLetters(self.job)

    def process(self, failed):
        destination, row, errors = failed
        yield self.dead(str(destination), None, json.dumps(row, default=str),
                        "bigquery_insert_refused", str(errors)[:2000], id=row.get("id")).value
