"""Per event-time window records of a stream: the window stats of what was served
(Monitor: counts, latency percentiles, rejects by reason), and the machinery every
per-window record uses (PerWindow's triggers, partials combined per bundle)."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, NamedTuple, Optional, Tuple

import apache_beam as beam
from apache_beam.transforms import trigger, window
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue


class Served(NamedTuple):
    """One message's outcome, as the window stats count it: a prediction's latency, or a
    dead letter's reason."""
    latency_ms: Optional[float] = None
    reject_reason: Optional[str] = None

    @classmethod
    def of_prediction(cls, prediction) -> "Served":
        return cls(latency_ms=prediction.extras["latency_ms"])

    @classmethod
    def of_reject(cls, letter) -> "Served":
        return cls(reject_reason=letter.reason)


beam.coders.registry.register_row(Served)


class MonitorFn(beam.CombineFn):
    """Counts and latency percentiles of one window's predictions and rejects (Served)."""

    def create_accumulator(self):
        return {"predictions": 0, "rejects": {}, "latencies": []}

    def add_input(self, acc, served: Served):
        if served.reject_reason is None:
            acc["predictions"] += 1
            acc["latencies"].append(served.latency_ms)
        else:
            reason = served.reject_reason
            acc["rejects"][reason] = acc["rejects"].get(reason, 0) + 1
        return acc

    def merge_accumulators(self, accs):
        out = self.create_accumulator()
        for a in accs:
            out["predictions"] += a["predictions"]
            out["latencies"].extend(a["latencies"])
            for k, v in a["rejects"].items():
                out["rejects"][k] = out["rejects"].get(k, 0) + v
        return out

    def extract_output(self, acc):
        lat = sorted(acc["latencies"])
        return {"event": "window_stats", "predictions": acc["predictions"],
                "rejects": sum(acc["rejects"].values()),
                "rejects_by_reason": dict(sorted(acc["rejects"].items())),
                "latency_ms": {f"p{q}": percentile(lat, q) for q in (50, 90, 99)} |
                {"max": lat[-1] if lat else None}}


def percentile(sorted_values, q: float):
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


WINDOW_FIELDS = ("window_start", "window_end", "pane", "pane_index")


@dataclasses.dataclass(frozen=True)
class MonitoringRecord:
    """One record of the streaming job's monitoring output. `event` names its kind:
    window_stats, shadow_comparison, skew, slice_metrics (one per event-time window and pane,
    `window` set) or version_accepted / version_refused (the gate's, `window` None);
    `figures` are the kind's own fields. Serialised only at the sinks (to_dict: the JSON
    object the monitoring topic and files carry, the window's fields first)."""
    event: str
    figures: Mapping[str, Any]
    window: Optional[Tuple[float, float, str, int]] = None  # WINDOW_FIELDS' values

    def to_dict(self) -> dict:
        out = dict(zip(WINDOW_FIELDS, self.window)) if self.window else {}
        out["event"] = self.event
        out.update(self.figures)
        return out

    @classmethod
    def of_dict(cls, record: Mapping[str, Any]) -> "MonitoringRecord":
        """to_dict's inverse (a record as the monitoring files hold it)."""
        figures = {k: v for k, v in record.items() if k != "event" and k not in WINDOW_FIELDS}
        window = tuple(record[k] for k in WINDOW_FIELDS) \
            if all(k in record for k in WINDOW_FIELDS) else None
        return cls(record["event"], figures, window)


class AddWindowInfo(beam.DoFn):
    """A combine's figures ({"event": kind, ...}) -> a MonitoringRecord of its window and
    pane."""

    def process(self, stats, win=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        figures = dict(stats)
        event = figures.pop("event")
        yield MonitoringRecord(event, figures, (
            float(win.start), float(win.end),
            {0: "EARLY", 1: "ON_TIME", 2: "LATE", 3: "UNKNOWN"}.get(pane.timing,
                                                                   str(pane.timing)),
            pane.index))


def window_trigger(allowed_lateness_secs: float):
    """The on-time pane, and with an allowed lateness a LATE pane per late element. Without
    one the trigger finishes at the on-time pane: no late pane could come (late data is
    dropped), and the DirectRunner frees a window's elements only when its trigger finishes
    (its trigger driver has no garbage collection at the end of the allowed lateness)."""
    if allowed_lateness_secs > 0:
        return trigger.AfterWatermark(late=trigger.AfterCount(1))
    return trigger.AfterWatermark()


class PerWindow(beam.PTransform):
    """Elements -> one `combine_fn` record per fixed event-time window, with the window's
    bounds and pane. Late data within the allowed lateness updates its window in a LATE
    pane (accumulating)."""

    def __init__(self, combine_fn: beam.CombineFn, window_secs: float,
                 allowed_lateness_secs: float):
        super().__init__()
        self.combine_fn = combine_fn
        self.window_secs = window_secs
        self.lateness = allowed_lateness_secs

    def expand(self, events):
        return (events
                | "Window" >> beam.WindowInto(
                    window.FixedWindows(self.window_secs),
                    trigger=window_trigger(self.lateness),
                    accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
                    allowed_lateness=self.lateness)
                | "Stats" >> beam.CombineGlobally(self.combine_fn).without_defaults()
                | "WindowInfo" >> beam.ParDo(AddWindowInfo()).with_output_types(
                    MonitoringRecord))


class BundlePartials(beam.DoFn):
    """Elements -> one `combine_fn` accumulator per event-time window of `window_secs` per
    bundle. The DirectRunner's streaming GroupByKey runs its trigger machinery per element
    (a tenth of the job's time at 1,000 msg/s); partials make that once per window per
    bundle. On Dataflow the combiner is lifted anyway: the result is the same."""

    def __init__(self, combine_fn: beam.CombineFn, window_secs: float):
        self.combine_fn, self.window_secs = combine_fn, window_secs

    def start_bundle(self):
        self._groups = {}

    def process(self, element, ts=beam.DoFn.TimestampParam):
        key = math.floor(float(ts) / self.window_secs)
        first, acc = self._groups.get(key) or (ts, self.combine_fn.create_accumulator())
        self._groups[key] = (first, self.combine_fn.add_input(acc, element))

    def finish_bundle(self):
        groups, self._groups = self._groups, {}
        for ts, acc in groups.values():
            yield WindowedValue(acc, ts, [GlobalWindow()])


class OfPartials(beam.CombineFn):
    """`combine_fn` over partial accumulators (BundlePartials') instead of elements."""

    def __init__(self, combine_fn: beam.CombineFn):
        self.combine_fn = combine_fn

    def create_accumulator(self):
        return self.combine_fn.create_accumulator()

    def add_input(self, acc, partial):
        return self.combine_fn.merge_accumulators([acc, partial])

    def merge_accumulators(self, accs):
        return self.combine_fn.merge_accumulators(accs)

    def extract_output(self, acc):
        return self.combine_fn.extract_output(acc)


class Monitor(beam.PTransform):
    """Per fixed event-time window: counts and latency percentiles."""

    def __init__(self, window_secs: float, allowed_lateness_secs: float):
        super().__init__()
        self.window_secs, self.lateness = window_secs, allowed_lateness_secs

    def expand(self, events):
        return (events
                | "Partials" >> beam.ParDo(BundlePartials(MonitorFn(), self.window_secs))
                | "PerWindow" >> PerWindow(OfPartials(MonitorFn()), self.window_secs,
                                           self.lateness))
