"""The local runner of the streaming job: Beam's BundleBasedDirectRunner (its streaming
engine; the FnApiRunner is batch only) with Pub/Sub pulled in larger bundles.

Beam 2.77's DirectRunner reads Pub/Sub with `pull(max_messages=10)` per bundle
(`runners/direct/transform_evaluator.py`, `_PubSubReadEvaluator._read_from_pubsub`), and every
bundle pays the runner's fixed cost through the whole graph: ~100 messages/s at most on
2 cores, whatever the job does. Here the same pull asks for up to PULL_MAX_MESSAGES and, once
a message has come, keeps pulling for up to GATHER_SECS: a bundle holds what arrived in that
time (at most PULL_MAX_MESSAGES), so the runner's fixed cost is paid a few times a second
instead of once per handful of messages, for at most GATHER_SECS of added latency. When
nothing is waiting the pull waits as Beam's did. Nothing else changes: Beam's own code still
parses timestamps and attributes and acknowledges what it pulled right after the pull (as it
did), and Dataflow reads with its own Pub/Sub source.

The DirectRunner also makes a new DoFn, and calls its setup(), for every bundle: Beam's
Pub/Sub write (`io/gcp/pubsub.py`, `_PubSubWriteDoFn.setup`) then built a PublisherClient
(a gRPC channel and its threads) per bundle and per output topic and never closed it: the
job's RSS grew by ~8 MB a minute at 1,000 msg/s. Here the writes share one client per
process (Dataflow does not run this DoFn). tests/beam_jobs/test_local_streaming.py fails
if a Beam upgrade changes the code patched here.
"""
from __future__ import annotations

import datetime
import threading
import time
import types
import warnings
from typing import NamedTuple, Optional

from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

# One acknowledge request carries all of a pull's ack ids: Pub/Sub takes up to 2,500 ack ids
# (and 512 KB) per request; 1,000 ids of ~170 bytes stay within both.
PULL_MAX_MESSAGES = 1000
GATHER_SECS = 0.2
GATHER_STEP_SECS = 0.05


class Message(NamedTuple):
    """What Beam's PubsubMessage._from_message reads of a pulled message."""
    data: bytes
    attributes: dict
    message_id: str
    publish_time: Optional[datetime.datetime]
    ordering_key: str


class Received(NamedTuple):
    message: Message
    ack_id: str


def received(response) -> list:
    """A pull's messages read from its protobuf directly: the client's wrappers cost ~10 us
    per field read, a tenth of the job's time at 1,000 msg/s."""
    out = []
    for rm in type(response).pb(response).received_messages:
        m = rm.message
        out.append(Received(Message(
            m.data, dict(m.attributes), m.message_id,
            m.publish_time.ToDatetime(tzinfo=datetime.timezone.utc)
            if m.HasField("publish_time") else None, m.ordering_key), rm.ack_id))
    return out


class LargerPulls:
    """A SubscriberClient whose pulls gather up to `max_messages` over `gather_secs`."""

    def __init__(self, client, max_messages: int = PULL_MAX_MESSAGES,
                 gather_secs: float = GATHER_SECS):
        self._client, self._max, self._gather = client, max_messages, gather_secs

    def pull(self, *args, max_messages: int = 0, **kwargs):
        want = max(max_messages or 0, self._max)
        first = self._client.pull(*args, max_messages=want, **kwargs)  # waits, as Beam's did
        got = received(first)
        subscription = kwargs.get("subscription") or (args[0] if args else None)
        deadline = time.monotonic() + self._gather
        while got and len(got) < want and subscription:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(GATHER_STEP_SECS, left))
            # return_immediately: a pull cut short by its own deadline would leave the
            # messages the server had handed it unacknowledged until their ack deadline (a
            # 10 s delay measured); this one answers at once, empty or not.
            more = self._client.pull(request={"subscription": subscription,
                                              "max_messages": want - len(got),
                                              "return_immediately": True}, timeout=30)
            got.extend(received(more))
        # Beam reads `received_messages` alone (each one's message and ack_id).
        return types.SimpleNamespace(received_messages=got)

    def __getattr__(self, name):
        return getattr(self._client, name)


def pull_larger_bundles() -> None:
    """Patches the DirectRunner's Pub/Sub read (idempotent, this process)."""
    from apache_beam.runners.direct import transform_evaluator as te
    evaluator = te._PubSubReadEvaluator
    if getattr(evaluator, "_larger_pulls", False):
        return
    get_client = evaluator._get_subscriber_client.__func__

    def _get_subscriber_client(cls, transform):
        client = get_client(cls, transform)
        return client if isinstance(client, LargerPulls) else LargerPulls(client)

    evaluator._get_subscriber_client = classmethod(_get_subscriber_client)
    warnings.filterwarnings("ignore", message="The return_immediately flag is deprecated")
    evaluator._larger_pulls = True


_PUBLISHERS: dict = {}  # message ordering on/off -> this process's PublisherClient
_PUBLISHERS_LOCK = threading.Lock()


def shared_publisher(ordered: bool):
    with _PUBLISHERS_LOCK:
        if ordered not in _PUBLISHERS:
            from google.cloud import pubsub
            _PUBLISHERS[ordered] = pubsub.PublisherClient(
                publisher_options=pubsub.types.PublisherOptions(enable_message_ordering=True)
            ) if ordered else pubsub.PublisherClient()
        return _PUBLISHERS[ordered]


def share_publishers() -> None:
    """Patches the DirectRunner's Pub/Sub write to reuse one client (idempotent)."""
    from apache_beam.io.gcp import pubsub
    write = pubsub._PubSubWriteDoFn
    if getattr(write, "_shared_publisher", False):
        return

    def setup(self):
        self._pub_client = shared_publisher(bool(self.with_ordering))
        self._topic = self._pub_client.topic_path(self.project, self.short_topic_name)

    write._beam_setup = write.setup  # kept: the test reads what it replaced
    write.setup = setup
    write._shared_publisher = True


class LocalStreamingRunner(BundleBasedDirectRunner):
    def run_pipeline(self, pipeline, options):
        share_publishers()
        pull_larger_bundles()
        return super().run_pipeline(pipeline, options)
