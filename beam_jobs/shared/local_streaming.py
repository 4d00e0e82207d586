"""The local runner of the streaming job: Beam's BundleBasedDirectRunner (its streaming
engine; the FnApiRunner is batch only) with its Pub/Sub read replaced.

Beam 2.77's DirectRunner reads Pub/Sub in `_PubSubReadEvaluator._read_from_pubsub`
(`runners/direct/transform_evaluator.py`): `pull(max_messages=10)` per bundle, the pull
acknowledged at once, the timestamp attribute parsed with a raise. Here, on this runner only:
- Larger bundles. Every bundle pays the runner's fixed cost through the whole graph
  (~100 messages/s at most on 2 cores with 10 a bundle). A pull asks for up to
  PULL_MAX_MESSAGES and, once a message has come, keeps pulling for up to GATHER_SECS (and
  GATHER_MAX_BYTES), for at most GATHER_SECS of added latency.
- Nothing acknowledged before it is written: pulled messages are held in
  local_acks.LEDGER, and acknowledged when their prediction or dead letter is written.
- No message stops the others: a timestamp attribute that cannot be read becomes the
  message's dead letter (streaming.ATTRIBUTE_ERROR), not a failed pull redelivered forever.
- Messages up to 10 MB are read: the Pub/Sub client's emulator channel has gRPC's 4 MiB
  receive limit (the service's channel has none); a pull too large for the limit is made
  again one message at a time.
- An unreachable subscription (the emulator restarting, a subscription recreated) is
  retried with backoff for --max_outage_secs, then the job stops in one line.
And one cost of the runner's own: whether a DoFn is stateful, asked per bundle
(beam_lookups.py).
Dataflow reads with its own Pub/Sub source. tests/beam_jobs/test_local_streaming.py fails if
a Beam upgrade changes the code replaced here.
"""
from __future__ import annotations

import datetime
import logging
import os
import threading
import time
import weakref
from typing import List, NamedTuple, Optional, Tuple

from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.utils.timestamp import Timestamp

from beam_jobs.shared import beam_lookups
from beam_jobs.shared.errors import RunFailed
from beam_jobs.shared.local_acks import LEDGER
from inference.streaming import ATTRIBUTE_ERROR, MAX_MESSAGE_BYTES

# One acknowledge request carries all of a pull's ack ids: Pub/Sub takes up to 2,500 ack ids
# (and 512 KB) per request; 1,000 ids of ~170 bytes stay within both.
PULL_MAX_MESSAGES = 1000
GATHER_SECS = 0.1
GATHER_STEP_SECS = 0.05
GATHER_MAX_BYTES = 64 << 20    # a bundle's messages, in bytes
PUBSUB_MAX_BYTES = 10_000_000  # Pub/Sub's own limit on a message (and on a publish)
MAX_OUTAGE_SECS = 300          # default of --max_outage_secs
PULL_TIMEOUT_SECS = 30
# Event times a message may give: RFC 3339's years (far inside Beam's own bounds).
EARLIEST, LATEST = Timestamp(0), Timestamp(253402300800)
# Messages held unacknowledged at most: past it the read waits for the sinks (a topic being
# retried, a long file window) instead of pulling into memory without bound.
MAX_HELD_MESSAGES = 200_000

log = logging.getLogger(__name__)


class SourceUnavailable(RunFailed):
    """The subscription could not be read for longer than --max_outage_secs."""


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


def subscriber_client(max_message_bytes: int = MAX_MESSAGE_BYTES):
    """A SubscriberClient that can receive a pull of the largest message Pub/Sub takes.

    On the emulator the client opens a plain channel with gRPC's default 4 MiB receive
    limit, so a 9 MB message failed every pull; the service's channel has no limit."""
    from google.cloud import pubsub
    host = os.environ.get("PUBSUB_EMULATOR_HOST")
    if not host:
        return pubsub.SubscriberClient()
    import grpc
    from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport
    limit = max(max_message_bytes, PUBSUB_MAX_BYTES) + (1 << 20)
    channel = grpc.insecure_channel(host, options=[
        ("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", -1)])
    return pubsub.SubscriberClient(transport=SubscriberGrpcTransport(channel=channel))


def _is(error, *names) -> bool:
    return type(error).__name__ in names


def pull(client, subscription: str, max_messages: int = PULL_MAX_MESSAGES,
         gather_secs: float = GATHER_SECS) -> List[Received]:
    """Up to `max_messages` messages: one pull that waits for the first (as Beam's did),
    then what else arrives within `gather_secs`, up to GATHER_MAX_BYTES."""
    got = _pull(client, subscription, max_messages, wait=True)
    size = sum(len(r.message.data) for r in got)
    deadline = time.monotonic() + gather_secs
    while got and len(got) < max_messages and size < GATHER_MAX_BYTES:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(GATHER_STEP_SECS, left))
        more = _pull(client, subscription, max_messages - len(got), wait=False)
        got.extend(more)
        size += sum(len(r.message.data) for r in more)
    return got


def _pull(client, subscription: str, max_messages: int, wait: bool) -> List[Received]:
    # return_immediately: a pull cut short by its own deadline would leave the messages the
    # server had handed it unacknowledged until their ack deadline (a 10 s delay measured);
    # this one answers at once, empty or not.
    request = {"subscription": subscription, "max_messages": max_messages,
               "return_immediately": not wait}
    try:
        return received(client.pull(request=request, timeout=PULL_TIMEOUT_SECS))
    except Exception as e:
        if _is(e, "DeadlineExceeded"):  # nothing came within the pull's time
            return []
        if _is(e, "ResourceExhausted") and max_messages > 1:
            # Several large messages together over the receive limit: one at a time.
            return received(client.pull(request=dict(request, max_messages=1),
                                        timeout=PULL_TIMEOUT_SECS))
        raise


def event_time(message: Message, attribute: Optional[str]) -> Tuple[Timestamp, Optional[str]]:
    """A message's event time: its `attribute` (milliseconds since the epoch or RFC 3339, as
    Beam reads it) or its publish time; and why the attribute could not be read, if so
    (then the publish time, or now, stands in and the message becomes a dead letter)."""
    fallback = (Timestamp.from_utc_datetime(message.publish_time)
                if message.publish_time is not None else Timestamp.now())
    if not attribute or attribute not in message.attributes:
        return fallback, None
    text = message.attributes[attribute]
    try:
        ts = Timestamp(micros=int(text) * 1000)
    except (ValueError, OverflowError):
        try:
            ts = Timestamp.from_rfc3339(text)
        except (ValueError, OverflowError, TypeError):
            return fallback, (f"attribute {attribute}={_quote(text)} is neither milliseconds "
                              "since the epoch nor an RFC 3339 time")
    if ts.precision() > Timestamp.MICROS_PRECISION:  # as Beam and Dataflow do
        ts = ts.to_precision(Timestamp.MICROS_PRECISION, allow_lossy_conversion=True)
    if not EARLIEST <= ts < LATEST:
        return fallback, (f"attribute {attribute}={_quote(text)} is outside the years "
                          "1970-9999")
    return ts, None


def _quote(text: str) -> str:
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


class SubscriptionReader:
    """One subscription's reads for the runner: pulled messages held unacknowledged
    (local_acks.LEDGER), unreadable attributes marked for a dead letter, an outage retried
    with backoff for `max_outage_secs`."""

    def __init__(self, subscription: str, max_message_bytes: int = MAX_MESSAGE_BYTES,
                 max_outage_secs: float = MAX_OUTAGE_SECS, ledger=LEDGER):
        self.subscription = subscription
        self.client = subscriber_client(max_message_bytes)
        self.max_outage_secs = max_outage_secs
        self.ledger = ledger
        self._outage_since: Optional[float] = None
        self._backoff = 0.5
        self._warned = 0.0

    def read(self, timestamp_attribute: Optional[str]) -> list:
        from apache_beam.io.gcp.pubsub import PubsubMessage
        if self.ledger.pending() >= MAX_HELD_MESSAGES:
            time.sleep(GATHER_SECS)
            return []
        try:
            got = pull(self.client, self.subscription)
        except Exception as e:
            self._outage(e)
            return []
        self._outage_since, self._backoff = None, 0.5
        self.ledger.hold(self.client, self.subscription, got)
        out = []
        for r in got:
            ts, error = event_time(r.message, timestamp_attribute)
            msg = PubsubMessage._from_message(r.message)
            if error:
                msg.attributes = dict(msg.attributes, **{ATTRIBUTE_ERROR: error})
            out.append((ts, msg))
        return out

    def _outage(self, error) -> None:
        now = time.monotonic()
        if self._outage_since is None:
            self._outage_since = now
        line = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        down = now - self._outage_since
        if down > self.max_outage_secs:
            raise SourceUnavailable(
                f"cannot pull from {self.subscription} for {down:.0f} s (--max_outage_secs "
                f"{self.max_outage_secs:g}): {line}; {self.ledger.pending()} messages it "
                "held are not acknowledged and will be delivered again")
        if now - self._warned > 10:
            log.warning("pulling from %s failed (%s); retrying for up to %.0f s more",
                        self.subscription, line, self.max_outage_secs - down)
            self._warned = now
        time.sleep(self._backoff)
        self._backoff = min(self._backoff * 2, 10.0)


_READERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_READERS_LOCK = threading.Lock()


def _read_from_pubsub(evaluator, timestamp_attribute):
    """The replacement of `_PubSubReadEvaluator._read_from_pubsub` (one reader per applied
    transform, as Beam caches its client)."""
    transform = evaluator._applied_ptransform
    with _READERS_LOCK:
        reader = _READERS.get(transform)
        if reader is None:
            options = evaluator._evaluation_context.pipeline_options.get_all_options()
            reader = SubscriptionReader(
                evaluator._sub_name,
                options.get("max_message_bytes") or MAX_MESSAGE_BYTES,
                options.get("max_outage_secs") or MAX_OUTAGE_SECS)
            _READERS[transform] = reader
    return reader.read(timestamp_attribute)


def read_without_early_acks() -> None:
    """Replaces the DirectRunner's Pub/Sub read (idempotent, this process)."""
    from apache_beam.runners.direct import transform_evaluator as te
    evaluator = te._PubSubReadEvaluator
    if getattr(evaluator, "_acks_after_write", False):
        return
    evaluator._beam_read_from_pubsub = evaluator._read_from_pubsub  # the test reads it
    evaluator._read_from_pubsub = _read_from_pubsub
    evaluator._acks_after_write = True


class LocalStreamingRunner(BundleBasedDirectRunner):
    def run_pipeline(self, pipeline, options):
        read_without_early_acks()
        beam_lookups.install()
        return super().run_pipeline(pipeline, options)
