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

import logging
from typing import Any, NamedTuple, Sequence, Tuple, Union

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions, StandardOptions

from beam_jobs.shared import cli, common_options, errors, local_acks, local_runner
from beam_jobs.shared.args import StreamPredictArgs
from beam_jobs.stream_predict_config import (
    Monitoring,
    StreamModel,
    StreamPredictConfig,
    StreamSinks,
    StreamSource,
    UriImages,
)
from inference.inputs.image_sources import normalize_prefixes
from inference.inputs.replay import Replay, load_replay
from inference.model import model_handler as mh
from inference.model import versions
from inference.model.serving_model import choose_version, gate_line
from inference.model.shadow import CombineShadow, ShadowScoreStream
from inference.outputs import sinks, stream_report
from inference.outputs.predictions import Prediction
from inference.outputs.stream_report import WriteStreamReport
from inference.skew import RowPartials, SkewReport, kinds_of, load_train_statistics
from inference.streaming import (
    MODEL_EVENTS,
    FormatResults,
    MessageMeta,
    ParseMessages,
    WriteJson,
    WrittenIds,
)
from inference.window_slices import LabelledRows, SliceMetricsFn
from inference.windows import (
    BundlePartials,
    Monitor,
    MonitoringRecord,
    OfPartials,
    PerWindow,
    Served,
)
from preprocessing.accounting.tagged import typed_outputs
from preprocessing.images.checks import ImageLimits

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


def launch(o: StreamPredictArgs, options: PipelineOptions) -> StreamPredictConfig:
    """The launch step: the checked arguments plus what only I/O can tell (the model and its
    raw schema, the replay file, writable output folders); fails fast with one line."""
    gate = common_options.gate_settings(o)
    try:  # the version the gate lets serve (as batch prediction chooses it)
        model_path, record = choose_version(o.model_dir, gate)
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
    if o.max_batch_duration_secs is not None:
        logging.warning("%s: --max_batch_duration_secs is ignored: batches never span "
                        "bundles", JOB)
    sinks_ = StreamSinks(
        o.output_topic, o.output_dir, o.output_table, o.dead_letter_topic,
        o.dead_letter_dir or (FileSystems.join(o.output_dir, "rejects") if o.output_dir
                              else None),
        o.monitoring_topic,
        o.monitoring_dir or (FileSystems.join(o.output_dir, "monitoring") if o.output_dir
                             else None),
        o.max_outage_secs)
    for d in (sinks_.output_dir, sinks_.dead_letter_dir, sinks_.monitoring_dir):
        if d:
            cli.check_writable(JOB, d)
    images = UriImages(ImageLimits.of(o), normalize_prefixes(o.allowed_uri_prefixes),
                       o.uri_read_timeout_secs) \
        if any(c.transform == "image" for c in schema.columns) else None
    local = local_runner.is_local_runner(options)
    return StreamPredictConfig(
        schema,
        StreamSource(_reader(o, local), o.replay or o.input_subscription or o.input_topic,
                     "Replay" if o.replay else "ReadPubSub", o.id_attribute,
                     o.max_message_bytes, images, ack_after_write=local and not o.replay),
        StreamModel(model_path, o.model_dir, o.min_batch_size, o.max_batch_size,
                    o.model_refresh_secs, gate, shadow_path),
        sinks_,
        Monitoring(o.window_secs, o.allowed_lateness_secs,
                   common_options.train_statistics(o, model_path, train_stats, schema),
                   o.skew_threshold, slicer))


def _reader(o: StreamPredictArgs, local: bool) -> beam.PTransform:
    """The PubsubMessages source: the --replay file (its events read now), or Pub/Sub. On
    Dataflow, redeliveries and republished messages with the same --id_attribute value are
    dropped (id_label); the DirectRunner has no id_label."""
    if o.replay:
        try:
            return Replay(load_replay(o.replay), o.replay_rate)
        except ValueError as e:
            raise errors.JobError(JOB, str(e))
    try:
        return beam.io.ReadFromPubSub(
            topic=o.input_topic, subscription=o.input_subscription, with_attributes=True,
            timestamp_attribute=o.timestamp_attribute,
            id_label=None if local else o.id_attribute)
    except ValueError as e:  # a malformed topic or subscription path, or project name
        flag = "--input_topic" if o.input_topic else "--input_subscription"
        raise errors.JobError(JOB, f"{flag}: {str(e).splitlines()[0]}")


def build_pipeline(p: beam.Pipeline, cfg: StreamPredictConfig) -> StreamPredictOutputs:
    """Adds the streaming graph to `p`: PubsubMessages from cfg.source.reader (Pub/Sub, the
    --replay file, or a test's TestStream), predicted, their records written."""
    src, model, out, mon = cfg.source, cfg.model, cfg.sinks, cfg.monitoring
    source = p | src.step >> src.reader
    # Rows are (MessageMeta, values): the metadata rides through as the key.
    parsed = source | "Parse" >> typed_outputs(beam.ParDo(
        ParseMessages(JOB, cfg.schema, src.id_attribute,
                      src.images.handler_kwargs() if src.images else None, src.origin,
                      src.max_message_bytes)), Tuple[MessageMeta, Any], "rejects",
        main="rows")
    # Batches are made within a bundle (no max_batch_duration_secs): Beam's stateful
    # cross-bundle batching flushes what it holds by a timer at the end of the global window,
    # after the watermark has passed those rows, so every window downstream dropped them.
    handler = mh.SavedModelHandler(
        model.path, min_batch_size=model.min_batch_size, max_batch_size=model.max_batch_size,
        watch_base=model.model_dir, refresh_secs=model.refresh_secs, gate=model.gate)
    results = parsed.rows | "RunInference" >> RunInference(KeyedModelHandler(handler))
    formatted = results | "Format" >> typed_outputs(
        beam.ParDo(FormatResults(JOB, src.origin)), Prediction, "rejects", MODEL_EVENTS,
        main="predictions", **{MODEL_EVENTS: MonitoringRecord})
    dead = (parsed.rejects, formatted.rejects) | "AllRejects" >> beam.Flatten()
    preds = formatted.predictions
    publish = (lambda topic: local_acks.PublishMessages(topic, out.max_outage_secs)) \
        if src.ack_after_write else None
    written_preds = preds | "WritePredictions" >> WriteJson(
        out.output_topic, out.output_dir, "predictions", mon.window_secs, publish)
    if out.output_table:
        columns = sinks.prediction_columns(cfg.schema.task, "id",
                                           extra=("latency_ms", "event_time"))
        refused = (preds | "WriteBigQuery" >> sinks.WriteBigQuery(out.output_table, columns)
                   | "InsertFailures" >> beam.ParDo(sinks.InsertFailures(JOB)))
        dead_letters = (dead, refused) | "WithRefused" >> beam.Flatten()
    else:
        dead_letters = dead
    written_dead = dead_letters | "WriteRejects" >> WriteJson(
        out.dead_letter_topic, out.dead_letter_dir, "rejects", mon.window_secs, publish)
    if src.ack_after_write:
        acknowledge(preds, written_preds, "Predictions")
        acknowledge(dead_letters, written_dead, "Rejects")
    events = ((preds | "PredEvents" >> beam.Map(Served.of_prediction).with_output_types(Served),
               dead | "RejectEvents" >> beam.Map(Served.of_reject).with_output_types(Served))
              | "Events" >> beam.Flatten())
    stats = events | "Monitor" >> Monitor(mon.window_secs, mon.allowed_lateness_secs)
    # Gate records (version_accepted / version_refused) go out beside the window stats.
    records = [stats, formatted[MODEL_EVENTS]]
    records += window_records(cfg, parsed.rows, results)
    monitoring = tuple(records) | "WithModelEvents" >> beam.Flatten()
    _ = monitoring | "WriteMonitoring" >> WriteJson(
        out.monitoring_topic, out.monitoring_dir, "monitoring", mon.window_secs, publish)
    report_dir = out.output_dir or out.monitoring_dir
    if report_dir:
        _ = monitoring | "Report" >> WriteStreamReport(
            FileSystems.join(report_dir, stream_report.REPORT), src.origin, mon.window_secs)
    return StreamPredictOutputs(preds, dead_letters, monitoring)


def window_records(cfg: StreamPredictConfig, rows, results) -> list:
    """The optional monitoring records per window, beside the window stats: the shadow's
    comparison, the train/serve skew of the rows, the labelled messages' metrics by slice
    (PCollections; labels as in a flat graph, so an update keeps its state)."""
    mon, shadow, schema, records = cfg.monitoring, cfg.model.shadow_path, cfg.schema, []
    if shadow:  # the shadow's comparison per window, beside the window stats
        records.append(results
                       | "Shadow" >> beam.ParDo(ShadowScoreStream(
                           shadow, schema.task, mon.window_secs, schema.label))
                       | "ShadowCompare" >> PerWindow(
                           CombineShadow(schema.task,
                                         shadow_version=versions.model_version(shadow)),
                           mon.window_secs, mon.allowed_lateness_secs))
    if mon.train_statistics:  # train/serve skew of each window's rows
        records.append(rows
                       | "SkewPartials" >> beam.ParDo(RowPartials(
                           kinds_of(mon.train_statistics), mon.window_secs))
                       | "Skew" >> PerWindow(SkewReport(mon.train_statistics,
                                                        mon.skew_threshold),
                                             mon.window_secs, mon.allowed_lateness_secs))
    if mon.slicer is not None:  # labelled messages: metrics by slice per window
        fn = SliceMetricsFn(schema.task, schema.label, mon.slicer)
        records.append(results
                       | "LabelledRows" >> beam.ParDo(LabelledRows(schema.label))
                       | "SlicePartials" >> beam.ParDo(BundlePartials(fn, mon.window_secs))
                       | "SliceMetrics" >> PerWindow(OfPartials(fn), mon.window_secs,
                                                     mon.allowed_lateness_secs))
    return records


def acknowledge(records, written: tuple, name: str) -> None:
    """Acknowledges each record's message once every sink in `written` (PCollections of the
    message ids a sink wrote) has reported it; with no such sink (a BigQuery table alone),
    once its record is made."""
    if not written:
        written = (records | f"Handed{name}" >> beam.Map(
            lambda r: [r.get("message_id")]).with_output_types(WrittenIds),)
    for i, ids in enumerate(written):
        _ = ids | f"Ack{name}{i}" >> beam.ParDo(local_acks.Acknowledge(len(written)))


def run(argv=None, save_main_session=True, test_pipeline=None):
    # Locally, the DirectRunner's streaming engine (the FnApiRunner is batch only), with
    # Pub/Sub pulled in larger bundles (beam_jobs/shared/local_streaming.py).
    options = common_options.job_options(argv, JOB, StreamPredictArgs, __doc__,
                                  local_runner=local_runner.STREAMING_RUNNER)
    options.view_as(SetupOptions).save_main_session = save_main_session
    cfg = launch(parse_args(options), options)
    logging.info("Serving model version %s from %s (refresh every %ss)",
                 versions.model_version(cfg.model.path), cfg.model.model_dir,
                 cfg.model.refresh_secs)
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
        if cfg.source.ack_after_write:  # what it held, not written, goes back to Pub/Sub now
            local_acks.LEDGER.release()
        raise
    return result


if __name__ == "__main__":
    cli.main(JOB, run)  # a finished job skips the ~2 s interpreter teardown
