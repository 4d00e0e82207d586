"""Parsing records against the schema: CSV records and headers (csv_records.py), rows
(row_parser.py, the CSV/JSON/tf.Example record parser), columns in Arrow's kernels, the
column-wise CSV block parser, and rows as Arrow RecordBatches for tf.transform.
"""
