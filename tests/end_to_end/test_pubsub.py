"""The Pub/Sub path end to end on the real Pub/Sub emulator (tools/pubsub_emulator.py): the
google-cloud-pubsub client and Beam's ReadFromPubSub / WriteToPubSub in a real
`python -m beam_jobs.stream_predict` process. Skipped, with how to install it, where the
emulator is absent."""
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers import ROOT
from tools.pubsub_emulator import Topics

GOOD = {"pickup_datetime": "2025-06-02 08:15:00", "pickup_longitude": -73.95,
        "pickup_latitude": 40.75, "dropoff_longitude": -73.9, "dropoff_latitude": 40.8,
        "passenger_count": 1, "payment_type": "Cash", "company": "Sun Taxi"}
PROJECT = "test-project"


@pytest.fixture
def topics(pubsub_emulator, request):
    return Topics(PROJECT, request.node.name.replace("_", "-")[:40])


def _start_job(topics, model, *extra):
    return subprocess.Popen(
        [sys.executable, "-m", "beam_jobs.stream_predict", "--streaming",
         "--model_dir", str(model), "--input_subscription", topics.subs["in"],
         "--output_topic", topics.topics["out"], "--dead_letter_topic", topics.topics["dead"],
         "--monitoring_topic", topics.topics["mon"], "--window_secs", "2",
         "--min_batch_size", "1", "--max_batch_size", "8", "--project", PROJECT, *extra],
        cwd=ROOT, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)


def _stop(proc) -> str:
    running = proc.poll() is None  # a streaming job runs until it is stopped
    proc.kill()
    _, err = proc.communicate(timeout=30)
    assert running, f"the streaming job exited by itself: {err[-3000:]}"
    return err


def _publish_steadily(topics, prefix: str, n: int, every: float) -> threading.Thread:
    """A thread publishing good messages `<prefix><i>` every `every` s until `.stop` is set;
    `.sent` lists their ids."""
    stop, sent = threading.Event(), []

    def run():
        for i in range(n):
            if stop.is_set():
                return
            topics.publish("in", json.dumps(GOOD).encode(), id=f"{prefix}{i}")
            sent.append(f"{prefix}{i}")
            time.sleep(every)
    thread = threading.Thread(target=run, daemon=True)
    thread.stop, thread.sent = stop, sent
    thread.start()
    return thread


@pytest.mark.slow
def test_every_message_once_as_a_prediction_or_a_dead_letter(topics, trained, tmp_path):
    """Malformed data, event-time attributes that are no time and a 9 MB message (the
    emulator's client channel took 4 MiB) each come out, and none stops the others pulled
    with it (a bad timestamp failed the whole pull, redelivered forever)."""
    model = tmp_path / "m"
    shutil.copytree(trained[2]["export_dir"], model / "100")
    now_ms = str(int(time.time() * 1000))
    good_ids = [f"g{i}" for i in range(12)]
    for mid in good_ids:
        topics.publish("in", json.dumps(GOOD).encode(), id=mid, ts=now_ms)
    topics.publish("in", b"{broken", id="bad1")
    topics.publish("in", json.dumps(dict(GOOD, pickup_latitude="x")).encode(), id="bad2")
    for i, ts in enumerate(("not-a-time", "1e30", "99999999999999999999")):
        topics.publish("in", json.dumps(GOOD).encode(), id=f"ts{i}", ts=ts)
    topics.publish("in", json.dumps(dict(GOOD, company="c" * 9_000_000)).encode(), id="big",
                   ts=now_ms)
    proc = _start_job(topics, model, "--timestamp_attribute", "ts")
    try:
        outs = topics.pull("out", len(good_ids) + 1, timeout=180, proc=proc)
        dead = topics.pull("dead", 5, timeout=60, proc=proc)
        # The ack deadline is 10 s: a message the job took but did not ack would come again
        # within 10 s of the job's pull, which came before the outputs pulled above.
        late = topics.pull("out", 1, timeout=12, proc=proc) + \
            topics.pull("dead", 1, timeout=2, proc=proc)
        # Windows close as the watermark passes them, which new messages move on.
        trickle = _publish_steadily(topics, "t", 2000, 0.25)
        mon = topics.pull("mon", 2, timeout=120, proc=proc)  # window stats and skew
    finally:
        trickle.stop.set()
        err = _stop(proc)
    # The 9 MB message is a valid row (its string is hashed): a prediction.
    records = [json.loads(m.message.data) for m in outs]
    assert sorted(r["id"] for r in records) == sorted(good_ids + ["big"]), err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert late == [], [m.message.attributes.get("id") for m in late]
    outs = [m for m in outs if m.message.attributes["id"] != "big"]
    for m in outs:  # attributes carry the id and version for idempotent downstream writes
        rec = json.loads(m.message.data)
        assert m.message.attributes["id"] == rec["id"]
        assert m.message.attributes["model_version"] == "100" == rec["model_version"]
        assert rec["latency_ms"] >= 0 and isinstance(rec["prediction"], float)
    letters = {json.loads(m.message.data)["id"]: json.loads(m.message.data) for m in dead}
    assert {k: v["reason"] for k, v in letters.items()} == {
        "bad1": "invalid_json", "bad2": "unparsable_number", "ts0": "bad_attribute",
        "ts1": "bad_attribute", "ts2": "bad_attribute"}
    assert letters["ts0"]["detail"].startswith("attribute ts='not-a-time' is neither")
    for m in outs + dead:  # the Pub/Sub message id a consumer drops redeliveries by
        assert m.message.attributes["message_id"] == json.loads(m.message.data)["message_id"]
    windows = [w for w in (json.loads(m.message.data) for m in mon)
               if w["event"] == "window_stats"]
    assert windows and all(w["window_end"] - w["window_start"] == 2 for w in windows)
    assert all(w["predictions"] + w["rejects"] >= 1 for w in windows)


@pytest.mark.slow
def test_a_new_model_version_is_swapped_in_while_messages_flow(topics, trained, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(trained[2]["export_dir"], model / "100")
    proc = _start_job(topics, model, "--model_refresh_secs", "1")
    publisher = _publish_steadily(topics, "m", 400, 0.05)
    sent, stop = publisher.sent, publisher.stop
    try:
        first = topics.pull("out", 20, timeout=180, proc=proc)
        shutil.copytree(trained[2]["export_dir"], model / "200")  # the newer version appears
        deadline, rest = time.time() + 120, []
        while time.time() < deadline and proc.poll() is None:
            rest += topics.pull("out", 10, timeout=10, proc=proc)
            if any(m.message.attributes["model_version"] == "200" for m in rest[-10:]):
                break
        stop.set()
        publisher.join(timeout=60)
        rest += topics.pull("out", len(sent) - len(first) - len(rest), timeout=90, proc=proc)
    finally:
        stop.set()
        err = _stop(proc)
    versions = [m.message.attributes["model_version"] for m in first + rest]
    ids = [m.message.attributes["id"] for m in first + rest]
    assert sorted(ids) == sorted(sent), (len(ids), len(sent), err[-2000:])  # each once
    assert versions[0] == "100" and versions[-1] == "200", versions
    assert set(versions) == {"100", "200"}


@pytest.mark.slow
def test_the_streaming_demo_reconciles_and_shows_both_model_versions(
        pubsub_emulator, trained, taxi_csv, tmp_path, capsys):
    from tools import demo_stream
    with pytest.raises(SystemExit) as e:
        demo_stream.main(["--model_dir", trained[2]["export_dir"], "--data", taxi_csv[0],
                          "--work_dir", str(tmp_path), "--rows", "400", "--rate", "40",
                          "--timeout", "120"])
    out = capsys.readouterr().out
    assert e.value.code == 0, out[-3000:]
    summary = out[out.index("model versions seen:"):]
    assert "'1'" in summary and "'2'" in summary, summary
    reconciled = [line for line in out.splitlines() if line.startswith("reconciled: ")]
    assert reconciled and reconciled[0].startswith("reconciled: 400 published = "), out[-2000:]
    assert "reason=invalid_json" in out  # the malformed messages came back as dead letters
    assert not os.path.exists(tmp_path / "models")  # the model copies are removed
