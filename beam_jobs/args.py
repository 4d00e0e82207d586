"""The four jobs' typed arguments: one frozen dataclass per job, field for field the flags of
its PipelineOptions classes, with their defaults; the flags jobs share are the shared bases
(IOArgs, ModelArgs, ImageArgs). `parse_args` in each job fills one from the command line and
checks it without I/O; tests/beam_jobs/test_args.py fails if a flag and its field part."""
from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class IOArgs:
    """common_options.IOOptions: input, output and the bounds of a record."""
    input: Optional[str] = None
    output: Optional[str] = None
    key_column: Optional[str] = None
    max_record_bytes: int = 1 << 20
    max_record_lines: int = 1000
    csv_block_mb: float = 2.0
    stale_staging_hours: float = 24.0
    log_level: str = "WARNING"
    verbosity: str = "quiet"


@dataclasses.dataclass(frozen=True)
class ModelArgs:
    """common_options.ModelOptions: the model, its batches, gate, shadow, skew report, table."""
    model_dir: Optional[str] = None
    min_batch_size: int = 32
    max_batch_size: int = 1024
    golden_set: Optional[str] = None
    max_metric_regression: float = 0.05
    slice_by: Optional[list] = None
    max_slice_regression: Optional[float] = None
    model_gate: str = "on"
    shadow_model_dir: Optional[str] = None
    skew_report: str = "on"
    skew_threshold: float = 0.1
    output_table: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class ImageArgs:
    """common_options.ImageOptions: how images are normalised and bounded."""
    max_side: int = 256
    jpeg_quality: int = 90
    max_pixels: int = 50_000_000
    max_image_bytes: int = 64 << 20


@dataclasses.dataclass(frozen=True)
class PreprocessArgs(ImageArgs, IOArgs):
    """`python -m beam_jobs.preprocess`: preprocess.PreprocessOptions and the shared flags."""
    format: str = "csv"
    classes: str = ""
    schema_spec: Optional[str] = None
    label_column: Optional[str] = None
    task: str = "auto"
    module_file: Optional[str] = None
    split: str = "0.9,0.1"
    num_shards: int = 0
    rows_per_batch: int = 2000
    gzip_level: int = 1
    delimiter: str = ","
    infer_scan_mb: int = 0
    max_columns: int = 2000
    golden_rows: int = 500
    tft_temp_dir: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class BatchPredictArgs(ImageArgs, ModelArgs, IOArgs):
    """`python -m beam_jobs.batch_predict`: batch_predict.BatchPredictOptions and the shared flags."""
    input_format: str = "auto"
    output_format: str = "jsonl"
    run_date: Optional[str] = None
    passthrough_columns: str = ""
    evaluate_label: Optional[str] = None
    rows_per_chunk: Optional[int] = None
    allow_empty_output: str = "off"
    model_threads: int = 0


@dataclasses.dataclass(frozen=True)
class StreamPredictArgs(ImageArgs, ModelArgs):
    """`python -m beam_jobs.stream_predict`: stream_predict.StreamPredictOptions and the shared flags."""
    input_subscription: Optional[str] = None
    input_topic: Optional[str] = None
    replay: Optional[str] = None
    replay_rate: float = 100.0
    output_topic: Optional[str] = None
    output_dir: Optional[str] = None
    dead_letter_topic: Optional[str] = None
    dead_letter_dir: Optional[str] = None
    monitoring_topic: Optional[str] = None
    monitoring_dir: Optional[str] = None
    window_secs: float = 60.0
    allowed_lateness_secs: float = 0.0
    max_batch_duration_secs: Optional[float] = None
    max_message_bytes: int = 10 << 20
    allowed_uri_prefixes: str = ""
    uri_read_timeout_secs: float = 30.0
    model_refresh_secs: float = 60.0
    id_attribute: str = "id"
    timestamp_attribute: Optional[str] = None
    max_outage_secs: float = 300.0


@dataclasses.dataclass(frozen=True)
class RedriveArgs(ModelArgs, IOArgs):
    """`python -m beam_jobs.redrive`: redrive.RedriveOptions and the shared flags."""
    rejects: Optional[str] = None
