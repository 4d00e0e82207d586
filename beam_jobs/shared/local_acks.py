"""Acknowledge a pulled Pub/Sub message only after its outputs are written (the streaming
job's local runner).

Beam's DirectRunner acknowledges a pull as soon as it is made: a message in flight when the
process dies is gone (a kill -9 at 400 msg/s lost 222 of 16,000). Dataflow acknowledges only
once a bundle's results are durably committed. Locally nothing is durable until it reaches a
sink, so here the read (local_streaming.py) holds each pulled message in this process's
LEDGER, and the sinks report the Pub/Sub message ids they have written (`Acknowledge`).
A message is acknowledged once every sink its record goes to has reported it; until then its
ack deadline is extended (`modify_ack_deadline`), as Pub/Sub's streaming-pull client does.
A restart on the same subscription gets again whatever was in flight: at least once, and
every output record carries the `message_id` a consumer drops duplicates by.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Dict, Iterable, List, NamedTuple

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from beam_jobs.shared.errors import RunFailed

# Each extension asks for this much more time: after a kill -9 what the process held comes
# again within it.
LEASE_SECS = 20
RENEW_BEFORE_SECS = 5    # extend a lease this long before it runs out
LEASE_STEP_SECS = 1.0    # how often the lease thread looks
ACK_CHUNK = 1000         # ack ids per request (Pub/Sub takes up to 2,500 and 512 KB)
DEFAULT_DEADLINE_SECS = 10

log = logging.getLogger(__name__)


class Held(NamedTuple):
    client: object            # the SubscriberClient that pulled it
    subscription: str
    ack_ids: List[str]        # more than one when Pub/Sub redelivered it while in flight
    written: int              # sinks that have reported it
    lease_until: float        # monotonic time its ack deadline runs out


class Ledger:
    """The messages this process has pulled and not yet acknowledged."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held: Dict[str, Held] = {}
        self._deadlines: Dict[str, int] = {}  # subscription -> its ack deadline (s)
        self._thread = None
        self.acknowledged = 0
        self.redelivered = 0  # pulled again while this process still held it

    def hold(self, client, subscription: str, received: Iterable) -> None:
        """`received`: (message, ack_id) pairs of one pull, none acknowledged."""
        deadline = self._deadline(client, subscription)
        now = time.monotonic()
        with self._lock:
            for r in received:
                mid = r.message.message_id
                held = self._held.get(mid)
                if held is None:
                    self._held[mid] = Held(client, subscription, [r.ack_id], 0, now + deadline)
                else:  # Pub/Sub sent it again: both deliveries are acked together
                    held.ack_ids.append(r.ack_id)
                    self._held[mid] = held._replace(lease_until=now + deadline)
                    self.redelivered += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._lease_loop, daemon=True,
                                                name="pubsub-leases")
                self._thread.start()

    def written(self, message_ids: Iterable[str], sinks: int) -> None:
        """One sink has written the records of `message_ids`; a message whose record goes to
        `sinks` sinks in all is acknowledged when the last of them reports it."""
        ready: List[Held] = []
        with self._lock:
            for mid in message_ids:
                held = self._held.get(mid)
                if held is None:  # a duplicate, or a record of no pulled message
                    continue
                if held.written + 1 >= sinks:
                    del self._held[mid]
                    ready.append(held)
                    self.acknowledged += 1
                else:
                    self._held[mid] = held._replace(written=held.written + 1)
        for client, subscription, ack_ids in _by_subscription(ready):
            _call_in_chunks(client.acknowledge, subscription, ack_ids)

    def release(self) -> int:
        """Hands every held message back to Pub/Sub at once (ack deadline 0), as a stopping
        subscriber does: a restart gets them without waiting for their leases to run out."""
        with self._lock:
            held, self._held = self._held, {}
        for client, subscription, ack_ids in _by_subscription(held.values()):
            _call_in_chunks(client.modify_ack_deadline, subscription, ack_ids,
                            ack_deadline_seconds=0)
        return len(held)

    def pending(self) -> int:
        with self._lock:
            return len(self._held)

    def _deadline(self, client, subscription: str) -> int:
        if subscription not in self._deadlines:
            try:
                got = client.get_subscription(subscription=subscription, timeout=10)
                self._deadlines[subscription] = int(got.ack_deadline_seconds) or \
                    DEFAULT_DEADLINE_SECS
            except Exception:  # Pub/Sub's default; the lease thread renews early anyway
                self._deadlines[subscription] = DEFAULT_DEADLINE_SECS
        return self._deadlines[subscription]

    def _lease_loop(self) -> None:
        while True:
            time.sleep(LEASE_STEP_SECS)
            try:
                self.renew_leases()
            except Exception:  # never let the lease thread die; the next round retries
                log.warning("renewing Pub/Sub leases failed", exc_info=True)

    def renew_leases(self) -> int:
        """Extends the ack deadline of every held message whose lease runs out soon."""
        now = time.monotonic()
        due: List[Held] = []
        with self._lock:
            for mid, held in self._held.items():
                if held.lease_until - now < RENEW_BEFORE_SECS:
                    due.append(held)
                    self._held[mid] = held._replace(lease_until=now + LEASE_SECS)
        renewed = 0
        for client, subscription, ack_ids in _by_subscription(due):
            _call_in_chunks(client.modify_ack_deadline, subscription, ack_ids,
                            ack_deadline_seconds=LEASE_SECS)
            renewed += len(ack_ids)
        return renewed


def _by_subscription(helds: Iterable[Held]) -> List[tuple]:
    """(client, subscription, ack ids) of held messages, one per subscription pulled."""
    grouped: Dict[tuple, tuple] = {}
    for h in helds:
        grouped.setdefault((id(h.client), h.subscription),
                           (h.client, h.subscription, []))[2].extend(h.ack_ids)
    return list(grouped.values())


def _call_in_chunks(method, subscription: str, ack_ids: List[str], **kw) -> None:
    for i in range(0, len(ack_ids), ACK_CHUNK):
        try:
            method(subscription=subscription, ack_ids=ack_ids[i:i + ACK_CHUNK], timeout=30,
                   **kw)
        except Exception as e:  # Pub/Sub sends them again: a duplicate, never a loss
            log.warning("%s on %s failed (%s): those messages will come again",
                        method.__name__, subscription, str(e).splitlines()[0][:200])


LEDGER = Ledger()  # this process's: the DirectRunner runs the whole pipeline in it


class Acknowledge(beam.DoFn):
    """Lists of message ids a sink has written -> the ledger (no output). `sinks`: how many
    sinks each of these records goes to."""

    def __init__(self, sinks: int):
        self.sinks = sinks

    def process(self, message_ids):
        LEDGER.written([m for m in message_ids if m], self.sinks)


class SinkUnavailable(RunFailed):
    """A topic could not be published to for longer than --max_outage_secs."""


_OUTAGES: Dict[str, float] = {}  # topic -> when publishing to it began to fail (monotonic)
_PUBLISHERS: dict = {}  # this process's PublisherClient (one gRPC channel for every topic)
_PUBLISHERS_LOCK = threading.Lock()
PUBLISH_TIMEOUT_SECS = 30.0


def shared_publisher():
    with _PUBLISHERS_LOCK:
        if "client" not in _PUBLISHERS:
            from google.cloud import pubsub
            _PUBLISHERS["client"] = pubsub.PublisherClient()
        return _PUBLISHERS["client"]


class PublishMessages(beam.DoFn):
    """PubsubMessages -> `topic`, each bundle's published as one batch; outputs the list of
    their `message_id` attributes once all are published (for `Acknowledge`).

    A failed publish (the topic deleted, Pub/Sub unreachable) is retried with backoff for
    up to `max_outage_secs`; then the job stops with SinkUnavailable, one line naming the
    topic. What was not published is never acknowledged. One client serves every topic of
    the process: Beam's write made a client per bundle and per topic on this runner, and
    never closed it (the job's RSS grew by ~8 MB a minute at 1,000 msg/s)."""

    def __init__(self, topic: str, max_outage_secs: float):
        self.topic, self.max_outage_secs = topic, max_outage_secs

    def setup(self):
        self._client = shared_publisher()

    def start_bundle(self):
        self._buffer = []

    def process(self, message):
        self._buffer.append(message)

    def finish_bundle(self):
        messages, self._buffer = self._buffer, []
        if messages:
            self._publish(messages)
            yield GlobalWindows.windowed_value(
                [(m.attributes or {}).get("message_id") for m in messages])

    def _publish(self, messages) -> None:
        # The outage is the topic's, not this bundle's: the DirectRunner retries a failed
        # bundle (4 attempts) and each retry must not start the clock again.
        pending, backoff, warned = messages, 0.5, 0.0
        while pending:
            futures = [(m, self._client.publish(self.topic, m.data,
                                                timeout=PUBLISH_TIMEOUT_SECS,
                                                **(m.attributes or {})))
                       for m in pending]
            failed, error = [], None
            for m, future in futures:
                try:
                    future.result(timeout=PUBLISH_TIMEOUT_SECS + 30)
                except Exception as e:
                    failed.append(m)
                    error = e
            if not failed:
                _OUTAGES.pop(self.topic, None)
                return
            now = time.monotonic()
            since = _OUTAGES.setdefault(self.topic, now)
            line = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
            if now - since > self.max_outage_secs:
                raise SinkUnavailable(
                    f"cannot publish to {self.topic} for {now - since:.0f} s "
                    f"(--max_outage_secs {self.max_outage_secs:g}): {line}; "
                    f"{LEDGER.pending()} messages are not acknowledged and will be "
                    "delivered again")
            if now - warned > 10:
                log.warning("publishing %d messages to %s failed (%s); retrying for up to "
                            "%.0f s more", len(failed), self.topic, line,
                            self.max_outage_secs - (now - since))
                warned = now
            time.sleep(backoff)
            backoff = min(backoff * 2, 10.0)
            pending = failed
