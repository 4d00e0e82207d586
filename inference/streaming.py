"""The streaming job's DoFns and PTransforms: parse Pub/Sub messages (tabular JSON or
tf.Example, image uris / bytes / Cloud Storage notifications) into rows or dead letters, turn
RunInference results into prediction records, and windowed JSON sinks (the per-window
monitoring records: inference/windows.py).
`beam_jobs/stream_predict.py` composes them."""
from __future__ import annotations

import base64
import datetime
import json
import logging
import time
import uuid
from typing import List, NamedTuple, Optional, Union

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.metrics import Metrics
from apache_beam.transforms import trigger, window

from inference.inputs.image_sources import IMAGE_INPUT, ImageInputs
from inference.inputs.replay import PUBLISHED_AT
from inference.inputs.rows import ServingParser
from inference.model.serving_model import GATE_EVENTS
from inference.outputs.predictions import Prediction
from inference.windows import MonitoringRecord
from preprocessing.accounting import rejects
from preprocessing.contract.values import parse_json
from preprocessing.files import filesys

MAX_MESSAGE_BYTES = 10 << 20  # default of --max_message_bytes (Pub/Sub's own limit is 10 MB)
DEAD_LETTER_HEAD = 4096  # bytes of an oversized message its dead letter keeps
# What a dead letter keeps of a message's data at most: escaped as JSON (6x at worst) it
# stays under Pub/Sub's 10 MB, so a dead letter can always be published.
DEAD_LETTER_RAW = 1 << 20
# Set by the local runner's Pub/Sub read (beam_jobs/shared/local_streaming.py) on a message
# whose attributes it could not read (an event time that is no time): a dead letter saying
# why, instead of a failed pull that took the messages pulled with it down too.
ATTRIBUTE_ERROR = "tfdataflow-attribute-error"


class MessageMeta(NamedTuple):
    """What a message's row carries beside its values, through RunInference (as the key of
    Beam's KeyedModelHandler): its id, event time (RunInference's batching re-stamps elements;
    FormatResults restores it), publish time (for latency), what came in (dead letters) and
    its Pub/Sub message id (duplicates of a redelivery share it)."""
    id: str
    event_time: float
    published: float
    raw: Union[bytes, str]
    message_id: Optional[str] = None


def publish_time(msg: PubsubMessage) -> float:
    attrs = msg.attributes or {}
    if PUBLISHED_AT in attrs:
        try:
            return float(attrs[PUBLISHED_AT])
        except ValueError:  # a message's own attribute: never trusted to parse
            pass
    pt = getattr(msg, "publish_time", None)
    if pt is not None:
        return pt.timestamp() if hasattr(pt, "timestamp") else float(pt)
    return time.time()


class ParseMessages(beam.DoFn):
    """PubsubMessage -> (MessageMeta, row dict of typed raw values), or a dead letter.

    Tabular models: a JSON object of raw columns, or a serialized raw tf.Example. Image models
    (`image_kw` given): a JSON object with a `uri` (local or gs://), `{"image_bytes": {"b64":
    ...}}` or `{"b64": ...}`, a Cloud Storage object notification (bucket/name, or the
    bucketId/objectId attributes), or the image bytes themselves as the message data; the
    image is normalised as preprocess does (inference.inputs.image_sources). A uri is the message's id
    unless --id_attribute gives one."""

    def __init__(self, job: str, schema, id_attribute: str, image_kw: Optional[dict] = None,
                 source: str = "pubsub", max_message_bytes: int = MAX_MESSAGE_BYTES):
        self.schema = schema
        self.source = source
        self.id_attribute = id_attribute
        self.image_kw = image_kw  # ImageInputs' keyword arguments, for an image model
        self.max_bytes = max_message_bytes
        self.job = job  # the metrics namespace
        self.received = Metrics.counter(job, "messages_read")
        self.dead = rejects.DeadLetters(job)

    def setup(self):
        self._serving = ServingParser(self.schema)
        if self.image_kw is not None:
            self._images = ImageInputs(**self.image_kw)

    def process(self, msg: PubsubMessage, ts=beam.DoFn.TimestampParam):
        self.received.inc()
        attrs = msg.attributes or {}
        mid = attrs.get(self.id_attribute) or getattr(msg, "message_id", None) or \
            f"sha-{hash(msg.data) & 0xffffffffffff:x}"
        data = msg.data or b""
        pubsub_id = getattr(msg, "message_id", None) or mid
        if ATTRIBUTE_ERROR in attrs:
            yield from self._reject(mid, data[:DEAD_LETTER_HEAD], "bad_attribute",
                                    attrs[ATTRIBUTE_ERROR], msg, ts, pubsub_id)
            return
        if len(data) > self.max_bytes:  # checked before any parsing; the dead letter keeps a head
            yield from self._reject(mid, data[:DEAD_LETTER_HEAD], "message_too_large",
                                    f"{len(data)} bytes, over --max_message_bytes "
                                    f"{self.max_bytes}", msg, ts, pubsub_id)
            return
        fmt = attrs.get("format") or ("json" if data.lstrip()[:1] == b"{" else "tfexample")
        # Dead letters keep what came in; binary image data as base64, so it can be replayed.
        raw = base64.b64encode(data).decode("ascii") \
            if self.image_kw is not None and fmt != "json" else data
        try:
            if self.image_kw is not None:
                row, uri = _parse_image_message(self._images, data, fmt, attrs)
                if uri and not attrs.get(self.id_attribute):
                    mid = uri
            elif fmt == "json":
                values, _ = self._serving.parse_object(parse_json(data))
                row = dict(zip(self.schema.names, values))
            else:
                values, _ = self._serving.parse_example(data)
                row = dict(zip(self.schema.names, values))
        except rejects.Reject as e:
            yield from self._reject(mid, raw, e.reason, e.detail, msg, ts, pubsub_id)
            return
        except Exception as e:  # one message must never stop (or, on Dataflow, wedge) the stream
            logging.warning("%s: message %s: unexpected %s", self.job, mid, type(e).__name__,
                            exc_info=True)
            yield from self._reject(mid, raw, "bad_message",
                                    f"{type(e).__name__}: {str(e)[:300]}", msg, ts, pubsub_id)
            return
        # A row the model rejects keeps its data for the dead letter, within the same bound.
        yield MessageMeta(mid, float(ts), publish_time(msg), raw[:DEAD_LETTER_RAW],
                          pubsub_id), row

    def _reject(self, mid, raw, reason, detail, msg, ts, pubsub_id):
        if len(raw) > DEAD_LETTER_RAW:
            raw, detail = raw[:DEAD_LETTER_RAW], f"{detail} (raw: the first {DEAD_LETTER_RAW} " \
                f"of {len(raw)} bytes)"
        yield self.dead(self.source, None, raw, reason, detail, **message_extras(
            mid, publish_time(msg), ts, pubsub_id))


def _parse_image_message(images, data: bytes, fmt: str, attrs: dict):
    if fmt == "json":
        jpeg, uri = images.from_object(parse_json(data), attrs)
    elif attrs.get("bucketId") and attrs.get("objectId"):  # notification without a payload
        jpeg, uri = images.from_object({}, attrs)
    else:
        jpeg, uri = images.from_bytes(data), None
    return {IMAGE_INPUT: jpeg}, uri


def message_extras(mid, published: float, ts, message_id=None) -> dict:
    """What a message's dead letter adds to the shape every job writes: its id, latency,
    event time and Pub/Sub message id."""
    return dict(id=mid, latency_ms=round((time.time() - published) * 1000, 2),
                event_time=float(ts) if ts is not None else None,
                message_id=message_id or mid)


class FormatResults(beam.DoFn):
    """(MessageMeta, PredictionResult) -> a Prediction (keyed "id"), or a dead letter for a
    row the model rejected; and, tagged MODEL_EVENTS, the gate's records of model versions accepted
    or refused in this process since the last element (for the monitoring output)."""

    def __init__(self, job: str, source: str = "pubsub"):
        self.source = source
        self.predicted = Metrics.counter(job, "messages_predicted")
        self.dead = rejects.DeadLetters(job)

    def process(self, keyed):
        meta, result = keyed
        ts = meta.event_time  # the message's own event time (batching moved it)
        yield from drain_model_events(ts)
        if isinstance(result.inference, rejects.Reject):
            yield self.dead.of(self.source, None, meta.raw, result.inference, timestamp=ts,
                               **message_extras(meta.id, meta.published, ts, meta.message_id))
            return
        self.predicted.inc()
        yield window.TimestampedValue(Prediction(
            meta.id, result.inference, result.model_id, key_field="id", extras={
                "message_id": meta.message_id or meta.id,
                "latency_ms": round((time.time() - meta.published) * 1000, 2),
                "event_time": ts}), ts)


MODEL_EVENTS = "model_events"


def drain_model_events(ts):
    """The process's pending gate records (serving_model.GATE_EVENTS), each once, as
    MonitoringRecords."""
    while GATE_EVENTS:
        try:
            record = GATE_EVENTS.popleft()
        except IndexError:  # another thread drained it first
            return
        yield beam.pvalue.TaggedOutput(MODEL_EVENTS, window.TimestampedValue(
            MonitoringRecord.of_dict(dict(record, time=time.time())), ts))


class WriteJson(beam.PTransform):
    """Records (Predictions, DeadLetters, MonitoringRecords: anything with `to_dict`,
    serialised here) -> a Pub/Sub topic (JSON, with id, message_id and model_version
    attributes) and/or windowed JSON-lines files. Returns the PCollections of lists of
    `message_id`s each sink has written: the files' always, the topic's when `publish`
    (topic -> a DoFn that publishes PubsubMessages and outputs such lists) replaces Beam's
    WriteToPubSub."""

    def __init__(self, topic: Optional[str], directory: Optional[str], prefix: str,
                 window_secs: float, publish=None):
        super().__init__()
        self.topic, self.directory, self.prefix = topic, directory, prefix
        self.window_secs = window_secs
        self.publish = publish

    def expand(self, records):
        written = []
        if self.topic:
            messages = records | "ToMessage" >> beam.Map(to_message).with_output_types(
                PubsubMessage)
            if self.publish is not None:
                written.append(messages | "Publish" >> beam.ParDo(
                    self.publish(self.topic)).with_output_types(WrittenIds))
            else:
                _ = messages | "Publish" >> beam.io.WriteToPubSub(self.topic,
                                                                  with_attributes=True)
        if self.directory:
            # Late records are written too (in a later pane's file), never dropped.
            written.append(
                records
                | "FileWindows" >> beam.WindowInto(
                    window.FixedWindows(self.window_secs),
                    trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                    accumulation_mode=trigger.AccumulationMode.DISCARDING,
                    allowed_lateness=NEVER_DROP_SECS)
                | "OneFile" >> beam.Map(lambda rec: (None, rec))
                | "PerPane" >> beam.GroupByKey()
                | "Files" >> beam.ParDo(WritePaneFile(self.directory, self.prefix))
                .with_output_types(WrittenIds))
        return tuple(written)


WrittenIds = List[Optional[str]]  # the `message_id`s a sink wrote (for acknowledgement)


def to_message(rec) -> PubsubMessage:
    record = rec.to_dict()
    attrs = {"id": str(record.get("id", ""))}
    for name in ("message_id", "model_version"):
        if record.get(name):
            attrs[name] = str(record[name])
    return PubsubMessage(_json(record).encode(), attrs)


class WritePaneFile(beam.DoFn):
    """One window pane's records -> one JSON-lines file, written under a temporary name and
    renamed (a reader never sees half a file; a retried pane writes the same name again);
    outputs the `message_id`s it wrote."""

    def __init__(self, directory: str, prefix: str):
        self.directory, self.prefix = directory, prefix

    def process(self, keyed, win=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        lines, ids = [], []
        for rec in keyed[1]:
            record = rec.to_dict()
            lines.append(_json(record))
            ids.append(record.get("message_id"))
        name = pane_file_name(self.prefix, win, pane.index)
        final = FileSystems.join(self.directory, name)
        temp = FileSystems.join(self.directory, f".{name}.{uuid.uuid4().hex}.tmp")
        with FileSystems.create(temp) as f:
            f.write(("\n".join(lines) + "\n").encode())
        FileSystems.rename([temp], [final])
        yield ids


NEVER_DROP_SECS = 10 * 365 * 24 * 3600


def _json(rec) -> str:
    """A record as strict JSON (a non-finite number, e.g. a latency statistic, is null)."""
    return json.dumps(filesys.json_safe(rec), allow_nan=False)


def pane_file_name(prefix: str, win, pane_index: int) -> str:
    """prefix-<window start>-<window end>-pane<i>-00000.jsonl: a late pane gets its own file."""
    start = datetime.datetime.fromtimestamp(float(win.start), datetime.timezone.utc)
    end = datetime.datetime.fromtimestamp(float(win.end), datetime.timezone.utc)
    return f"{prefix}-{start:%Y%m%dT%H%M%S}-{end:%Y%m%dT%H%M%S}-pane{pane_index}-00000.jsonl"
