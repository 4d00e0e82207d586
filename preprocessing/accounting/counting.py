"""Counting inside the graph: tallies, their sum, and progress lines.

A job counts rows twice: a Beam metric (live in the runner's UI) and a (name, n) element on
the COUNTS output that the finalize step sums in the graph (a Dataflow template launch never
reads metrics). Progress lines go to stderr (a worker's stderr reaches the console locally
and Cloud Logging on Dataflow)."""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import NamedTuple, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics

COUNTS = "counts"  # the tagged output carrying (name, n) tallies to the finalize step
PROGRESS_SECS = float(os.environ.get("TFDATAFLOW_PROGRESS_SECS", "10"))


def emit(line: str) -> None:
    """A line for the person running the job (stderr: worker processes' stderr reaches the
    console locally and Cloud Logging on Dataflow)."""
    print(line, file=sys.stderr, flush=True)


class Progress:
    """'<job>: <what> <n> (<rate>/s[, <pct> of <total>, ETA <s>])' at most every
    PROGRESS_SECS per process, and at the end of a file or split that took a second or more
    since the last line (20,000 small files are not 20,000 lines), or of the whole input.
    Shared by a process's threads: get one with `Progress.of(job, what, total)`."""

    _all: dict = {}
    _lock = threading.Lock()

    def __init__(self, job: str, what: str, total: Optional[float], unit: str):
        self.job, self.what, self.total, self.unit = job, what, total, unit
        self.done, self.started, self.last = 0.0, time.time(), time.time()

    @classmethod
    def of(cls, job: str, what: str, total: Optional[float] = None, unit: str = "rows"):
        with cls._lock:
            key = (job, what, unit)  # one counter per unit: rows and MB never mix
            if key not in cls._all:
                cls._all[key] = cls(job, what, total, unit)
            return cls._all[key]

    def add(self, n: float) -> None:
        with self._lock:
            self.done += n
            now = time.time()
            if now - self.last < PROGRESS_SECS:
                return
            self.last = now
        emit(self.line(now))

    def show(self) -> None:
        """The end of a file or split: prints the line unless one was printed under a second
        ago and the total is not reached."""
        with self._lock:
            now = time.time()
            if now - self.last < 1.0 and not (self.total and self.done >= self.total):
                return
            self.last = now
        emit(self.line(now))

    def line(self, now: Optional[float] = None) -> str:
        elapsed = max((now or time.time()) - self.started, 1e-9)
        rate = self.done / elapsed
        scale, unit = (1e6, "MB") if self.unit == "bytes" else (1, self.unit)
        text = f"{self.job}: {self.what} {self.done / scale:,.0f} {unit} ({rate / scale:,.1f} {unit}/s"
        if self.total:
            left = max(self.total - self.done, 0) / rate if rate > 0 else float("inf")
            text += (f", {100 * self.done / self.total:.0f}% of {self.total / scale:,.0f} {unit}"
                     f", ETA {left:,.0f} s")
        return text + ")"


class Count(NamedTuple):
    """`n` more of `name` (rows_read, rows_predicted, rejected_<reason>): the element of a
    job's COUNTS output, summed by Tallies into the run's summary."""
    name: str
    n: int


beam.coders.registry.register_row(Count)


class Tally:
    """Counts rows twice: a Beam metric (live in the runner's UI), and a Count on the COUNTS
    output that the finalize step sums in the graph (Dataflow's launcher never reads metrics
    after a template launch)."""

    def __init__(self, job: str):
        self.job = job
        self._metrics = {}

    def __call__(self, name: str, n: int = 1):
        metric = self._metrics.get(name)
        if metric is None:
            metric = self._metrics[name] = Metrics.counter(self.job, name)
        metric.inc(n)
        return beam.pvalue.TaggedOutput(COUNTS, Count(name, n))


class SumTallies(beam.CombineFn):
    """Counts -> {name: total}, in one combine (an empty dict when there are none)."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, tally):
        name, n = tally
        acc[name] = acc.get(name, 0) + n
        return acc

    def merge_accumulators(self, accs):
        out = {}
        for acc in accs:
            for name, n in acc.items():
                out[name] = out.get(name, 0) + n
        return out

    def extract_output(self, acc):
        return acc


EXAMPLE_DETAIL_CHARS = 300  # of a reason's first dead letter, in the summary


class FirstRejects(beam.PTransform):
    """Dead letters -> (reason, "source:line: detail") of each reason's first letter in
    (source, line) order: what the summary and a failed run's one line show of why."""

    def expand(self, rejects):
        def keyed(letter):
            line = letter.line if isinstance(letter.line, int) and \
                not isinstance(letter.line, bool) else -1
            return letter.reason, (str(letter.source), line,
                                   str(letter.detail)[:EXAMPLE_DETAIL_CHARS])

        def shown(item):
            reason, (source, line, detail) = item
            return reason, f"{source}{f':{line}' if line >= 0 else ''}: {detail}"
        return (rejects | "ByReason" >> beam.Map(keyed)
                | "First" >> beam.CombinePerKey(min) | "Shown" >> beam.Map(shown))


class Tallies(beam.PTransform):
    """Sums Counts, plus one `rejected_<reason>` per dead-letter record, into one
    {name: total} dict."""

    def expand(self, inputs):
        counts, rejects = inputs
        by_reason = rejects | "RejectReasons" >> beam.Map(
            lambda letter: Count("rejected_" + letter.reason, 1)).with_output_types(Count)
        return ((counts, by_reason) | "AllTallies" >> beam.Flatten()
                | "SumTallies" >> beam.CombineGlobally(SumTallies()))
