"""The Pub/Sub path end to end: the real google-cloud-pubsub client and Beam's ReadFromPubSub /
WriteToPubSub, against tests/fake_pubsub.py (a local stand-in for the Pub/Sub gRPC API; no
emulator can be installed here)."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.fake_pubsub import FakePubSub
from tests.helpers import ROOT

GOOD = {"pickup_datetime": "2025-06-02 08:15:00", "pickup_longitude": -73.95,
        "pickup_latitude": 40.75, "dropoff_longitude": -73.9, "dropoff_latitude": 40.8,
        "passenger_count": 1, "payment_type": "Cash", "company": "Sun Taxi"}


@pytest.fixture
def pubsub(monkeypatch):
    fake = FakePubSub()
    host = fake.start()
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", host)
    yield host
    fake.stop()


def _pull_all(sub_client, sub, want, timeout, proc):
    got, deadline = [], time.time() + timeout
    while len(got) < want and time.time() < deadline and proc.poll() is None:
        resp = sub_client.pull(subscription=sub, max_messages=50, timeout=5)
        if resp.received_messages:
            sub_client.acknowledge(subscription=sub,
                                   ack_ids=[m.ack_id for m in resp.received_messages])
            got.extend(resp.received_messages)
    return got


@pytest.mark.slow
def test_stream_predict_through_pubsub(pubsub, trained, tmp_path):
    from google.cloud import pubsub_v1
    model = tmp_path / "m"
    shutil.copytree(trained[2]["export_dir"], model / "100")
    pub, sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    project = "test-project"
    topics = {n: pub.topic_path(project, n) for n in ("in", "out", "dead", "mon")}
    for t in topics.values():
        pub.create_topic(name=t)
    subs = {n: sub.subscription_path(project, f"{n}-sub") for n in topics}
    for n, s in subs.items():
        sub.create_subscription(name=s, topic=topics[n])

    good_ids = [f"g{i}" for i in range(12)]
    for mid in good_ids:
        pub.publish(topics["in"], json.dumps(GOOD).encode(), id=mid).result()
    pub.publish(topics["in"], b"{broken", id="bad1").result()
    pub.publish(topics["in"], json.dumps(dict(GOOD, pickup_latitude="x")).encode(),
                id="bad2").result()

    env = dict(os.environ, PUBSUB_EMULATOR_HOST=pubsub)
    proc = subprocess.Popen(
        [sys.executable, "-m", "beam_jobs.stream_predict", "--streaming",
         "--model_dir", str(model), "--input_subscription", subs["in"],
         "--output_topic", topics["out"], "--dead_letter_topic", topics["dead"],
         "--monitoring_topic", topics["mon"], "--window_secs", "2",
         "--min_batch_size", "1", "--max_batch_size", "8", "--project", project],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        outs = _pull_all(sub, subs["out"], len(good_ids), timeout=180, proc=proc)
        dead = _pull_all(sub, subs["dead"], 2, timeout=60, proc=proc)
        running = proc.poll() is None  # a streaming job runs until it is stopped
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=30)
    assert running, f"the streaming job exited by itself: {err[-3000:]}"
    records = [json.loads(m.message.data) for m in outs]
    assert sorted(r["id"] for r in records) == sorted(good_ids), err[-3000:]
    for m in outs:  # attributes carry the id and version for idempotent downstream writes
        rec = json.loads(m.message.data)
        assert m.message.attributes["id"] == rec["id"]
        assert m.message.attributes["model_version"] == "100" == rec["model_version"]
        assert rec["latency_ms"] >= 0 and isinstance(rec["prediction"], float)
    assert {json.loads(m.message.data)["id"]: json.loads(m.message.data)["reason"]
            for m in dead} == {"bad1": "invalid_json", "bad2": "unparsable_number"}
