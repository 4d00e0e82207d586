"""The preprocess job's config: the values `build_pipeline` reads, derived at launch and
split by concern (the rows read and split, the transform, what is written). No flag bag: a
flag's default is its field's in beam_jobs/shared/args.py."""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Tuple

from beam_jobs.shared.args import PreprocessArgs
from preprocessing.contract.schema import Schema
from preprocessing.contract.split import parse_fractions
from preprocessing.files import encodings, filesys
from preprocessing.images.checks import ImageLimits

A = PreprocessArgs  # the flags' declarations: their defaults are named, not repeated


@dataclasses.dataclass(frozen=True)
class ImageSplits:
    """Images to split: a labels CSV of uri,label lines, or one folder of images per class."""
    labels_csv: bool                      # else folders: `patterns` match <class>/<image>
    classes: Tuple[str, ...] = ()         # allowed labels (none: any non-empty label)
    labels_header: Optional[tuple] = None
    limits: ImageLimits = ImageLimits()


@dataclasses.dataclass(frozen=True)
class PreprocessSource:
    """The rows read and how they are split (by hashing the key)."""
    input: str                            # --input, as the summary names it
    patterns: Tuple[str, ...]             # CSV inputs, or the image source's pattern
    fractions: Tuple[float, ...] = tuple(parse_fractions(A.split))
    delimiter: str = A.delimiter
    rows_per_batch: int = A.rows_per_batch
    block_bytes: int = filesys.megabytes(A.csv_block_mb)  # 0: record by record
    max_record_bytes: int = A.max_record_bytes
    max_record_lines: int = A.max_record_lines
    total_bytes: Optional[int] = None     # for progress ETAs
    images: Optional[ImageSplits] = None  # --format images
    encoding: str = encodings.UTF8        # CSV's, resolved at launch (--encoding auto)


@dataclasses.dataclass(frozen=True)
class PreprocessSink:
    """What is written: staged under `staging`, published to `output` by Finalize."""
    output: str
    staging: str                          # this run's staging folder under output
    num_shards: int = A.num_shards
    gzip_level: int = A.gzip_level
    golden_rows: int = A.golden_rows
    stage_locally: bool = False           # write the transform locally, then copy (gs://)
    stale_staging_hours: float = A.stale_staging_hours


@dataclasses.dataclass(frozen=True)
class PreprocessConfig:
    """Everything `build_pipeline` reads: `launch()` makes one from the command line (with
    I/O); a test can construct one directly."""
    schema: Schema
    preprocessing_fn: Callable
    tft_temp_dir: str                     # tf.transform's scratch, removed after the run
    source: PreprocessSource
    sink: PreprocessSink
    columns_report: Optional[list] = None  # what schema inference decided, per column
    runner: str = "LocalRunner"           # named in the summary
