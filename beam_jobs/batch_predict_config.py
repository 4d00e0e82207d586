"""The batch_predict job's config: the values `build_pipeline` reads, derived at launch and
split by concern (what is read, the model, where it is written, the reports). No flag bag:
a flag's default is its field's in beam_jobs/shared/args.py, named here, not repeated."""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from beam_jobs.shared.args import BatchPredictArgs
from preprocessing.contract.schema import Schema
from preprocessing.files import encodings, filesys
from preprocessing.images.checks import ImageLimits
from preprocessing.reference.slices import Slicer


@dataclasses.dataclass(frozen=True)
class Images:
    """An image model's inputs: list files (.csv / .jsonl of uris or bytes) and globs of
    image files, normalised as preprocess normalised the training images."""
    column: str                           # the model's image column
    list_files: Tuple[str, ...] = ()
    patterns: Tuple[str, ...] = ()        # re-matched in the pipeline (not in the graph)
    key_column: Optional[str] = None      # the list files' key column (--key_column)
    limits: ImageLimits = ImageLimits()


@dataclasses.dataclass(frozen=True)
class Source:
    """What the job reads and how it is cut into batches (a flag's default is its field's)."""
    input: str                            # --input ({date} resolved), as the summary names it
    patterns: Tuple[str, ...]
    rows_per_chunk: int = BatchPredictArgs.max_batch_size
    input_format: str = BatchPredictArgs.input_format
    delimiter: str = BatchPredictArgs.delimiter       # CSV inputs' field delimiter
    key: Optional[str] = None             # the key column (default: the schema's)
    passthrough: Tuple[str, ...] = ()
    block_bytes: int = filesys.megabytes(BatchPredictArgs.csv_block_mb)  # 0: record by record
    max_record_bytes: int = BatchPredictArgs.max_record_bytes
    max_record_lines: int = BatchPredictArgs.max_record_lines
    total_bytes: Optional[int] = None     # for progress ETAs
    images: Optional[Images] = None       # an image model's inputs
    encoding: str = encodings.UTF8        # CSV inputs', resolved at launch (--encoding auto)


@dataclasses.dataclass(frozen=True)
class Model:
    """The model version scored, and the checks made of it at launch."""
    model_dir: str                        # --model_dir, as the summary names it
    path: str                             # the export version used
    version: str
    max_batch_size: int = BatchPredictArgs.max_batch_size   # rows per model call
    threads: Optional[int] = None         # TensorFlow threads per op (None: its default)
    gate_record: Optional[dict] = None    # the model gate's check of the newest version
    shadow_path: Optional[str] = None     # --shadow_model_dir's version


@dataclasses.dataclass(frozen=True)
class Sink:
    """Where the run is written: staged under `staging`, published to `output` by Finalize."""
    output: str
    staging: str                          # this run's staging folder under output
    run_date: str
    output_format: str = BatchPredictArgs.output_format
    output_table: Optional[str] = None    # BigQuery PROJECT:DATASET.TABLE
    allow_empty: bool = False             # publish a run that predicted no row
    stale_staging_hours: float = BatchPredictArgs.stale_staging_hours


@dataclasses.dataclass(frozen=True)
class Reports:
    """The reports beside the predictions: metrics (labels), skew, metrics by slice."""
    label: Optional[str] = None           # --evaluate_label
    label_range: Optional[Tuple[float, float]] = None  # regression: the train labels' range
    slicer: Optional[Slicer] = None       # --slice_by with --evaluate_label
    train_statistics: Optional[dict] = None  # the export's, for the skew report
    skew_threshold: float = BatchPredictArgs.skew_threshold


@dataclasses.dataclass(frozen=True)
class BatchPredictConfig:
    """Everything `build_pipeline` reads, as derived values split by concern: `launch()`
    makes one from the command line (with I/O); a test can construct one directly."""
    schema: Schema                        # the model's raw schema
    source: Source
    model: Model
    sink: Sink
    reports: Reports = Reports()
