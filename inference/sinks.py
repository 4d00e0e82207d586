"""Where predictions go besides files: the output columns (CSV) and the BigQuery table, one
definition for the batch and the streaming job."""
from __future__ import annotations

import csv
import io
import json
from typing import List, Optional, Sequence

import apache_beam as beam


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


class WriteBigQuery(beam.PTransform):
    """Prediction records -> BigQuery. Batch (`run_date` given): the date's day partition
    `table$YYYYMMDD`, truncated, so a re-run of a date replaces it. Streaming: appended with
    streaming inserts."""

    def __init__(self, table: str, columns: Sequence[str], run_date: Optional[str] = None):
        super().__init__()
        self.table, self.columns, self.run_date = table, list(columns), run_date

    def expand(self, records):
        columns, fields = self.columns, bigquery_fields(self.columns)
        strings = [f["name"] for f in fields if f["type"] == "STRING"]

        def to_row(rec):
            row = {k: rec.get(k) for k in columns}
            for c in strings:
                row[c] = None if row[c] is None else str(row[c])
            return row

        rows = records | "ToRow" >> beam.Map(to_row)
        if self.run_date:
            return rows | "Write" >> beam.io.WriteToBigQuery(
                f"{self.table}${self.run_date.replace('-', '')}", schema={"fields": fields},
                create_disposition=beam.io.BigQueryDisposition.CREATE_IF_NEEDED,
                write_disposition=beam.io.BigQueryDisposition.WRITE_TRUNCATE,
                additional_bq_parameters={"timePartitioning": {"type": "DAY"}})
        return rows | "Write" >> beam.io.WriteToBigQuery(
            self.table, schema={"fields": fields},
            create_disposition=beam.io.BigQueryDisposition.CREATE_IF_NEEDED,
            write_disposition=beam.io.BigQueryDisposition.WRITE_APPEND,
            method=beam.io.WriteToBigQuery.Method.STREAMING_INSERTS)
