"""The stream_predict job's config: the values `build_pipeline` reads, derived at launch and
split by concern (the messages read, the model, where records go, the per-window
monitoring). No flag bag: a flag's default is its field's in beam_jobs/shared/args.py."""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import apache_beam as beam

from beam_jobs.shared.args import StreamPredictArgs
from preprocessing.contract.schema import Schema
from preprocessing.images.checks import ImageLimits
from preprocessing.reference.slices import Slicer

A = StreamPredictArgs  # the flags' declarations: their defaults are named, not repeated


@dataclasses.dataclass(frozen=True)
class UriImages:
    """An image model's messages: a uri (read within the allowed folders) or the bytes."""
    limits: ImageLimits = ImageLimits()
    allowed_prefixes: Tuple[str, ...] = ()
    read_timeout_secs: float = A.uri_read_timeout_secs

    def handler_kwargs(self) -> dict:
        """ParseMessages' image_kw: ImageInputs' keyword arguments."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True)
class StreamSource:
    """The messages read: `reader` makes the PubsubMessages (Pub/Sub's read, the --replay
    file paced in real time, or a test's TestStream)."""
    reader: beam.PTransform
    origin: str                           # the subscription, topic or file dead letters name
    step: str = "Source"                  # the reader's step name (kept across updates)
    id_attribute: str = A.id_attribute
    max_message_bytes: int = A.max_message_bytes
    images: Optional[UriImages] = None    # an image model
    # The local runner's Pub/Sub read holds each message until its sinks have written its
    # record (beam_jobs/shared/local_acks.py); Dataflow acknowledges after its own commit.
    ack_after_write: bool = False


@dataclasses.dataclass(frozen=True)
class StreamModel:
    """The version served first, and how newer versions under `model_dir` are taken up."""
    path: str                             # the export version served first
    model_dir: str                        # watched for newer versions
    min_batch_size: int = A.min_batch_size
    max_batch_size: int = A.max_batch_size
    refresh_secs: float = A.model_refresh_secs
    gate: Optional[tuple] = None          # common_options.gate_settings (None: no gate)
    shadow_path: Optional[str] = None     # --shadow_model_dir's version


@dataclasses.dataclass(frozen=True)
class StreamSinks:
    """Where predictions, dead letters and monitoring records go (topics and/or folders)."""
    output_topic: Optional[str] = None
    output_dir: Optional[str] = None
    output_table: Optional[str] = None    # BigQuery PROJECT:DATASET.TABLE, appended
    dead_letter_topic: Optional[str] = None
    dead_letter_dir: Optional[str] = None
    monitoring_topic: Optional[str] = None
    monitoring_dir: Optional[str] = None
    max_outage_secs: float = A.max_outage_secs  # local runs: a topic unreachable this long


@dataclasses.dataclass(frozen=True)
class Monitoring:
    """The records per event-time window: counts, latency, skew, metrics by slice."""
    window_secs: float = A.window_secs
    allowed_lateness_secs: float = A.allowed_lateness_secs
    train_statistics: Optional[dict] = None  # the export's, for the skew report
    skew_threshold: float = A.skew_threshold
    slicer: Optional[Slicer] = None       # --slice_by: metrics by slice of labelled messages


@dataclasses.dataclass(frozen=True)
class StreamPredictConfig:
    """Everything `build_pipeline` reads: `launch()` makes one from the command line (with
    I/O); a test can construct one directly."""
    schema: Schema                        # the model's raw schema
    source: StreamSource
    model: StreamModel
    sinks: StreamSinks
    monitoring: Monitoring = Monitoring()
