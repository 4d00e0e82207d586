"""stream_predict under TestStream: windowed monitoring, dead letters, late data, the model
switch (exactly once, by the version in force), and the --replay mode."""
import base64
import dataclasses
import json
import shutil

import apache_beam as beam
import pytest
import tensorflow as tf
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_stream import TestStream as EventStream
from apache_beam.transforms.window import TimestampedValue

from beam_jobs import stream_predict
from tests.helpers import GOOD, read_jsonl, small_train_config
from tests.helpers import make_example as _example


def msg(mid, data=None, **attrs):
    payload = json.dumps(GOOD if data is None else data).encode() if not isinstance(data, bytes) \
        else data
    return PubsubMessage(payload, dict(attrs, id=mid), message_id=mid)


@pytest.fixture(scope="module")
def versions(trained, tmp_path_factory):
    """Two different model versions: 100 (the session model) and 200 (trained differently)."""
    from training import train_and_evaluate
    data_dir, _, m = trained
    other = train_and_evaluate(small_train_config(
        data_dir, str(tmp_path_factory.mktemp("job2")), epochs=1, hidden_units=[8], seed=7))
    store = tmp_path_factory.mktemp("versions")
    shutil.copytree(m["export_dir"], store / "100")
    shutil.copytree(other["export_dir"], store / "200")
    return store


def _cfg(tmp_path, model_dir, *extra):
    args = ["--streaming", "--model_dir", str(model_dir), "--input_topic", "projects/test-project/topics/in",
            "--output_dir", str(tmp_path / "out"), "--min_batch_size", "1",
            "--max_batch_size", "4", *extra]
    options = PipelineOptions(args)
    return stream_predict.launch(stream_predict.parse_args(options), options), options


class _Source(beam.PTransform):
    """PubsubMessages from a TestStream; with `control`, its "control" output drives it."""

    def __init__(self, stream, control=None):
        super().__init__()
        self.stream, self.control = stream, control

    def expand(self, pbegin):
        events = pbegin | self.stream
        if not self.control:
            return events
        _ = events["control"] | "Control" >> beam.Map(self.control)
        return events["msgs"]


def _run(cfg, options, stream, control=None):
    options.view_as(StandardOptions).streaming = True
    with beam.Pipeline(options=options) as p:
        reader = _Source(stream, control)
        stream_predict.build_pipeline(p, dataclasses.replace(
            cfg, source=dataclasses.replace(cfg.source, reader=reader)))


def _outputs(tmp_path):
    out = tmp_path / "out"
    return (read_jsonl(str(out / "predictions-*.jsonl")), read_jsonl(str(out / "rejects" / "*")),
            [m for m in read_jsonl(str(out / "monitoring" / "*"))
             if m["event"] == "window_stats"])


@pytest.mark.slow
def test_windowed_monitoring_counts_and_dead_letters(versions, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(versions / "100", model / "100")
    cfg, options = _cfg(tmp_path, model, "--window_secs", "10")
    stream = (EventStream()
              .add_elements([TimestampedValue(msg(f"a{i}"), i) for i in range(5)])
              .add_elements([TimestampedValue(msg("bad-json", b"{oops"), 6),
                             TimestampedValue(msg("bad-value", dict(GOOD, pickup_latitude="x")), 7),
                             TimestampedValue(msg("bad-example", b"\x00\x01garbage"), 8)])
              .advance_watermark_to(10)
              .add_elements([TimestampedValue(msg(f"b{i}"), 10 + i) for i in range(3)])
              .advance_watermark_to_infinity())
    _run(cfg, options, stream)
    preds, rejects, monitoring = _outputs(tmp_path)
    assert sorted(p["id"] for p in preds) == ["a0", "a1", "a2", "a3", "a4", "b0", "b1", "b2"]
    assert all(p["model_version"] == "100" and p["latency_ms"] >= 0 for p in preds)
    assert {r["id"]: r["reason"] for r in rejects} == {
        "bad-json": "invalid_json", "bad-value": "unparsable_number", "bad-example": "bad_example"}
    by_window = {m["window_start"]: m for m in monitoring}
    assert set(by_window) == {0.0, 10.0}
    w0, w1 = by_window[0.0], by_window[10.0]
    assert (w0["predictions"], w0["rejects"]) == (5, 3)
    assert w0["rejects_by_reason"] == {"bad_example": 1, "invalid_json": 1, "unparsable_number": 1}
    assert (w1["predictions"], w1["rejects"]) == (3, 0)
    lat = w0["latency_ms"]
    assert 0 <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]


@pytest.mark.slow
def test_labelled_messages_give_metrics_by_slice_per_window(versions, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(versions / "100", model / "100")
    cfg, options = _cfg(tmp_path, model, "--window_secs", "10", "--slice_by", "payment_type")
    fares = {"Cash": [8.0, 9.5, 30.0], "Credit Card": [12.0, 7.25]}
    labelled = [msg(f"{pay}-{i}", dict(GOOD, payment_type=pay, fare_amount=fare))
                for pay, values in fares.items() for i, fare in enumerate(values)]
    stream = (EventStream()
              .add_elements([TimestampedValue(m, i) for i, m in enumerate(labelled)])
              .add_elements([TimestampedValue(msg("no-label"), 6)])  # predicted, not scored
              .advance_watermark_to_infinity())
    _run(cfg, options, stream)
    preds = {p["id"]: p["prediction"] for p in _outputs(tmp_path)[0]}
    records = [m for m in read_jsonl(str(tmp_path / "out" / "monitoring" / "*"))
               if m["event"] == "slice_metrics"]
    assert len(records) == 1 and records[0]["labelled"] == 5 and len(preds) == 6
    slices = records[0]["slices"]["payment_type"]
    for pay, values in fares.items():
        errors = [preds[f"{pay}-{i}"] - fare for i, fare in enumerate(values)]
        assert slices[pay]["examples"] == len(values)
        assert slices[pay]["rmse"] == pytest.approx(
            (sum(e * e for e in errors) / len(errors)) ** 0.5, rel=1e-5)
    page = (tmp_path / "out" / "report.html").read_text()
    assert "Labelled messages by slice" in page and "<td>Credit Card</td>" in page


@pytest.mark.slow
def test_late_data_is_predicted_and_counted_within_allowed_lateness(versions, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(versions / "100", model / "100")
    cfg, options = _cfg(tmp_path, model, "--window_secs", "10", "--allowed_lateness_secs", "30")
    stream = (EventStream()
              .add_elements([TimestampedValue(msg("on-time-1"), 1),
                             TimestampedValue(msg("on-time-2"), 2)])
              .advance_watermark_to(15)                       # window [0, 10) fires on time
              .add_elements([TimestampedValue(msg("late"), 3)])  # late, within the lateness
              .advance_watermark_to(100)                      # past end + allowed lateness
              .add_elements([TimestampedValue(msg("too-late"), 4)])
              .advance_watermark_to_infinity())
    _run(cfg, options, stream)
    preds, _, monitoring = _outputs(tmp_path)
    # Every message is predicted, however late: nothing is lost.
    assert sorted(p["id"] for p in preds) == ["late", "on-time-1", "on-time-2", "too-late"]
    panes = sorted((m["pane_index"], m["pane"], m["predictions"]) for m in monitoring
                   if m["window_start"] == 0.0)
    # Monitoring: the on-time pane, then a late pane that accumulates the late message; the
    # message past the allowed lateness is not counted in its (expired) window.
    assert panes == [(0, "ON_TIME", 2), (1, "LATE", 3)]


@pytest.mark.slow
def test_model_switch_predicts_each_message_once_by_the_version_in_force(versions, tmp_path):
    base = tmp_path / "models"
    shutil.copytree(versions / "100", base / "100")
    # 200 is a weaker model on purpose (its predictions differ): the swap mechanics are the
    # subject here, the gate that would refuse it is tests/inference/test_gate.py's.
    cfg, options = _cfg(tmp_path, base, "--model_refresh_secs", "0", "--model_gate", "off")

    def publish_new_version(_):
        # A new export appearing under the base, as training.task writes one.
        shutil.copytree(str(versions / "200"), str(base / "200"))

    stream = (EventStream()
              .add_elements([TimestampedValue(msg(f"before{i}", dict(GOOD, passenger_count=i)), i)
                             for i in range(6)], tag="msgs")
              .advance_processing_time(1)
              .add_elements(["publish"], tag="control")
              .advance_processing_time(1)
              .add_elements([TimestampedValue(msg(f"after{i}", dict(GOOD, passenger_count=i)),
                                              10 + i) for i in range(6)], tag="msgs")
              .advance_watermark_to_infinity(tag="msgs")
              .advance_watermark_to_infinity(tag="control"))
    _run(cfg, options, stream, control=publish_new_version)
    preds, rejects, _ = _outputs(tmp_path)
    ids = [p["id"] for p in preds]
    assert len(ids) == len(set(ids)) == 12 and not rejects  # each exactly once
    version = {p["id"]: p["model_version"] for p in preds}
    assert {version[f"before{i}"] for i in range(6)} == {"100"}
    assert {version[f"after{i}"] for i in range(6)} == {"200"}
    # And "200" really is the other model: its predictions match it, not version 100.
    sig200 = tf.saved_model.load(str(versions / "200")).signatures["predict_raw"]
    sig100 = tf.saved_model.load(str(versions / "100")).signatures["predict_raw"]
    raw = {k: tf.constant([v]) for k, v in GOOD.items() if k != "passenger_count"}
    raw["passenger_count"] = tf.constant([3], tf.int64)
    p200 = float(sig200(**raw)["predictions"].numpy()[0])
    p100 = float(sig100(**raw)["predictions"].numpy()[0])
    got = {p["id"]: p["prediction"] for p in preds}
    assert got["after3"] == pytest.approx(p200, abs=1e-4)
    assert got["before3"] == pytest.approx(p100, abs=1e-4)
    assert abs(p200 - p100) > 1e-3


@pytest.mark.slow
def test_replay_mode_runs_the_same_pipeline(versions, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(versions / "100", model / "100")
    lines = [json.dumps({"id": f"e{i}", "event_time": 1_700_000_000 + i, "data": GOOD})
             for i in range(20)]
    lines.append(json.dumps({"id": "ex", "event_time": 1_700_000_021,
                             "data_b64": base64.b64encode(_example(GOOD)).decode()}))
    lines.append(json.dumps(dict(GOOD, pickup_datetime="soon")))  # features-only line: bad
    lines.append("not json at all")
    src = tmp_path / "events.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    stream_predict.run(["--streaming", "--model_dir", str(model), "--replay", str(src),
                        "--replay_rate", "100", "--output_dir", str(out), "--window_secs", "5"])
    preds = read_jsonl(str(out / "predictions-*.jsonl"))
    rejects = read_jsonl(str(out / "rejects" / "*.jsonl"))
    assert sorted(p["id"] for p in preds) == sorted([f"e{i}" for i in range(20)] + ["ex"])
    assert {r["id"]: r["reason"] for r in rejects} == {"replay-22": "unparsable_datetime",
                                                      "replay-23": "bad_example"}
    direct = [p["prediction"] for p in preds if p["id"] == "ex"][0]
    assert direct == pytest.approx([p["prediction"] for p in preds if p["id"] == "e0"][0], abs=1e-5)
    monitoring = read_jsonl(str(out / "monitoring" / "*.jsonl"))
    assert sum(m["predictions"] for m in monitoring
               if m["pane"] == "ON_TIME" and m["event"] == "window_stats") == 21
    page = (out / "report.html").read_text()  # rewritten by the pipeline as windows closed
    assert '<td>predictions</td><td class="n">21</td>' in page
    assert '<td>rejects</td><td class="n">2</td>' in page


@pytest.mark.parametrize("args, message", [
    (["--model_dir", "{m}", "--output_dir", "{tmp}"], "exactly one of"),
    (["--model_dir", "{m}", "--input_topic", "t", "--replay", "f", "--output_dir", "{tmp}"],
     "exactly one of"),
    (["--model_dir", "{m}", "--input_topic", "t"], "--output_topic"),
    (["--model_dir", "{tmp}/none", "--input_topic", "t", "--output_dir", "{tmp}"],
     "cannot read the model"),
    (["--model_dir", "{m}", "--replay", "f", "--output_dir", "{tmp}", "--runner",
      "DataflowRunner", "--project", "p", "--region", "r", "--temp_location", "gs://b/t"],
     "--replay is a local"),
])
def test_bad_arguments_fail_fast(versions, tmp_path, args, message):
    args = ["--streaming"] + [a.format(m=versions / "100", tmp=tmp_path) for a in args]
    with pytest.raises(SystemExit) as e:
        stream_predict.run(args)
    assert message in str(e.value.code) and str(e.value.code).startswith("stream_predict: error:")


def test_streaming_flag_is_required(versions, tmp_path):
    with pytest.raises(SystemExit, match="add --streaming"):
        stream_predict.run(["--model_dir", str(versions / "100"), "--input_topic", "t",
                            "--output_dir", str(tmp_path)])


def test_a_malformed_topic_is_one_line_at_launch(versions, tmp_path):
    """The Pub/Sub read is made at launch: a topic that is not projects/P/topics/T fails
    there, in one line, before a pipeline is built."""
    with pytest.raises(SystemExit, match="projects/<project>/topics/<topic>"):
        stream_predict.run(["--streaming", "--model_dir", str(versions / "100"),
                            "--input_topic", "in", "--output_dir", str(tmp_path)])


def test_stream_predict_builds_from_a_config_the_test_constructs(trained, tmp_path):
    """build_pipeline reads nothing but its config (no launch, no options): TestStream
    messages in, predictions and dead letters checked with assert_that."""
    from apache_beam.testing.util import assert_that, equal_to

    from beam_jobs.stream_predict_config import StreamModel, StreamSinks, StreamSource
    from inference.model import versions as model_versions
    model_path = model_versions.resolve_model_dir(trained[2]["export_dir"])
    stream = (EventStream()
              .add_elements([TimestampedValue(msg(f"m{i}"), i) for i in range(4)]
                            + [TimestampedValue(msg("bad", b"{oops"), 5)])
              .advance_watermark_to_infinity())
    cfg = stream_predict.StreamPredictConfig(  # no gate, no skew report, no refresh
        schema=model_versions.load_raw_schema(model_path),
        source=StreamSource(_Source(stream), "projects/test-project/topics/in"),
        model=StreamModel(model_path, model_path, min_batch_size=1, max_batch_size=4,
                          refresh_secs=-1),
        sinks=StreamSinks(output_dir=str(tmp_path / "out"),
                          dead_letter_dir=str(tmp_path / "rejects"),
                          monitoring_dir=str(tmp_path / "mon")))
    options = PipelineOptions(["--streaming"])
    with beam.Pipeline(options=options) as p:
        out = stream_predict.build_pipeline(p, cfg)
        assert isinstance(out, stream_predict.StreamPredictOutputs)
        # Typed records in flight: Predictions keyed by message id, DeadLetters,
        # MonitoringRecords (serialised only at the sinks).
        assert_that(out.predictions | beam.Map(lambda r: (type(r).__name__, r.key_field,
                                                          r.key, r.extras["message_id"])),
                    equal_to([("Prediction", "id", f"m{i}", f"m{i}") for i in range(4)]),
                    label="predicted")
        def one_window_of_stats(records):  # the 5 messages lie in one 60 s window
            assert [(type(r).__name__, r.event, r.figures["predictions"], r.figures["rejects"])
                    for r in records] == [("MonitoringRecord", "window_stats", 4, 1)], records
        assert_that(out.monitoring, one_window_of_stats, label="monitoring")
        assert_that(out.dead_letters | beam.Map(lambda r: (r.get("id"), r.reason)),
                    equal_to([("bad", "invalid_json")]), label="dead_letters")
