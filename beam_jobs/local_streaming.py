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
did), and Dataflow reads with its own Pub/Sub source. tests/test_stream_local_runner.py fails
if a Beam upgrade changes the code patched here.
"""
from __future__ import annotations

import time
import types

from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

# One acknowledge request carries all of a pull's ack ids: Pub/Sub takes up to 2,500 ack ids
# (and 512 KB) per request; 1,000 ids of ~170 bytes stay within both.
PULL_MAX_MESSAGES = 1000
GATHER_SECS = 0.2


class LargerPulls:
    """A SubscriberClient whose pulls gather up to `max_messages` over `gather_secs`."""

    def __init__(self, client, max_messages: int = PULL_MAX_MESSAGES,
                 gather_secs: float = GATHER_SECS):
        self._client, self._max, self._gather = client, max_messages, gather_secs

    def pull(self, *args, max_messages: int = 0, **kwargs):
        want = max(max_messages or 0, self._max)
        first = self._client.pull(*args, max_messages=want, **kwargs)
        got = list(first.received_messages)
        deadline = time.monotonic() + self._gather
        while got and len(got) < want:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            kwargs["timeout"] = left
            try:
                more = self._client.pull(*args, max_messages=want - len(got), **kwargs)
            except Exception as e:  # nothing more within the time: DeadlineExceeded
                if type(e).__name__ not in ("DeadlineExceeded", "RetryError"):
                    raise
                break
            got.extend(more.received_messages)
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
    evaluator._larger_pulls = True


class LocalStreamingRunner(BundleBasedDirectRunner):
    def run_pipeline(self, pipeline, options):
        pull_larger_bundles()
        return super().run_pipeline(pipeline, options)
