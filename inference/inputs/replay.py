"""Replay: a local stand-in for Pub/Sub that drives the streaming job from a file.

Each line of the file is one message: `{"id", "data" | "data_b64", "attributes",
"event_time"}` or any other line (sent as the message's bytes, so the job's own dead-lettering
is exercised). `replay_stream` releases them as a TestStream at a set rate, `Pace` holds each
until its slot in real time and stamps its publish time.
"""
from __future__ import annotations

import base64
import datetime
import json
import math
import time
import uuid
from typing import List, Optional

import apache_beam as beam
from apache_beam.io.gcp.pubsub import PubsubMessage
from apache_beam.transforms import window
from apache_beam.utils.timestamp import Timestamp

from preprocessing.accounting.rejects import Reject
from preprocessing.contract.values import parse_json
from preprocessing.files import filesys

PUBLISHED_AT = "_published_at"  # the attribute replay stamps (epoch seconds); latency counts from it


def _epoch(value) -> Optional[float]:
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).replace("Z", "+00:00")
    dt = datetime.datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return dt.timestamp()


def load_replay(path: str) -> List[tuple]:
    """Replay file -> [(PubsubMessage, event time or None)], in file order.

    A line that is not JSON still becomes a message (its bytes as data), so the job's own
    dead-lettering is what the replay exercises. ValueError when the file holds no event.
    """
    events = []
    last_time = None
    for i, line in enumerate(filesys.read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        attrs, when, data = {}, None, None
        try:
            ev = parse_json(line)
        except Reject:  # not JSON, or nested past the parser's limit
            ev = None
        if isinstance(ev, dict) and ("data" in ev or "data_b64" in ev):
            try:
                raw_attrs = ev.get("attributes") or {}
                attrs = {str(k): str(v) for k, v in dict(raw_attrs).items()}
                if ev.get("id") is not None:
                    attrs.setdefault("id", str(ev["id"]))
                data = base64.b64decode(ev["data_b64"], validate=True) if "data_b64" in ev \
                    else json.dumps(ev["data"]).encode()
                when = _epoch(ev.get("event_time"))
            except (ValueError, TypeError, RecursionError):
                # Bad base64, attributes or event time: the line itself becomes the message,
                # which the job dead-letters: a replay line never stops the replay.
                attrs, when, data = {}, None, None
        if data is None:
            data = line.encode()
        attrs.setdefault("id", f"replay-{i}")
        when = last_time if when is None else when  # no time of its own: the previous one's
        last_time = when
        events.append((PubsubMessage(data, attrs, message_id=attrs["id"]), when))
    if not events:
        raise ValueError(f"--replay {path} has no events")
    return events


TICK_SECS = 0.5  # one TestStream event per half second: each costs the DirectRunner a fixed
# scheduling time whatever its size, so finer ticks slow a replay below its rate


def replay_stream(events, rate: float, tick_secs: float = TICK_SECS, start: float = 0.0):
    """A TestStream that releases `rate` messages per second of (test) processing time, in
    ticks of `tick_secs` (Pace then holds each message until its own slot).

    Event times default to the replay schedule (start + i / rate); the Pace step after it
    makes the release real-time on the DirectRunner, which finishes each TestStream event
    before taking the next.
    """
    from apache_beam.testing.test_stream import TestStream
    ts = TestStream()
    per_tick = max(1, int(round(rate * tick_secs)))
    watermark = None
    for i in range(0, len(events), per_tick):
        group, times = [], []
        for j, (msg, when) in enumerate(events[i:i + per_tick], i):
            t = when if when is not None else start + j / rate
            times.append(t)
            group.append(window.TimestampedValue((j, msg), t))
        ts = ts.add_elements(group)
        # The watermark follows the replay (never backwards): windows close as it goes, and
        # an event older than the watermark arrives as late data, as it would from Pub/Sub.
        low_ms = math.floor(min(times) * 1000)  # TestStream watermarks are whole ms
        if watermark is None or low_ms > watermark:
            watermark = low_ms
            ts = ts.advance_watermark_to(Timestamp(micros=low_ms * 1000))
        ts = ts.advance_processing_time(tick_secs)
    return ts.advance_watermark_to_infinity()


_STARTS: dict = {}  # replay id -> wall time of slot 0, shared by the process's Pace instances


class Pace(beam.DoFn):
    """Holds each replayed message until its slot (i / rate after the first) and stamps the
    release time as its publish time, so latency is measured as Pub/Sub would.

    The schedule's start is kept per process, not per DoFn instance: the DirectRunner makes
    a new instance per bundle, and a per-instance start let every bundle go at once (a 2 msg/s
    replay ran at ~6 msg/s)."""

    def __init__(self, rate: float):
        self.rate = rate
        self.replay_id = uuid.uuid4().hex

    def process(self, element):
        seq, msg = element
        t0 = _STARTS.setdefault(self.replay_id, time.time() - seq / self.rate)
        delay = t0 + seq / self.rate - time.time()
        if delay > 0:
            time.sleep(delay)
        attrs = dict(msg.attributes or {})
        attrs[PUBLISHED_AT] = repr(t0 + seq / self.rate)
        yield PubsubMessage(msg.data, attrs, message_id=msg.message_id)


class Replay(beam.PTransform):
    """PBegin -> the replay file's PubsubMessages, released at `rate` per second of real time
    (the streaming job's --replay source)."""

    def __init__(self, events, rate: float):
        super().__init__()
        self.events, self.rate = tuple(events), rate

    def expand(self, pbegin):
        return (pbegin | "Stream" >> replay_stream(self.events, self.rate)
                | "Pace" >> beam.ParDo(Pace(self.rate)))
