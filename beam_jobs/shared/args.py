"""The four jobs' flags, each declared once: a field of a frozen dataclass with its default,
help, choices and range (preprocessing/flags.py). The PipelineOptions classes Beam parses
are made from these fields (common_options.options_class), `--help` shows them, and
`flags.problem` checks their ranges. Shared flags are the bases (IOArgs, ModelArgs,
ImageArgs); a job's own flags are the fields its class declares."""
from __future__ import annotations

import dataclasses
from typing import Optional

from beam_jobs.shared.local_streaming import MAX_OUTAGE_SECS
from beam_jobs.shared.publish import STALE_STAGING_HOURS
from inference.model.gate import DEFAULT_MAX_METRIC_REGRESSION
from inference.skew import DEFAULT_THRESHOLD as DEFAULT_SKEW_THRESHOLD
from inference.streaming import MAX_MESSAGE_BYTES
from preprocessing import quiet
from preprocessing.files import encodings
from preprocessing.files.tfrecords import GZIP_LEVEL
from preprocessing.flags import above, at_least, flag, within
from preprocessing.images.checks import ImageLimits
from preprocessing.reference import golden

ON_OFF = ("on", "off")


@dataclasses.dataclass(frozen=True)
class IOArgs:
    """Flags every batch job shares: input, output and the bounds of a record."""
    input: Optional[str] = flag(help="Input path or glob (local or gs://); comma-separate "
                                     "several. Required.")
    output: Optional[str] = flag(help="Output directory (local or gs://). Required. What an "
                                      "earlier run wrote there is replaced when this run "
                                      "succeeds (never before).")
    key_column: Optional[str] = flag(help="Column identifying a row (default: the schema's key).")
    max_record_bytes: int = flag(
        1 << 20, "CSV/JSON lines: a longer line is rejected (record_too_large) and a quoted "
                 "field may span at most this many bytes.", check=at_least(1))
    max_record_lines: int = flag(
        1000, "CSV: a quoted field may span at most this many lines; past that its first line "
              "is rejected (unterminated_quote) and reading resumes on the next line.",
        check=at_least(1))
    csv_block_mb: float = flag(
        2.0, "CSV files are read in blocks of this many MB and parsed column-wise with Arrow "
             "(the same rows, values and rejects as record by record); 0: record by record.",
        check=at_least(0))
    stale_staging_hours: float = flag(
        STALE_STAGING_HOURS, "Batch jobs: a `_staging-*` folder under --output whose run "
        "started longer ago than this is a killed run's and is removed when a run finishes; a "
        "younger one may be a live run's.", check=at_least(0))
    log_level: str = flag("WARNING", "Log level (default WARNING: progress lines and the "
                                     "summary only; INFO shows Beam's own log).",
                          choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    verbosity: str = quiet.verbosity_flag()


@dataclasses.dataclass(frozen=True)
class CsvArgs:
    """The CSV inputs' field delimiter: preprocess and batch_predict read the same files."""
    # A tab is hard to type in a shell or a scheduler's form: `\t` and `tab` name it too.
    delimiter: str = flag(",", "CSV field delimiter, one character (`tab` or `\\t` for a tab); "
                               "another than a comma: CSV read record by record.",
                          type=lambda v: {"tab": "\t", "\\t": "\t"}.get(v, v),
                          check=(lambda v: len(v) == 1, "one character"))
    encoding: str = flag(
        encodings.AUTO, "CSV inputs' text encoding: utf-8, or a single-byte one that keeps "
        "ASCII (cp1252, latin-1, iso-8859-15, ...), read as UTF-8. auto: UTF-8, or cp1252 "
        "where the first file's head is not UTF-8 and holds no UTF-8 text outside ASCII.",
        check=(encodings.readable, "auto, utf-8 or a single-byte encoding that keeps ASCII "
                                   "(cp1252, latin-1, ...)"))


@dataclasses.dataclass(frozen=True)
class ModelArgs:
    """Flags of the jobs that run the exported model: batches, gate, shadow, skew, table."""
    model_dir: Optional[str] = flag(help="An export dir, or the base holding numeric versions "
                                         "(the newest is used). Required.")
    min_batch_size: int = flag(32, "Smallest batch RunInference forms.", check=at_least(1))
    max_batch_size: int = flag(1024, "Largest batch RunInference forms.", check=at_least(1))
    golden_set: Optional[str] = flag(
        help="Labelled raw rows (TFRecord of raw tf.Examples, or CSV with a header) a newer "
             "model version must predict before it serves. Default: the golden set each "
             "export carries (training copies preprocess's eval sample).")
    max_metric_regression: float = flag(
        DEFAULT_MAX_METRIC_REGRESSION, "How much worse than the serving version a newer one "
        "may do on the golden set: RMSE relatively (0.05 = 5%% higher), accuracy absolutely "
        "(0.05 = 5 points lower).", check=(lambda v: 0 <= v < 10, ">= 0 (and < 10)"))
    slice_by: Optional[list] = flag(
        help="COL[,COL...] (repeatable): metrics by slice of these columns (a number by its "
             "train split's quintiles), with --evaluate_label or a labelled stream, and in "
             "the model gate.", action="append")
    max_slice_regression: Optional[float] = flag(
        help="The gate also refuses a newer version when a --slice_by slice with at least 30 "
             "golden rows is worse than the serving version's by more than this (as "
             "--max_metric_regression). Default: off.", type=float,
        check=(lambda v: 0 <= v < 10, ">= 0 (and < 10)"))
    model_gate: str = flag("on", "off: serve a newer version without checking it on a golden "
                                 "set.", choices=ON_OFF)
    shadow_model_dir: Optional[str] = flag(
        help="A second model (export or base of versions) that scores the same rows; its "
             "outputs never reach the prediction sinks, only a comparison (batch: "
             "summary.json's `shadow`; streaming: a monitoring record per window).")
    skew_report: str = flag("on", "Compare what is served with the train split's statistics "
                                  "(the export's): batch, summary.json's `skew`; streaming, a "
                                  "monitoring record per window.", choices=ON_OFF)
    skew_threshold: float = flag(
        DEFAULT_SKEW_THRESHOLD, "A feature is flagged past this distance (Jensen-Shannon for "
        "numbers, L-infinity for strings).", check=(lambda v: 0 < v <= 1, "in (0, 1]"))
    output_table: Optional[str] = flag(
        help="Also write predictions to BigQuery PROJECT:DATASET.TABLE (batch: the run date's "
             "day partition, replaced on a re-run; streaming: appended).")


@dataclasses.dataclass(frozen=True)
class ImageArgs:
    """Image normalisation: preprocess applies it to training images, and the prediction jobs
    the same to the images they score (no train/serve skew)."""
    max_side: int = flag(ImageLimits.max_side, "images: longest side after resizing (aspect "
                                               "kept).", check=at_least(8))
    jpeg_quality: int = flag(ImageLimits.jpeg_quality, "images: JPEG quality of the "
                                                       "re-encoded images.", check=within(1, 100))
    max_pixels: int = flag(ImageLimits.max_pixels, "images: larger images are rejected "
                                                   "(decompression bombs).", check=at_least(1))
    max_image_bytes: int = flag(ImageLimits.max_image_bytes, "images: larger files are "
                                "rejected (image_too_large); only this much of a file is ever "
                                "read.", check=at_least(1))


@dataclasses.dataclass(frozen=True)
class PreprocessArgs(ImageArgs, CsvArgs, IOArgs):
    """`python -m beam_jobs.preprocess`: --input (CSV), --output and --key_column (hashed for
    the split; default: the spec's key, a column named key/id, or the whole record) are
    IOArgs'."""
    format: str = flag("csv", "csv: raw CSV rows. images: --input is a labels CSV of uri,label "
                              "lines (relative uris resolve against its folder) or a folder "
                              "with one sub-folder of images per class.",
                       choices=("csv", "images"))
    classes: str = flag("", "images: comma-separated allowed labels; others are rejected as "
                            "unknown_label (default: any non-empty label).")
    schema_spec: Optional[str] = flag(help="Declarative spec file (JSON or YAML). Without it "
                                           "the schema is inferred from the header and a sample.")
    label_column: Optional[str] = flag(help="Target column (needed when no spec is given). Not "
                                            "--label: Beam's Dataflow options own that flag "
                                            "(job labels).")
    task: str = flag("auto", "What the label is (schema inference): auto guesses it from the "
                             "values (text or a few integer ids: classification; other "
                             "numbers: regression) and logs why.",
                     choices=("auto", "regression", "classification"))
    module_file: Optional[str] = flag(help="TFX-style module file whose preprocessing_fn "
                                           "replaces the one generated from the schema.")
    split: str = flag("0.9,0.1", "train,eval[,test] fractions; the default has no test split "
                                 "(training.tune shows its best trial on one: 0.8,0.1,0.1).")
    num_shards: int = flag(0, "TFRecord shards per split; 0 lets the runner decide.",
                           check=at_least(0))
    rows_per_batch: int = flag(
        2000, "Record-by-record reading (--csv_block_mb 0, or a delimiter other than a comma): "
              "rows per Arrow RecordBatch handed to tf.transform. Blocks give one RecordBatch "
              "per split each.", check=at_least(1))
    gzip_level: int = flag(GZIP_LEVEL, "zlib level of the gzip TFRecords, 1 (fastest, the "
                                       "default) to 9 (smallest).", check=within(1, 9))
    infer_scan_mb: int = flag(
        0, "Schema inference profiles every row of every input file at launch (types never "
           "narrower than the data). A bound in MB of rows for very large inputs: past it "
           "numeric columns are typed float, and text in them is rejected. 0: the whole input.",
        check=at_least(0))
    max_columns: int = flag(
        2000, "Most columns a header may have when the schema is inferred: the transform's "
              "graph, and the job's memory, grow with them (1,108 columns: 2.1 GB, 61 s; "
              "docs/performance.md). A longer header is refused at launch; a --schema_spec "
              "names its columns and is not bounded.", check=at_least(2))
    golden_rows: int = flag(
        golden.DEFAULT_ROWS, "Labelled raw eval (else test) rows kept in OUTPUT/golden/: the "
        "golden set a new model version must predict before it serves (0: none; at most "
        f"{golden.MAX_ROWS:,}); as many train rows go to OUTPUT/golden/calibration.tfrecord "
        "(training.optimize).", check=within(0, golden.MAX_ROWS))
    tft_temp_dir: Optional[str] = flag(help="tf.transform's scratch directory (default: a local "
                                            "temp dir on local runners, else temp_location).")


@dataclasses.dataclass(frozen=True)
class BatchPredictArgs(ImageArgs, ModelArgs, CsvArgs, IOArgs):
    """`python -m beam_jobs.batch_predict`: --input/--output ({date} is replaced by
    --run_date), --key_column (rows without a key are keyed file:line) and the model's flags
    are the bases'."""
    input_format: str = flag("auto", "auto: by extension (.csv, .json/.jsonl, .tfrecord; +.gz).",
                             choices=("auto", "csv", "jsonl", "tfrecord"))
    output_format: str = flag("jsonl", choices=("jsonl", "csv", "both"))
    run_date: Optional[str] = flag(help="YYYY-MM-DD for {date} (default: today, UTC).")
    passthrough_columns: str = flag("", "Comma-separated input columns copied to each "
                                        "prediction.")
    evaluate_label: Optional[str] = flag(help="Label column: write metrics.json (RMSE/MAE or "
                                              "accuracy) over the rows that have it.")
    rows_per_chunk: Optional[int] = flag(
        help="JSON lines / TFRecord records handed from the reader to parsing at a time "
             "(default: --max_batch_size).", type=int, check=at_least(1))
    allow_empty_output: str = flag(
        "off", "on: publish a run that predicted no row (every row a dead letter). off: such a "
               "run fails like one that reads no rows, and the previous output stays.",
        choices=ON_OFF)
    model_threads: int = flag(
        0, "TensorFlow threads per op in each worker process (0: TensorFlow's default, all "
           "cores), e.g. cores / processes where several worker processes share a machine.",
        check=at_least(0))


@dataclasses.dataclass(frozen=True)
class StreamPredictArgs(ImageArgs, ModelArgs):
    """`python -m beam_jobs.stream_predict`: the model's flags are ModelArgs'."""
    input_subscription: Optional[str] = flag(help="Pub/Sub subscription to read "
                                                  "(projects/P/subscriptions/S).")
    input_topic: Optional[str] = flag(help="Pub/Sub topic to read (a temporary subscription is "
                                           "made).")
    replay: Optional[str] = flag(help="JSON-lines file of events to replay instead of Pub/Sub "
                                      "(local runs).")
    replay_rate: float = flag(100.0, "Replay messages per second.", check=above(0))
    output_topic: Optional[str] = flag(help="Pub/Sub topic for predictions (attributes: id, "
                                            "model_version).")
    output_dir: Optional[str] = flag(help="Directory for predictions as windowed JSON-lines "
                                          "files.")
    dead_letter_topic: Optional[str] = flag(help="Pub/Sub topic for rejected messages.")
    dead_letter_dir: Optional[str] = flag(help="Directory for rejected messages (default: "
                                               "output_dir/rejects).")
    monitoring_topic: Optional[str] = flag(help="Pub/Sub topic for per-window monitoring "
                                                "records.")
    monitoring_dir: Optional[str] = flag(help="Directory for monitoring records (default: "
                                              "output_dir/monitoring).")
    window_secs: float = flag(60.0, "Monitoring window size (event time).", check=above(0))
    allowed_lateness_secs: float = flag(0.0, "Late data still counted in its monitoring window "
                                             "(later: a late pane).", check=at_least(0))
    max_batch_duration_secs: Optional[float] = flag(
        help="Accepted for compatibility and ignored: batches never span bundles (Beam's "
             "cross-bundle batching lost the rows it held at the end of input or a drain).",
        type=float)
    max_message_bytes: int = flag(MAX_MESSAGE_BYTES, "A larger message is a message_too_large "
                                  "dead letter before any parsing (default 10 MiB).",
                                  check=at_least(1))
    allowed_uri_prefixes: str = flag(
        "", "Image models: comma-separated folders a message's uri may name, e.g. "
            "gs://B/images/ (Cloud Storage notifications included). Default none: every uri "
            "message is a uri_not_allowed dead letter, so whoever can publish cannot make "
            "workers read their disks or buckets.")
    uri_read_timeout_secs: float = flag(
        30.0, "Image models: the longest one read of a uri may take; 3 attempts, then a "
              "uri_read_timeout dead letter.", check=above(0))
    model_refresh_secs: float = flag(60.0, "How often to look for a newer model version under "
                                           "--model_dir; -1: never.")
    id_attribute: str = flag("id", "Message attribute holding the message id.")
    timestamp_attribute: Optional[str] = flag(help="Message attribute holding the event time.")
    max_outage_secs: float = flag(
        MAX_OUTAGE_SECS, "Local runs: how long an unreachable subscription or output topic is "
        "retried (with backoff) before the job stops in one line; nothing it has not written "
        "is acknowledged, so a restart delivers it again.", check=above(0))


@dataclasses.dataclass(frozen=True)
class RedriveArgs(ModelArgs, IOArgs):
    """`python -m beam_jobs.redrive`: --output (the published batch_predict output) is
    IOArgs', --model_dir (default: the run's) ModelArgs'."""
    rejects: Optional[str] = flag(
        help="Fixed dead letters (JSON lines): each replaces the published one of the same "
             "source and line; the others are redriven as published. Default: "
             "OUTPUT/rejects/*.jsonl itself (fixed in place).")


JOB_ARGS = {"preprocess": PreprocessArgs, "batch_predict": BatchPredictArgs,
            "stream_predict": StreamPredictArgs, "redrive": RedriveArgs}
