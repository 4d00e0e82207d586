"""Streaming (unbounded) inference: Pub/Sub messages in, one prediction per message out.

Each message carries the raw features as JSON (an object) or a serialized raw tf.Example (the
`format` attribute says which; without it, data starting with `{` is JSON). The `id` attribute
(--id_attribute) identifies the message, else Pub/Sub's message id; an event-time attribute is
used when --timestamp_attribute names it. For an image model a message carries an image uri
(`{"uri": ...}`, or a Cloud Storage object notification), base64 bytes (`{"image_bytes":
{"b64": ...}}`) or the image bytes themselves; see ParseMessages. Every output record carries
the message id (for idempotent downstream writes), the model version that made it and the
processing latency. Malformed messages and ones the model rejects go to the dead-letter sink
with the reason. Per fixed window (--window_secs) a monitoring record gives the counts of
predictions and rejects and latency percentiles. A new model version under --model_dir (a base
of numeric versions) is picked up without a restart (--model_refresh_secs); outputs show the
switch.

Locally, against Pub/Sub (or the gcloud emulator via PUBSUB_EMULATOR_HOST):

    python -m beam_jobs.stream_predict --streaming --model_dir out/job/export \\
        --input_subscription projects/P/subscriptions/in --output_topic projects/P/topics/out \\
        --dead_letter_topic projects/P/topics/dead --monitoring_topic projects/P/topics/mon

Locally without Pub/Sub, replaying a JSON-lines file of events at a rate (TestStream):

    python -m beam_jobs.stream_predict --streaming --model_dir out/job/export \\
        --replay events.jsonl --replay_rate 200 --output_dir out/stream

On Dataflow:

    python -m beam_jobs.stream_predict --runner DataflowRunner --streaming --project P \\
        --region us-central1 --temp_location gs://B/tmp --setup_file ./setup.py \\
        --model_dir gs://B/job/export --input_subscription projects/P/subscriptions/in \\
        --output_topic projects/P/topics/out --dead_letter_topic projects/P/topics/dead \\
        --monitoring_topic projects/P/topics/mon

Replay file: one event per line, `{"id": ..., "event_time": <epoch s or ISO 8601>,
"attributes": {...}, "data": {...raw features...}}` or `"data_b64"` for raw bytes (e.g. a
serialized tf.Example); a line without "data"/"data_b64" is itself the features object.
"""
from __future__ import annotations

import base64
import datetime
import json
import logging
import math
import time
from typing import List, Optional

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import RunInference
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions, StandardOptions
from apache_beam.transforms import trigger, window
from apache_beam.utils.timestamp import Timestamp

from beam_jobs import runtime
from inference import model_handler as mh
from inference.inputs import ServingParser
from preprocessing import parsing

JOB = "stream_predict"
PUBLISHED_AT = "_published_at"  # attribute the replay source stamps (epoch seconds)


class StreamPredictOptions(PipelineOptions):
    """Streaming flags; --model_dir/--min_batch_size/--max_batch_size: runtime.ModelOptions."""

    @classmethod
    def _add_argparse_args(cls, parser):
        a = parser.add_argument
        a("--input_subscription", help="Pub/Sub subscription to read (projects/P/subscriptions/S).")
        a("--input_topic", help="Pub/Sub topic to read (a temporary subscription is made).")
        a("--replay", help="JSON-lines file of events to replay instead of Pub/Sub (local runs).")
        a("--replay_rate", type=float, default=100.0, help="Replay messages per second.")
        a("--output_topic", help="Pub/Sub topic for predictions (attributes: id, model_version).")
        a("--output_dir", help="Directory for predictions as windowed JSON-lines files.")
        a("--dead_letter_topic", help="Pub/Sub topic for rejected messages.")
        a("--dead_letter_dir", help="Directory for rejected messages (default: output_dir/rejects).")
        a("--monitoring_topic", help="Pub/Sub topic for per-window monitoring records.")
        a("--monitoring_dir", help="Directory for monitoring records (default: output_dir/monitoring).")
        a("--window_secs", type=float, default=60.0, help="Monitoring window size (event time).")
        a("--allowed_lateness_secs", type=float, default=0.0,
          help="Late data still counted in its monitoring window (later: a late pane).")
        a("--max_batch_duration_secs", type=float, default=None,
          help="Longest a row waits for its batch to fill (streaming batching needs it).")
        a("--model_refresh_secs", type=float, default=60.0,
          help="How often to look for a newer model version under --model_dir; -1: never.")
        a("--id_attribute", default="id", help="Message attribute holding the message id.")
        a("--timestamp_attribute", help="Message attribute holding the event time.")


OPTION_CLASSES = (runtime.ModelOptions, runtime.ImageOptions, StreamPredictOptions)
REQUIRED_OPTIONS = ("model_dir",)


class JobConfig:
    def __init__(self, options: PipelineOptions):
        o = runtime.merged_options(options, *OPTION_CLASSES)
        self.options = o
        if not o.model_dir:
            raise runtime.JobError(JOB, "--model_dir is required")
        sources = [x for x in (o.input_subscription, o.input_topic, o.replay) if x]
        if len(sources) != 1:
            raise runtime.JobError(JOB, "give exactly one of --input_subscription, --input_topic "
                                       "and --replay")
        if not (o.output_topic or o.output_dir or o.output_table):
            raise runtime.JobError(JOB, "give --output_topic, --output_table or --output_dir")
        if o.window_secs <= 0 or o.replay_rate <= 0 or o.allowed_lateness_secs < 0:
            raise runtime.JobError(JOB, "--window_secs and --replay_rate must be > 0, "
                                       "--allowed_lateness_secs >= 0")
        if o.min_batch_size < 1 or o.max_batch_size < o.min_batch_size:
            raise runtime.JobError(JOB, "need 1 <= --min_batch_size <= --max_batch_size")
        if not options.view_as(StandardOptions).streaming:
            raise runtime.JobError(JOB, "this is a streaming job: add --streaming")
        if o.replay and not runtime.is_local_runner(options):
            raise runtime.JobError(JOB, "--replay is a local (DirectRunner) source; on a remote "
                                       "runner read from --input_subscription or --input_topic")
        try:
            self.model_path = mh.resolve_model_dir(o.model_dir)
            self.schema = mh.load_raw_schema(self.model_path)
        except Exception as e:
            raise runtime.JobError(JOB, f"cannot read the model at {o.model_dir}: "
                                       f"{str(e).splitlines()[0][:300]}")
        self.image_kw = None
        if any(c.transform == "image" for c in self.schema.columns):
            runtime.check_image_options(JOB, o)
            self.image_kw = (o.max_side, o.jpeg_quality, o.max_pixels)
        self.dead_letter_dir = o.dead_letter_dir or (
            FileSystems.join(o.output_dir, "rejects") if o.output_dir else None)
        self.monitoring_dir = o.monitoring_dir or (
            FileSystems.join(o.output_dir, "monitoring") if o.output_dir else None)
        if not (o.dead_letter_topic or self.dead_letter_dir):
            raise runtime.JobError(JOB, "give --dead_letter_topic or --dead_letter_dir "
                                       "(or --output_dir)")
        self.events = load_replay(o.replay) if o.replay else None
        for d in (o.output_dir, self.dead_letter_dir, self.monitoring_dir):
            if d:
                runtime.check_writable(JOB, d)


# ---- replay source ---------------------------------------------------------------------------
def _epoch(value) -> Optional[float]:
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).replace("Z", "+00:00")
    dt = datetime.datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return dt.timestamp()


def load_replay(path: str) -> List[tuple]:
    """Replay file -> [(PubsubMessage, event time or None)], in file order.

    A line that is not JSON still becomes a message (its bytes as data), so the job's own
    dead-lettering is what the replay exercises.
    """
    events = []
    last_time = None
    for i, line in enumerate(runtime.read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        attrs, when = {}, None
        try:
            ev = json.loads(line)
        except ValueError:
            ev = None
        if isinstance(ev, dict) and ("data" in ev or "data_b64" in ev):
            attrs = {str(k): str(v) for k, v in (ev.get("attributes") or {}).items()}
            if ev.get("id") is not None:
                attrs.setdefault("id", str(ev["id"]))
            data = base64.b64decode(ev["data_b64"]) if "data_b64" in ev else \
                json.dumps(ev["data"]).encode()
            when = _epoch(ev.get("event_time"))
        else:
            data = line.encode()
        attrs.setdefault("id", f"replay-{i}")
        when = last_time if when is None else when  # no time of its own: the previous one's
        last_time = when
        events.append((PubsubMessage(data, attrs, message_id=attrs["id"]), when))
    if not events:
        raise runtime.JobError(JOB, f"--replay {path} has no events")
    return events


def replay_stream(events, rate: float, tick_secs: float = 0.1, start: float = 0.0):
    """A TestStream that releases `rate` messages per second of (test) processing time.

    Event times default to the replay schedule (start + i / rate); the Pace step after it
    makes the release real-time on the DirectRunner, which finishes each TestStream event
    before taking the next.
    """
    from apache_beam.testing.test_stream import TestStream
    ts = TestStream()
    per_tick = max(1, int(round(rate * tick_secs)))
    watermark = None
    for i in range(0, len(events), per_tick):
        group, times = [], []
        for j, (msg, when) in enumerate(events[i:i + per_tick], i):
            t = when if when is not None else start + j / rate
            times.append(t)
            group.append(window.TimestampedValue((j, msg), t))
        ts = ts.add_elements(group)
        # The watermark follows the replay (never backwards): windows close as it goes, and
        # an event older than the watermark arrives as late data, as it would from Pub/Sub.
        low_ms = math.floor(min(times) * 1000)  # TestStream watermarks are whole ms
        if watermark is None or low_ms > watermark:
            watermark = low_ms
            ts = ts.advance_watermark_to(Timestamp(micros=low_ms * 1000))
        ts = ts.advance_processing_time(tick_secs)
    return ts.advance_watermark_to_infinity()


class Pace(beam.DoFn):
    """Holds each replayed message until its slot (i / rate after the first) and stamps the
    release time as its publish time, so latency is measured as Pub/Sub would."""

    def __init__(self, rate: float):
        self.rate = rate
        self.t0 = None

    def process(self, element):
        seq, msg = element
        if self.t0 is None:
            self.t0 = time.time() - seq / self.rate
        delay = self.t0 + seq / self.rate - time.time()
        if delay > 0:
            time.sleep(delay)
        attrs = dict(msg.attributes or {})
        attrs[PUBLISHED_AT] = repr(self.t0 + seq / self.rate)
        yield PubsubMessage(msg.data, attrs, message_id=msg.message_id)


# ---- parse / format --------------------------------------------------------------------------
def publish_time(msg: PubsubMessage) -> float:
    attrs = msg.attributes or {}
    if PUBLISHED_AT in attrs:
        return float(attrs[PUBLISHED_AT])
    pt = getattr(msg, "publish_time", None)
    if pt is not None:
        return pt.timestamp() if hasattr(pt, "timestamp") else float(pt)
    return time.time()


class ParseMessages(beam.DoFn):
    """PubsubMessage -> row dict (typed raw values + message metadata), or a dead letter.

    Tabular models: a JSON object of raw columns, or a serialized raw tf.Example. Image models
    (`image_kw` given): a JSON object with a `uri` (local or gs://), `{"image_bytes": {"b64":
    ...}}` or `{"b64": ...}`, a Cloud Storage object notification (bucket/name, or the
    bucketId/objectId attributes), or the image bytes themselves as the message data; the
    image is normalised as preprocess does (inference.images). A uri is the message's id
    unless --id_attribute gives one."""

    def __init__(self, schema, id_attribute: str, image_kw: Optional[tuple] = None):
        self.schema = schema
        self.id_attribute = id_attribute
        self.image_kw = image_kw
        self.received = Metrics.counter(JOB, "messages_read")
        self.rejects = {r: Metrics.counter(JOB, f"rejected_{r}") for r in parsing.REASONS}

    def setup(self):
        self._serving = ServingParser(self.schema)
        if self.image_kw is not None:
            from inference.images import ImageInputs
            self._images = ImageInputs(*self.image_kw)

    def process(self, msg: PubsubMessage, ts=beam.DoFn.TimestampParam):
        from preprocessing.images import ImageError
        self.received.inc()
        attrs = msg.attributes or {}
        mid = attrs.get(self.id_attribute) or getattr(msg, "message_id", None) or \
            f"sha-{hash(msg.data) & 0xffffffffffff:x}"
        data = msg.data or b""
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
                values, _ = self._serving.parse_object(_json(data))
                row = dict(zip(self.schema.names, values))
            else:
                values, _ = self._serving.parse_example(data)
                row = dict(zip(self.schema.names, values))
        except (parsing.RowError, ImageError) as e:
            self.rejects.setdefault(e.reason, Metrics.counter(JOB, f"rejected_{e.reason}")).inc()
            yield beam.pvalue.TaggedOutput("rejects", _reject_record(mid, raw, e.reason, e.detail,
                                                                     publish_time(msg), ts))
            return
        row["__id"] = mid
        row["__ts"] = float(ts)  # RunInference's batching re-stamps elements; restored below
        row["__published"] = publish_time(msg)
        row["__raw"] = raw
        yield row


def _parse_image_message(images, data: bytes, fmt: str, attrs: dict):
    from inference.images import IMAGE_INPUT
    if fmt == "json":
        jpeg, uri = images.from_object(_json(data), attrs)
    elif attrs.get("bucketId") and attrs.get("objectId"):  # notification without a payload
        jpeg, uri = images.from_object({}, attrs)
    else:
        jpeg, uri = images.from_bytes(data), None
    return {IMAGE_INPUT: jpeg}, uri


def _json(data: bytes):
    try:
        return json.loads(data)
    except ValueError as e:
        raise parsing.RowError("invalid_json", f"not JSON: {e}") from None


def _reject_record(mid, data, reason, detail, published, ts) -> dict:
    raw = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    return {"id": mid, "reason": reason, "detail": detail, "raw": raw,
            "latency_ms": round((time.time() - published) * 1000, 2),
            "event_time": float(ts) if ts is not None else None}


class FormatResults(beam.DoFn):
    """PredictionResult -> prediction record, or a dead letter for a row the model rejected."""

    def __init__(self):
        self.predicted = Metrics.counter(JOB, "messages_predicted")
        self.rejected = Metrics.counter(JOB, "rejected_model_rejected")

    def process(self, result):
        row = result.example
        ts = row["__ts"]  # the message's own event time (batching moved it)
        if isinstance(result.inference, mh.ModelRejection):
            self.rejected.inc()
            yield beam.pvalue.TaggedOutput("rejects", window.TimestampedValue(_reject_record(
                row["__id"], row["__raw"], result.inference.reason, result.inference.detail,
                row["__published"], ts), ts))
            return
        self.predicted.inc()
        rec = {"id": row["__id"]}
        rec.update(result.inference)
        rec["model_version"] = result.model_id
        rec["latency_ms"] = round((time.time() - row["__published"]) * 1000, 2)
        rec["event_time"] = ts
        yield window.TimestampedValue(rec, ts)


# ---- monitoring ------------------------------------------------------------------------------
class MonitorFn(beam.CombineFn):
    """Counts and latency percentiles of one window's predictions and rejects."""

    def create_accumulator(self):
        return {"predictions": 0, "rejects": {}, "latencies": []}

    def add_input(self, acc, event):
        kind, value = event
        if kind == "prediction":
            acc["predictions"] += 1
            acc["latencies"].append(value)
        else:
            acc["rejects"][value] = acc["rejects"].get(value, 0) + 1
        return acc

    def merge_accumulators(self, accs):
        out = self.create_accumulator()
        for a in accs:
            out["predictions"] += a["predictions"]
            out["latencies"].extend(a["latencies"])
            for k, v in a["rejects"].items():
                out["rejects"][k] = out["rejects"].get(k, 0) + v
        return out

    def extract_output(self, acc):
        lat = sorted(acc["latencies"])
        return {"predictions": acc["predictions"], "rejects": sum(acc["rejects"].values()),
                "rejects_by_reason": dict(sorted(acc["rejects"].items())),
                "latency_ms": {f"p{q}": percentile(lat, q) for q in (50, 90, 99)} |
                {"max": lat[-1] if lat else None}}


def percentile(sorted_values, q: float):
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


class AddWindowInfo(beam.DoFn):
    def process(self, stats, win=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        out = {"window_start": float(win.start), "window_end": float(win.end),
               "pane": {0: "EARLY", 1: "ON_TIME", 2: "LATE", 3: "UNKNOWN"}.get(pane.timing,
                                                                            str(pane.timing)),
               "pane_index": pane.index}
        out.update(stats)
        yield out


class Monitor(beam.PTransform):
    """Per fixed event-time window: counts and latency percentiles. Late data within the
    allowed lateness updates its window in a LATE pane (counts accumulate)."""

    def __init__(self, window_secs: float, allowed_lateness_secs: float):
        super().__init__()
        self.window_secs = window_secs
        self.lateness = allowed_lateness_secs

    def expand(self, events):
        return (events
                | "Window" >> beam.WindowInto(
                    window.FixedWindows(self.window_secs),
                    trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                    accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
                    allowed_lateness=self.lateness)
                | "Stats" >> beam.CombineGlobally(MonitorFn()).without_defaults()
                | "WindowInfo" >> beam.ParDo(AddWindowInfo()))


# ---- sinks -------------------------------------------------------------------------------------
class WriteJson(beam.PTransform):
    """Records -> a Pub/Sub topic (JSON, with id/model_version attributes) or windowed files."""

    def __init__(self, topic: Optional[str], directory: Optional[str], prefix: str,
                 window_secs: float):
        super().__init__()
        self.topic, self.directory, self.prefix = topic, directory, prefix
        self.window_secs = window_secs

    def expand(self, records):
        if self.topic:
            def to_message(rec):
                attrs = {"id": str(rec.get("id", ""))}
                if rec.get("model_version"):
                    attrs["model_version"] = str(rec["model_version"])
                return PubsubMessage(json.dumps(rec).encode(), attrs)
            _ = (records | "ToMessage" >> beam.Map(to_message)
                 | "Publish" >> beam.io.WriteToPubSub(self.topic, with_attributes=True))
        if self.directory:
            # Late records are written too (in a later pane's file), never dropped.
            _ = (records
                 | "ToLine" >> beam.Map(json.dumps)
                 | "FileWindows" >> beam.WindowInto(
                     window.FixedWindows(self.window_secs),
                     trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                     accumulation_mode=trigger.AccumulationMode.DISCARDING,
                     allowed_lateness=NEVER_DROP_SECS)
                 | "Files" >> fileio.WriteToFiles(
                     self.directory, shards=1, max_writers_per_bundle=0,
                     file_naming=pane_file_naming(self.prefix)))
        return records


NEVER_DROP_SECS = 10 * 365 * 24 * 3600


def pane_file_naming(prefix: str):
    """prefix-<window start>-<window end>-pane<i>-<shard>.jsonl: a late pane gets its own file."""
    def name(win, pane, shard_index, total_shards, compression, destination):
        start = datetime.datetime.fromtimestamp(float(win.start), datetime.timezone.utc)
        end = datetime.datetime.fromtimestamp(float(win.end), datetime.timezone.utc)
        return (f"{prefix}-{start:%Y%m%dT%H%M%S}-{end:%Y%m%dT%H%M%S}-pane{pane.index}-"
                f"{shard_index or 0:05d}.jsonl")
    return name


def build_pipeline(p: beam.Pipeline, cfg: JobConfig, source=None):
    """Adds the streaming graph to `p`. `source`: a PCollection of PubsubMessage (tests pass
    one made from a TestStream); default: Pub/Sub or the --replay file."""
    o = cfg.options
    if source is None:
        if cfg.events is not None:
            source = (p | "Replay" >> replay_stream(cfg.events, o.replay_rate)
                      | "Pace" >> beam.ParDo(Pace(o.replay_rate)))
        else:
            source = p | "ReadPubSub" >> beam.io.ReadFromPubSub(
                topic=o.input_topic, subscription=o.input_subscription, with_attributes=True,
                timestamp_attribute=o.timestamp_attribute)
    parsed = source | "Parse" >> beam.ParDo(
        ParseMessages(cfg.schema, o.id_attribute, cfg.image_kw)).with_outputs("rejects",
                                                                              main="rows")
    handler = mh.SavedModelHandler(
        cfg.model_path, min_batch_size=o.min_batch_size, max_batch_size=o.max_batch_size,
        max_batch_duration_secs=o.max_batch_duration_secs, watch_base=o.model_dir,
        refresh_secs=o.model_refresh_secs)
    results = parsed.rows | "RunInference" >> RunInference(handler)
    formatted = results | "Format" >> beam.ParDo(FormatResults()).with_outputs(
        "rejects", main="predictions")
    rejects = (parsed.rejects, formatted.rejects) | "AllRejects" >> beam.Flatten()
    preds = formatted.predictions
    _ = preds | "WritePredictions" >> WriteJson(o.output_topic, o.output_dir, "predictions",
                                                 o.window_secs)
    if o.output_table:
        _ = preds | "WriteBigQuery" >> beam.io.WriteToBigQuery(
            o.output_table, schema="id:STRING,prediction:FLOAT,class:STRING,"
            "model_version:STRING,latency_ms:FLOAT,event_time:FLOAT",
            create_disposition=beam.io.BigQueryDisposition.CREATE_IF_NEEDED,
            write_disposition=beam.io.BigQueryDisposition.WRITE_APPEND,
            method=beam.io.WriteToBigQuery.Method.STREAMING_INSERTS,
            ignore_unknown_columns=True)
    _ = rejects | "WriteRejects" >> WriteJson(o.dead_letter_topic, cfg.dead_letter_dir,
                                               "rejects", o.window_secs)
    events = ((preds | "PredEvents" >> beam.Map(lambda r: ("prediction", r["latency_ms"])),
               rejects | "RejectEvents" >> beam.Map(lambda r: ("reject", r["reason"])))
              | "Events" >> beam.Flatten())
    monitoring = events | "Monitor" >> Monitor(o.window_secs, o.allowed_lateness_secs)
    _ = monitoring | "WriteMonitoring" >> WriteJson(o.monitoring_topic, cfg.monitoring_dir,
                                                     "monitoring", o.window_secs)
    return {"predictions": preds, "rejects": rejects, "monitoring": monitoring}


def run(argv=None, save_main_session=True, test_pipeline=None):
    # Locally, the DirectRunner's streaming engine (the FnApiRunner is batch only).
    options = runtime.job_options(argv, JOB, StreamPredictOptions, __doc__,
                                  shared=OPTION_CLASSES[:-1],
                                  local_runner="BundleBasedDirectRunner")
    options.view_as(SetupOptions).save_main_session = save_main_session
    cfg = JobConfig(options)
    logging.info("Serving model version %s from %s (refresh every %ss)",
                 mh.model_version(cfg.model_path), cfg.options.model_dir,
                 cfg.options.model_refresh_secs)
    p = test_pipeline or beam.Pipeline(options=options)
    build_pipeline(p, cfg)
    result = p.run()
    # A replay ends when its file is done; a Pub/Sub pipeline runs until cancelled. Locally
    # this process is the pipeline, so it waits; on Dataflow it waits unless told not to.
    if runtime.is_local_runner(options) or not getattr(
            options.view_as(StandardOptions), "no_wait_until_finish", False):
        result.wait_until_finish()
    return result


if __name__ == "__main__":
    runtime.setup_logging()
    run()
