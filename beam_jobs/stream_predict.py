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
predictions and rejects and latency percentiles; `report.html` (in --output_dir, else the
monitoring directory) draws those windows over time and is rewritten as they close. A new
model version under --model_dir (a base of numeric versions) is picked up without a restart
(--model_refresh_secs); outputs show the switch.

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

import dataclasses
import logging
from typing import NamedTuple, Optional, Sequence, Union

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions, StandardOptions

from beam_jobs.shared import cli, common_options, errors, local_acks, local_runner
from beam_jobs.shared.args import StreamPredictArgs
from inference.inputs.image_sources import normalize_prefixes
from inference.inputs.replay import Pace, load_replay, replay_stream
from inference.model import model_handler as mh
from inference.model import versions
from inference.model.serving_model import choose_version, gate_line
from inference.model.shadow import CombineShadow, ShadowScoreStream
from inference.outputs import sinks, stream_report
from inference.outputs.predictions import Prediction
from inference.outputs.stream_report import WriteStreamReport
from inference.skew import RowPartials, SkewReport, kinds_of, load_train_statistics
from inference.streaming import MODEL_EVENTS, FormatResults, ParseMessages, WriteJson
from inference.window_slices import LabelledRows, SliceMetricsFn
from inference.windows import (
    BundlePartials,
    Monitor,
    MonitoringRecord,
    OfPartials,
    PerWindow,
    Served,
)
from preprocessing.accounting.rejects import DeadLetter
from preprocessing.contract.schema import Schema
from preprocessing.images.checks import ImageLimits
from preprocessing.reference.slices import Slicer

JOB = "stream_predict"  # the metrics namespace of this job's steps


StreamPredictOptions = common_options.options_class(StreamPredictArgs, "StreamPredictOptions",
                                                     __name__)

REQUIRED_OPTIONS = ("model_dir",)




def parse_args(argv: Union[Sequence[str], PipelineOptions]) -> StreamPredictArgs:
    """The job's typed arguments, checked without any I/O: bad arguments fail here, before a
    model or file is read."""
    options = common_options.as_options(argv)
    o = common_options.typed_args(JOB, StreamPredictArgs, options)
    if not o.model_dir:
        raise errors.JobError(JOB, "--model_dir is required")
    sources = [x for x in (o.input_subscription, o.input_topic, o.replay) if x]
    if len(sources) != 1:
        raise errors.JobError(JOB, "give exactly one of --input_subscription, --input_topic "
                                    "and --replay")
    if not (o.output_topic or o.output_dir or o.output_table):
        raise errors.JobError(JOB, "give --output_topic, --output_table or --output_dir")
    common_options.check_output_table(JOB, o, options, file_loads=False)
    if o.max_batch_size < o.min_batch_size:
        raise errors.JobError(JOB, "need --min_batch_size <= --max_batch_size")
    for prefix in normalize_prefixes(o.allowed_uri_prefixes):
        if "://" in prefix and not prefix.startswith("gs://"):
            raise errors.JobError(JOB, f"--allowed_uri_prefixes: {prefix} is neither gs:// nor "
                                        "a local folder")
        if prefix.startswith("gs://") and len(prefix.rstrip("/")) <= len("gs://"):
            raise errors.JobError(JOB, "--allowed_uri_prefixes: name a bucket (gs://B/...)")
    if not options.view_as(StandardOptions).streaming:
        raise errors.JobError(JOB, "this is a streaming job: add --streaming")
    if o.replay and not local_runner.is_local_runner(options):
        raise errors.JobError(JOB, "--replay is a local (DirectRunner) source; on a remote "
                                    "runner read from --input_subscription or --input_topic")
    common_options.check_model_options(JOB, o)
    if not (o.dead_letter_topic or o.dead_letter_dir or o.output_dir):
        raise errors.JobError(JOB, "give --dead_letter_topic or --dead_letter_dir "
                                    "(or --output_dir)")
    return o


class StreamPredictOutputs(NamedTuple):
    """What build_pipeline returns (unbounded PCollections)."""
    predictions: beam.PCollection    # one record per predicted message
    dead_letters: beam.PCollection   # one per rejected message, with its reason
    monitoring: beam.PCollection     # the per-window records and model-version events


@dataclasses.dataclass(frozen=True)
class StreamPredictConfig:
    """Everything `build_pipeline` reads, as plain values: `launch()` makes one from the
    command line (with I/O); a test can construct one directly."""
    args: StreamPredictArgs
    schema: Schema                        # the model's raw schema
    model_path: str                       # the export version served first
    image_kw: Optional[dict] = None       # an image model: ImageInputs' keyword arguments
    dead_letter_dir: Optional[str] = None
    monitoring_dir: Optional[str] = None
    events: Optional[tuple] = None        # --replay's events
    source: Optional[beam.PTransform] = None  # PubsubMessages from elsewhere (tests)
    shadow_path: Optional[str] = None     # --shadow_model_dir's version
    train_statistics: Optional[dict] = None  # the export's, for the skew report
    # On Dataflow, Pub/Sub redeliveries and republished messages with the same
    # --id_attribute value are dropped (id_label); the DirectRunner has no id_label.
    pubsub_id_label: Optional[str] = None
    # The local runner's Pub/Sub read holds each message until its sinks have written its
    # record (beam_jobs/shared/local_acks.py); Dataflow acknowledges after its own commit.
    ack_after_write: bool = False
    slicer: Optional[Slicer] = None       # --slice_by: metrics by slice of labelled messages


def launch(options: PipelineOptions) -> StreamPredictConfig:
    """The launch step: the checked arguments plus what only I/O can tell (the model and its
    raw schema, the replay file, writable output folders); fails fast with one line."""
    o = parse_args(options)
    try:  # the version the gate lets serve (as batch prediction chooses it)
        model_path, record = choose_version(o.model_dir, common_options.gate_settings(o))
        schema = versions.load_raw_schema(model_path)
        train_stats = load_train_statistics(model_path)  # the golden set's check, skew
    except Exception as e:
        raise errors.JobError(JOB, f"cannot read the model at {o.model_dir}: "
                                f"{str(e).splitlines()[0][:300]}")
    if record:
        (logging.warning if record["event"] == "version_refused" else logging.info)(
            "%s: starts with model version %s (%s)", JOB, versions.model_version(model_path),
            gate_line(record))
    common_options.check_golden_set(JOB, o, schema, train_stats)
    # Per window over the messages that carry the label, and in the gate.
    slicer = common_options.check_slice_by(JOB, o, schema, train_stats, by_label=schema.label)
    shadow_path = common_options.resolve_shadow(JOB, o, schema)
    image_kw = None
    if any(c.transform == "image" for c in schema.columns):
        image_kw = dict(limits=ImageLimits.of(o),
                        allowed_prefixes=normalize_prefixes(o.allowed_uri_prefixes),
                        read_timeout_secs=o.uri_read_timeout_secs)
    if o.max_batch_duration_secs is not None:
        logging.warning("%s: --max_batch_duration_secs is ignored: batches never span "
                        "bundles", JOB)
    dead_letter_dir = o.dead_letter_dir or (
        FileSystems.join(o.output_dir, "rejects") if o.output_dir else None)
    monitoring_dir = o.monitoring_dir or (
        FileSystems.join(o.output_dir, "monitoring") if o.output_dir else None)
    try:
        events = tuple(load_replay(o.replay)) if o.replay else None
    except ValueError as e:
        raise errors.JobError(JOB, str(e))
    for d in (o.output_dir, dead_letter_dir, monitoring_dir):
        if d:
            cli.check_writable(JOB, d)
    local = local_runner.is_local_runner(options)
    return StreamPredictConfig(o, schema, model_path, image_kw, dead_letter_dir,
                               monitoring_dir, events, shadow_path=shadow_path,
                               train_statistics=common_options.train_statistics(
                                   o, model_path, train_stats, schema),
                               pubsub_id_label=None if local else o.id_attribute,
                               ack_after_write=local and not o.replay, slicer=slicer)


def build_pipeline(p: beam.Pipeline, cfg: StreamPredictConfig) -> StreamPredictOutputs:
    """Adds the streaming graph to `p`: PubsubMessages from cfg.source (tests give a
    TestStream), the --replay file, or Pub/Sub."""
    o = cfg.args
    if cfg.source is not None:
        source = p | "Source" >> cfg.source
    else:
        if cfg.events is not None:
            source = (p | "Replay" >> replay_stream(cfg.events, o.replay_rate)
                      | "Pace" >> beam.ParDo(Pace(o.replay_rate)))
        else:
            source = p | "ReadPubSub" >> beam.io.ReadFromPubSub(
                topic=o.input_topic, subscription=o.input_subscription, with_attributes=True,
                timestamp_attribute=o.timestamp_attribute, id_label=cfg.pubsub_id_label)
    origin = o.replay or o.input_subscription or o.input_topic  # dead letters name it
    parsed = source | "Parse" >> beam.ParDo(
        ParseMessages(JOB, cfg.schema, o.id_attribute, cfg.image_kw, origin,
                      o.max_message_bytes)).with_outputs(
            "rejects", main="rows")
    # Batches are made within a bundle (no max_batch_duration_secs): Beam's stateful
    # cross-bundle batching flushes what it holds by a timer at the end of the global window,
    # after the watermark has passed those rows, so every window downstream dropped them.
    handler = mh.SavedModelHandler(
        cfg.model_path, min_batch_size=o.min_batch_size, max_batch_size=o.max_batch_size,
        watch_base=o.model_dir, refresh_secs=o.model_refresh_secs,
        gate=common_options.gate_settings(o))
    # Rows are (MessageMeta, values): the metadata rides through as the key.
    results = parsed.rows | "RunInference" >> RunInference(KeyedModelHandler(handler))
    formatted = results | "Format" >> beam.ParDo(FormatResults(JOB, origin)).with_outputs(
        "rejects", MODEL_EVENTS, main="predictions")
    dead = (parsed.rejects, formatted.rejects) | "AllRejects" >> beam.Flatten()
    preds = formatted.predictions
    publish = (lambda topic: local_acks.PublishMessages(topic, o.max_outage_secs)) \
        if cfg.ack_after_write else None
    pred_dicts = preds | "PredictionDicts" >> beam.Map(Prediction.to_dict)
    written_preds = pred_dicts | "WritePredictions" >> WriteJson(
        o.output_topic, o.output_dir, "predictions", o.window_secs, publish)
    if o.output_table:
        columns = sinks.prediction_columns(cfg.schema.task, "id",
                                           extra=("latency_ms", "event_time"))
        refused = (pred_dicts | "WriteBigQuery" >> sinks.WriteBigQuery(o.output_table, columns)
                   | "InsertFailures" >> beam.ParDo(sinks.InsertFailures(JOB)))
        dead_letters = (dead, refused) | "WithRefused" >> beam.Flatten()
    else:
        dead_letters = dead
    written_dead = (dead_letters | "RejectRecords" >> beam.Map(DeadLetter.to_dict)
                    | "WriteRejects" >> WriteJson(o.dead_letter_topic, cfg.dead_letter_dir,
                                                  "rejects", o.window_secs, publish))
    if cfg.ack_after_write:
        acknowledge(preds, written_preds, "Predictions")
        acknowledge(dead_letters, written_dead, "Rejects")
    events = ((preds | "PredEvents" >> beam.Map(Served.of_prediction).with_output_types(Served),
               dead | "RejectEvents" >> beam.Map(Served.of_reject).with_output_types(Served))
              | "Events" >> beam.Flatten())
    stats = events | "Monitor" >> Monitor(o.window_secs, o.allowed_lateness_secs)
    # Gate records (version_accepted / version_refused) go out beside the window stats.
    records = [stats, formatted[MODEL_EVENTS]]
    records += window_records(cfg, parsed.rows, results)
    monitoring = tuple(records) | "WithModelEvents" >> beam.Flatten()
    _ = (monitoring | "MonitoringDicts" >> beam.Map(MonitoringRecord.to_dict)
         | "WriteMonitoring" >> WriteJson(o.monitoring_topic, cfg.monitoring_dir,
                                          "monitoring", o.window_secs, publish))
    report_dir = o.output_dir or cfg.monitoring_dir
    if report_dir:
        _ = monitoring | "Report" >> WriteStreamReport(
            FileSystems.join(report_dir, stream_report.REPORT), origin, o.window_secs)
    return StreamPredictOutputs(preds, dead_letters, monitoring)


def window_records(cfg: StreamPredictConfig, rows, results) -> list:
    """The optional monitoring records per window, beside the window stats: the shadow's
    comparison, the train/serve skew of the rows, the labelled messages' metrics by slice
    (PCollections; labels as in a flat graph, so an update keeps its state)."""
    o, records = cfg.args, []
    if cfg.shadow_path:  # the shadow's comparison per window, beside the window stats
        records.append(results
                       | "Shadow" >> beam.ParDo(ShadowScoreStream(
                           cfg.shadow_path, cfg.schema.task, o.window_secs, cfg.schema.label))
                       | "ShadowCompare" >> PerWindow(
                           CombineShadow(cfg.schema.task,
                                         shadow_version=versions.model_version(cfg.shadow_path)),
                           o.window_secs, o.allowed_lateness_secs))
    if cfg.train_statistics:  # train/serve skew of each window's rows
        records.append(rows
                       | "SkewPartials" >> beam.ParDo(RowPartials(
                           kinds_of(cfg.train_statistics), o.window_secs))
                       | "Skew" >> PerWindow(SkewReport(cfg.train_statistics, o.skew_threshold),
                                             o.window_secs, o.allowed_lateness_secs))
    if cfg.slicer is not None:  # labelled messages: metrics by slice per window
        fn = SliceMetricsFn(cfg.schema.task, cfg.schema.label, cfg.slicer)
        records.append(results
                       | "LabelledRows" >> beam.ParDo(LabelledRows(cfg.schema.label))
                       | "SlicePartials" >> beam.ParDo(BundlePartials(fn, o.window_secs))
                       | "SliceMetrics" >> PerWindow(OfPartials(fn), o.window_secs,
                                                     o.allowed_lateness_secs))
    return records


def acknowledge(records, written: tuple, name: str) -> None:
    """Acknowledges each record's message once every sink in `written` (PCollections of the
    message ids a sink wrote) has reported it; with no such sink (a BigQuery table alone),
    once its record is made."""
    if not written:
        written = (records | f"Handed{name}" >> beam.Map(lambda r: [r.get("message_id")]),)
    for i, ids in enumerate(written):
        _ = ids | f"Ack{name}{i}" >> beam.ParDo(local_acks.Acknowledge(len(written)))


def run(argv=None, save_main_session=True, test_pipeline=None):
    # Locally, the DirectRunner's streaming engine (the FnApiRunner is batch only), with
    # Pub/Sub pulled in larger bundles (beam_jobs/shared/local_streaming.py).
    options = common_options.job_options(argv, JOB, StreamPredictArgs, __doc__,
                                  local_runner=local_runner.STREAMING_RUNNER)
    options.view_as(SetupOptions).save_main_session = save_main_session
    cfg = launch(options)
    logging.info("Serving model version %s from %s (refresh every %ss)",
                 versions.model_version(cfg.model_path), cfg.args.model_dir,
                 cfg.args.model_refresh_secs)
    p = test_pipeline or beam.Pipeline(options=options)
    build_pipeline(p, cfg)
    try:
        result = p.run()
        # A replay ends when its file is done; a Pub/Sub pipeline runs until cancelled.
        # Locally this process is the pipeline, so it waits; on Dataflow it waits unless
        # told not to.
        if local_runner.is_local_runner(options) or not getattr(
                options.view_as(StandardOptions), "no_wait_until_finish", False):
            result.wait_until_finish()
    except BaseException:
        if cfg.ack_after_write:  # what it held, not written, goes back to Pub/Sub now
            local_acks.LEDGER.release()
        raise
    return result


if __name__ == "__main__":
    cli.main(JOB, run)  # a finished job skips the ~2 s interpreter teardown
