"""The preprocess job's launch-time resolution: what only I/O can tell (fails fast, in one
line, before any pipeline runs): the input files, the schema from a spec or inferred from
the data, the preprocessing_fn, and an output that can be written."""
from __future__ import annotations

import logging

from apache_beam.io.filesystems import FileSystems

from beam_jobs.shared import cli, errors
from beam_jobs.shared.args import PreprocessArgs
from preprocessing.accounting import counting
from preprocessing.contract.schema import Schema, SchemaError
from preprocessing.files import encodings, filesys
from preprocessing.parsing import csv_records
from preprocessing.schema_inference.column_stats import short
from preprocessing.schema_inference.infer import (
    DECIMAL_COMMA_NOTE,
    image_schema,
    infer_from_profile,
    parse_csv_sample,
    report,
)
from preprocessing.schema_inference.profile import profile_csv

JOB = "preprocess"


class InputsFound:
    """What only I/O can tell about checked arguments: the input files, the schema from a
    spec or the data, the preprocessing_fn, an output that can be written. The job's
    `launch()` turns it into the plain PreprocessConfig the pipeline is built from."""

    def __init__(self, o: PreprocessArgs):
        self.args = o
        self.output = o.output
        self.columns_report = None  # what schema inference decided, per column
        self.input_bytes = None
        self.image_mode, self.classes, self.labels_header = None, (), None  # images only
        self.encoding = encodings.UTF8  # the CSV files' (--encoding, resolved here)
        self.head = ""  # the first file's first MiB, as text
        if o.format == "images":
            self._init_images(o)
            return
        self.patterns = filesys.split_patterns(o.input)
        self.files = self._match(o.input, f"no files match --input {o.input}")
        self.input_bytes = filesys.total_size(self.patterns)
        # The header and sample come from the first readable file (a device or FIFO in the
        # glob is the pipeline's unreadable_file dead letter, not a launch failure).
        first = next((f for f in self.files if filesys.is_readable_input(f)), self.files[0])
        try:
            head = filesys.head_bytes(first)
            self.encoding = encodings.resolve(o.encoding, head)
            self.head = filesys.decode_head(head, self.encoding)
            header, _ = parse_csv_sample(self.head, o.delimiter, 0)
        except SchemaError as e:
            raise errors.JobError(JOB, f"{first}: {e}")
        except Exception as e:
            raise errors.JobError(JOB, f"cannot read {first}: {str(e).splitlines()[0]}")
        read_as = encodings.describe(o.encoding, self.encoding)
        if read_as:
            counting.emit(f"{JOB}: {read_as}")
        self.schema = self._resolve_schema(o, header)
        self.preprocessing_fn = self._resolve_preprocessing_fn(o)
        cli.check_output_apart(JOB, self.patterns, self.output)
        cli.check_writable(JOB, self.output)

    def _init_images(self, o):
        from preprocessing.features.transform import make_preprocessing_fn
        self.schema = image_schema()
        self.preprocessing_fn = make_preprocessing_fn(self.schema)
        self.classes = tuple(c.strip() for c in o.classes.split(",") if c.strip())
        src = o.input.rstrip("/")
        if src.lower().endswith(".csv"):
            self.image_mode = "labels_csv"
            self.patterns = [src]
            self.files = self._match(src, f"no labels CSV at --input {src}")
            try:
                header = parse_csv_sample(filesys.read_head(self.files[0]), max_rows=1)[0]
            except SchemaError as e:
                raise errors.JobError(JOB, f"{self.files[0]}: {e}")
            # A header is recognised by its names; without one (tensorflow/tpu's
            # jpeg_to_tf_record.py format) every line is `path,label`.
            self.labels_header = None
            if not {"uri", "label"} <= set(header):
                if len(header) != 2:
                    raise errors.JobError(
                        JOB, f"{self.files[0]}: a labels CSV is `uri,label` lines, with or "
                             f"without a header naming uri and label; found {header}")
                self.labels_header = ("uri", "label")
        else:
            self.image_mode = "folders"
            # A glob of image files (photos/*/*.jpg) is read as it matches: each file's class
            # is its parent folder's name, as under a folder of class folders.
            globbed = any(c in src for c in "*?[")
            self.patterns = [src if globbed else FileSystems.join(src, "*", "*")]
            self.files = self._match(src, f"no image files match --input {src}" if globbed
                                     else f"no <class>/<image> files under --input {src}")
            self.labels_header = None
        cli.check_output_apart(JOB, self.patterns, self.output)
        cli.check_writable(JOB, self.output)

    def _match(self, shown: str, none_message: str):
        """The files matching self.patterns; fails fast when listing fails or finds none."""
        try:
            files = filesys.match_files(self.patterns)
        except Exception as e:
            raise errors.JobError(JOB, f"cannot list --input {shown}: {str(e).splitlines()[0]}")
        if not files:
            raise errors.JobError(JOB, none_message)
        return files

    def _profile(self, o):
        """Statistics of every column over the whole input (or --infer_scan_mb of it)."""
        readable = [f for f in self.files if filesys.is_readable_input(f)]
        progress = counting.Progress.of(JOB, "profiled for schema inference")
        prof = profile_csv([(f, lambda f=f: encodings.reader(filesys.open_input(f), self.encoding))
                            for f in readable],
                           o.delimiter, (o.infer_scan_mb << 20) or None, progress.add,
                           (o.max_record_bytes, o.max_record_lines))
        progress.show()
        if prof.note:
            logging.warning("preprocess: schema inference %s", prof.note)
        if prof.not_utf8:
            logging.warning("preprocess: schema inference left out %s row(s) that are not UTF-8 "
                            "text; the pipeline dead-letters them (bad_encoding): save the "
                            "file as UTF-8, or name its encoding (--encoding), to keep "
                            "them", f"{prof.not_utf8:,}")
        commas = [name for name, column in prof.columns.items() if column.unread_commas]
        if commas:
            logging.warning("preprocess: column(s) %s: %s", ", ".join(map(repr, commas)),
                            DECIMAL_COMMA_NOTE)
        if prof.too_large:
            logging.warning("preprocess: schema inference left out %s row(s) over "
                            "--max_record_bytes %s; the pipeline dead-letters them "
                            "(record_too_large)", f"{prof.too_large:,}", o.max_record_bytes)
        return prof

    def _resolve_schema(self, o, header) -> Schema:
        header = [h.strip() for h in header]
        try:
            if o.schema_spec:
                schema = Schema.load(o.schema_spec)
                if o.label_column and o.label_column != schema.label:
                    raise SchemaError(f"--label_column {o.label_column} differs from the "
                                      f"spec's label {schema.label}")
                if o.task != "auto" and o.task != schema.task:
                    raise SchemaError(f"--task {o.task} differs from the spec's task "
                                      f"{schema.task}")
                if o.key_column and o.key_column != schema.key:
                    schema = schema.with_overrides(key=o.key_column)
            else:
                if len(header) > o.max_columns:  # before profiling a column of each
                    raise SchemaError(f"the header of {self.files[0]} has {len(header):,} "
                                      f"columns, over --max_columns {o.max_columns:,}: raise "
                                      f"it to infer a schema over them all, or give a "
                                      f"--schema_spec of the columns to use")
                if o.label_column not in header:  # before reading the whole input
                    below = csv_records.near_names_hint([o.label_column], header) or \
                        csv_records.header_below_hint(self.head, o.label_column, o.delimiter)
                    raise SchemaError(f"label column '{o.label_column}' is not in the header "
                                      f"{describe_header(header)}{below}")
                prof = self._profile(o)
                schema, decisions = infer_from_profile(prof, o.label_column, o.key_column,
                                                       None if o.task == "auto" else o.task)
                self.columns_report = report(prof, decisions, schema)
                if not schema.serving_columns() and not o.module_file:
                    why = "; ".join(f"{n}: {d.why}" for n, d in decisions.items()
                                    if d.role != "label")
                    raise SchemaError(f"no model inputs: every column but the label is an "
                                      f"identifier or empty ({why[:300]}); give a "
                                      f"--schema_spec that keeps one as a feature")
                for r in self.columns_report:
                    counting.emit(f"{JOB}: column {r['column']!r}: {r['role']}, {r['type']}, "
                                 f"{r['transform']} ({r['why']}; missing "
                                 f"{r['missing_rate']:.1%}, distinct {r['distinct']})")
                logging.info("Inferred schema (save it, edit it, pass it as --schema_spec):\n%s",
                             schema.dumps())
        except SchemaError as e:
            raise errors.JobError(JOB, str(e))
        if schema.label not in header:
            below = csv_records.near_names_hint([schema.label], header) or \
                csv_records.header_below_hint(self.head, schema.label, o.delimiter)
            raise errors.JobError(JOB, f"label column '{schema.label}' is not in the header of "
                                       f"{self.files[0]}: {describe_header(header)}{below}")
        missing = [c.name for c in schema.columns if c.required and c.name not in header]
        if missing:
            raise errors.JobError(JOB, f"columns {missing} of the spec are not in the header of "
                                       f"{self.files[0]}: {describe_header(header)}"
                                       f"{csv_records.near_names_hint(missing, header)}")
        return schema

    def _resolve_preprocessing_fn(self, o):
        from preprocessing.features.transform import load_module_preprocessing_fn, make_preprocessing_fn
        if not o.module_file:
            return make_preprocessing_fn(self.schema)
        try:
            return load_module_preprocessing_fn(o.module_file)
        except Exception as e:
            raise errors.JobError(JOB, f"--module_file {o.module_file}: {e}")


def describe_header(header) -> str:
    """A header for a one-line error: its first names, each cut short (a file read with the
    wrong delimiter has one name as long as its first line), and the delimiter it seems to
    have when it has one column."""
    names = [short(h) for h in header[:20]]
    return f"{names}" + (f" and {len(header) - 20:,} more" if len(header) > 20 else "") + \
        csv_records.delimiter_hint(header)
