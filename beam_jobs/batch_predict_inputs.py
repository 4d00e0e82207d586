"""batch_predict's launch checks of its inputs: a CSV input's encoding and header, an image
model's inputs. Each refuses in one line (errors.JobError) what the pipeline could only
dead-letter row by row."""
from __future__ import annotations

from beam_jobs.batch_predict_config import Images
from beam_jobs.shared import errors
from beam_jobs.shared.args import BatchPredictArgs
from inference.inputs import rows
from preprocessing.accounting import counting
from preprocessing.files import encodings, filesys
from preprocessing.files.records import detect_format
from preprocessing.images.checks import ImageLimits
from preprocessing.images.sources import LIST_EXTENSIONS
from preprocessing.parsing import csv_records

JOB = "batch_predict"


def checked_csv_encoding(o: BatchPredictArgs, files, schema, passthrough) -> str:
    """--encoding, `auto` resolved on the head of the first readable CSV input, whose header
    must hold what the job reads (rows.csv_header_problem)."""
    csv = [f for f in files if filesys.is_readable_input(f) and (
        o.input_format == "csv" or o.input_format == "auto" and detect_format(f) == "csv")]
    if not csv:
        return encodings.resolve(o.encoding, b"")
    try:
        head = filesys.head_bytes(csv[0])
        encoding = encodings.resolve(o.encoding, head)
    except Exception as e:
        raise errors.JobError(JOB, f"cannot read {csv[0]}: {str(e).splitlines()[0]}")
    read_as = encodings.describe(o.encoding, encoding)
    if read_as:
        counting.emit(f"{JOB}: {read_as}")
    text = filesys.decode_head(head, encoding)
    first = text.split("\n", 1)[0].rstrip("\r")
    try:
        header = csv_records.parse_header(first, o.delimiter, csv[0]) if first else None
    except ValueError:  # the pipeline dead-letters the file's rows with the reason
        header = None
    problem = header and rows.csv_header_problem(
        schema, header, passthrough, [o.key_column, o.evaluate_label], text, o.delimiter)
    if problem:
        raise errors.JobError(JOB, f"the header of {csv[0]} {problem}")
    return encoding


def image_inputs(o: BatchPredictArgs, column: str, files, patterns, per_pattern,
                  passthrough) -> Images:
    """An image model: --input names image files (a glob, a folder of class folders) and/or
    list files (.csv with a `uri` column, .jsonl objects with a uri or base64 bytes). A glob
    of images may be huge: its paths are not embedded in the job graph."""
    if passthrough:
        raise errors.JobError(JOB, "--passthrough_columns applies to tabular models only")
    list_files = tuple(f for f in files if f.lower().endswith(LIST_EXTENSIONS))
    image_patterns = tuple(p for p, found in zip(patterns, per_pattern)
                           if any(not f.lower().endswith(LIST_EXTENSIONS) for f in found))
    return Images(column, list_files, image_patterns, o.key_column, ImageLimits.of(o))
