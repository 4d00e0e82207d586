"""beam_jobs/shared/local_streaming.py: the streaming job's local runner pulls Pub/Sub in larger
bundles, through the one call of Beam's DirectRunner it patches."""
from __future__ import annotations

import inspect
import time

from apache_beam.runners.direct import transform_evaluator as te

from beam_jobs.shared import local_runner, local_streaming


def test_beam_still_reads_pubsub_through_what_the_patch_wraps():
    """Fails when a Beam upgrade changes the code the patch relies on: review
    beam_jobs/shared/local_streaming.py then (the pull size may have been fixed upstream)."""
    read = inspect.getsource(te._PubSubReadEvaluator._read_from_pubsub)
    assert "self._get_subscriber_client(" in read
    assert "max_messages=10" in read  # what the patch raises
    assert ".received_messages" in read and ".ack_id" in read and ".message" in read
    assert isinstance(inspect.getattr_static(te._PubSubReadEvaluator, "_get_subscriber_client"),
                      classmethod)


def test_beam_still_makes_a_publisher_client_in_the_write_setup_the_patch_replaces():
    from apache_beam.io.gcp import pubsub
    write = pubsub._PubSubWriteDoFn
    setup = inspect.getsource(getattr(write, "_beam_setup", write.setup))  # Beam's, if patched
    assert "PublisherClient(" in setup and "self._pub_client =" in setup
    assert "self._topic = self._pub_client.topic_path(" in setup
    assert "self.with_ordering" in setup and "self.short_topic_name" in setup
    flush = inspect.getsource(pubsub._PubSubWriteDoFn._flush)
    assert "self._pub_client.publish(self._topic" in flush


def test_pubsub_writes_share_one_client_per_process(pubsub_emulator):
    import apache_beam as beam
    from apache_beam.io.gcp import pubsub
    local_streaming.share_publishers()
    local_streaming.share_publishers()  # idempotent
    write = beam.io.WriteToPubSub("projects/test-project/topics/shared-a", with_attributes=True)
    other = beam.io.WriteToPubSub("projects/test-project/topics/shared-b")
    fns = [pubsub._PubSubWriteDoFn(t) for t in (write, other, write)]
    for fn in fns:  # what the DirectRunner does once per bundle
        fn.setup()
    assert fns[0]._pub_client is fns[1]._pub_client is fns[2]._pub_client
    assert fns[1]._topic == "projects/test-project/topics/shared-b"


def test_the_streaming_job_runs_on_the_patched_runner_and_counts_as_local():
    from apache_beam.options.pipeline_options import PipelineOptions
    assert local_runner.STREAMING_RUNNER.endswith(local_streaming.LocalStreamingRunner.__name__)
    assert local_runner.is_local_runner(PipelineOptions(["--runner", local_runner.STREAMING_RUNNER]))


class _Key:  # the runner caches a client per applied transform (weakly keyed)
    pass


def test_a_pull_gathers_what_is_waiting_beyond_ten_messages(pubsub_emulator):
    from tools.pubsub_emulator import Topics
    local_streaming.pull_larger_bundles()
    local_streaming.pull_larger_bundles()  # idempotent
    topics = Topics("test-project", f"pull{int(time.time() * 1000)}", names=("in",))
    futures = [topics.pub.publish(topics.topics["in"], f"m{i}".encode()) for i in range(300)]
    for f in futures:
        f.result(timeout=30)
    key = _Key()
    client = te._PubSubReadEvaluator._get_subscriber_client(key)
    assert isinstance(client, local_streaming.LargerPulls)
    assert te._PubSubReadEvaluator._get_subscriber_client(key)._client is client._client
    started = time.monotonic()
    got = client.pull(subscription=topics.subs["in"], max_messages=10, timeout=30)
    took = time.monotonic() - started
    datas = sorted(m.message.data.decode() for m in got.received_messages)
    assert datas == sorted(f"m{i}" for i in range(300))  # all of them, once, in one bundle
    assert took < local_streaming.GATHER_SECS + 5
    client.acknowledge(subscription=topics.subs["in"],
                       ack_ids=[m.ack_id for m in got.received_messages])
    # A trickle: one message waiting makes a bundle after at most the gathering time.
    topics.publish("in", b"alone", id="a1")
    started = time.monotonic()
    got = client.pull(subscription=topics.subs["in"], max_messages=10, timeout=30)
    assert [m.message.data for m in got.received_messages] == [b"alone"]
    assert time.monotonic() - started < local_streaming.GATHER_SECS + 2
    # What Beam builds its PubsubMessage from: attributes, id and a UTC publish time.
    from apache_beam.io.gcp.pubsub import PubsubMessage
    from apache_beam.utils.timestamp import Timestamp
    msg = PubsubMessage._from_message(got.received_messages[0].message)
    assert msg.attributes == {"id": "a1"} and msg.message_id
    assert abs(float(Timestamp.from_utc_datetime(msg.publish_time)) - time.time()) < 60
