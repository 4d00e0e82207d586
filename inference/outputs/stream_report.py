"""stream_predict's `report.html`: the monitoring windows as time series (prediction rate,
latency p50/p99, rejects by reason, skew flags, shadow disagreement) with the model
versions' swaps and refusals marked, rewritten as windows close.

The page is rebuilt from the records the pipeline already writes (beam_jobs/stream_predict's
WriteMonitoring): a stateful DoFn on one key keeps the newest MAX_WINDOWS windows and
MAX_EVENTS version events, and an event-time timer rewrites the file once the watermark has
passed a window, so one rewrite serves all of that window's records. The file is written
under a temporary name and renamed: a reader never sees half a page."""
from __future__ import annotations

import datetime
import logging
import uuid
from typing import Iterable, List

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms import userstate, window
from apache_beam.utils.timestamp import Timestamp

from preprocessing.reports.page import Page, slice_sections

REPORT = "report.html"
MAX_WINDOWS = 500   # windows drawn (500 one-minute windows: about 8 hours)
MAX_EVENTS = 100    # version accepted/refused records listed
WINDOW_EVENTS = ("window_stats", "skew", "shadow_comparison", "slice_metrics")
VERSION_EVENTS = ("version_accepted", "version_refused")


def keep_newest(records: Iterable[dict]) -> List[dict]:
    """The records a page is drawn from: per window and kind the newest pane (a late pane
    replaces its on-time one), the newest MAX_WINDOWS windows, and the newest MAX_EVENTS
    version records; other records are not kept."""
    panes, events = {}, []
    for r in records:
        kind = r.get("event")
        if kind in WINDOW_EVENTS and r.get("window_start") is not None:
            key = (kind, r["window_start"])
            if key not in panes or r.get("pane_index", 0) >= panes[key].get("pane_index", 0):
                panes[key] = r
        elif kind in VERSION_EVENTS:
            events.append(r)
    starts = sorted({start for _, start in panes})[-MAX_WINDOWS:]
    kept = set(starts)
    return ([panes[k] for k in sorted(panes, key=lambda k: (k[1], k[0])) if k[1] in kept]
            + sorted(events, key=lambda r: r.get("time") or 0)[-MAX_EVENTS:])


def stream_report(records: Iterable[dict], source: str = "", window_secs: float = 60.0) -> str:
    """The page of the kept monitoring records (keep_newest's)."""
    records = list(records)
    stats = [r for r in records if r.get("event") == "window_stats"]
    skew = [r for r in records if r.get("event") == "skew"]
    shadow = [r for r in records if r.get("event") == "shadow_comparison"]
    events = [r for r in records if r.get("event") in VERSION_EVENTS]
    page = Page("stream_predict: monitoring windows")
    page.text(f"source {source}; {len(stats)} windows of {window_secs:g} s; rewritten "
              f"{_when(datetime.datetime.now(datetime.timezone.utc).timestamp())} UTC", "note")
    page.heading("Totals over these windows")
    reasons: dict = {}
    for s in stats:
        for k, v in (s.get("rejects_by_reason") or {}).items():
            reasons[k] = reasons.get(k, 0) + v
    page.table([("predictions", sum(s.get("predictions") or 0 for s in stats)),
                ("rejects", sum(s.get("rejects") or 0 for s in stats)),
                ("windows with skew flags", sum(bool(s.get("flagged")) for s in skew)),
                ("versions accepted", sum(e["event"] == "version_accepted" for e in events)),
                ("versions refused", sum(e["event"] == "version_refused" for e in events))],
               ["", "count"])
    if reasons:
        page.table(sorted(reasons.items(), key=lambda kv: -kv[1]), ["reject reason", "rows"])
    if stats:
        page.heading("Windows over time")
        page.figure(series_figure(stats, skew, shadow, events, window_secs),
                    "monitoring windows over time")
        page.heading("Newest windows")
        flags = {r["window_start"]: r.get("flagged") or [] for r in skew}
        newest = stats[::-1][:50]
        page.table([(_when(s["window_start"]), s.get("pane"), s.get("predictions"),
                     s.get("rejects"), (s.get("latency_ms") or {}).get("p50"),
                     (s.get("latency_ms") or {}).get("p99"),
                     ", ".join(flags.get(s["window_start"], [])[:5]) or "-") for s in newest],
                   ["window start (UTC)", "pane", "predictions", "rejects", "latency p50 ms",
                    "latency p99 ms", "skew flags"],
                   css=["bad" if flags.get(s["window_start"]) else None for s in newest])
    sliced = [r for r in records if r.get("event") == "slice_metrics"]
    if sliced:
        newest = sliced[-1]
        page.heading(f"Labelled messages by slice: the newest window ({_when(newest['window_start'])})")
        page.text(f"{newest.get('labelled')} labelled messages", "note")
        figure = next((k for by in (newest.get("slices") or {}).values() for m in by.values()
                       for k in ("rmse", "accuracy") if k in m), "rmse")
        slice_sections(page, newest.get("slices") or {}, figure, None)
    if events:
        page.heading("Model versions")
        page.table([(_when(e.get("time")), e["event"], e.get("candidate_version"),
                     e.get("current_version"), e.get("reason")) for e in events[::-1]],
                   ["time (UTC)", "event", "candidate", "serving", "reason"],
                   css=["ok" if e["event"] == "version_accepted" else "bad"
                        for e in events[::-1]])
    return page.html()


def _when(seconds) -> str:
    if seconds is None:
        return "-"
    return datetime.datetime.fromtimestamp(float(seconds), datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S")


def series_figure(stats, skew, shadow, events, window_secs: float):
    """Stacked time series, one panel each: rate, latency, rejects by reason, and (when
    there are such records) skew flags and shadow disagreement; version swaps as lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def at(records):
        return [datetime.datetime.fromtimestamp(r["window_start"], datetime.timezone.utc)
                for r in records]

    panels = 3 + bool(skew) + bool(shadow)
    fig, axes = plt.subplots(panels, 1, figsize=(7.5, 1.9 * panels), sharex=True)
    t = at(stats)
    axes[0].plot(t, [(s.get("predictions") or 0) / window_secs for s in stats], marker=".")
    axes[0].set_ylabel("predictions/s", fontsize=8)
    for q in ("p50", "p99"):
        axes[1].plot(t, [(s.get("latency_ms") or {}).get(q) for s in stats], marker=".",
                     label=q)
    axes[1].set_ylabel("latency ms", fontsize=8)
    axes[1].legend(fontsize=7)
    reasons = sorted({k for s in stats for k in (s.get("rejects_by_reason") or {})})
    bottom = [0] * len(stats)
    for reason in reasons:
        counts = [(s.get("rejects_by_reason") or {}).get(reason, 0) for s in stats]
        axes[2].bar(t, counts, bottom=bottom, width=window_secs / 86400 * 0.8, label=reason)
        bottom = [b + c for b, c in zip(bottom, counts)]
    axes[2].set_ylabel("rejects", fontsize=8)
    if reasons:
        axes[2].legend(fontsize=7)
    i = 3
    if skew:
        axes[i].step(at(skew), [len(r.get("flagged") or []) for r in skew], where="post")
        axes[i].set_ylabel("skew flags", fontsize=8)
        i += 1
    if shadow:
        figure = "mean_abs_diff" if any("mean_abs_diff" in r for r in shadow) \
            else "class_flip_rate"
        axes[i].plot(at(shadow), [r.get(figure) for r in shadow], marker=".")
        axes[i].set_ylabel(f"shadow {figure}", fontsize=7)
    for e in events:
        if e.get("time") is None:
            continue
        when = datetime.datetime.fromtimestamp(e["time"], datetime.timezone.utc)
        for ax in axes:
            ax.axvline(when, color="#067647" if e["event"] == "version_accepted" else "#b42318",
                       linestyle="--", linewidth=1)
    for ax in axes:
        ax.tick_params(labelsize=7)
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def write_atomically(path: str, text: str) -> None:
    """`text` at `path`, written under a temporary name beside it and renamed over it."""
    directory, name = path.rsplit("/", 1) if "/" in path else (".", path)
    temp = FileSystems.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
    with FileSystems.create(temp) as f:
        f.write(text.encode())
    FileSystems.rename([temp], [path])


class RewriteReport(beam.DoFn):
    """(key, monitoring record) -> nothing; keeps the records (keep_newest) in state and
    rewrites `path` when the watermark passes the newest record's time."""
    RECORDS = userstate.ReadModifyWriteStateSpec("records", PickleCoder())
    FLUSH = userstate.TimerSpec("flush", userstate.TimeDomain.WATERMARK)

    def __init__(self, path: str, source: str, window_secs: float):
        self.path, self.source, self.window_secs = path, source, window_secs
        self.rewrites = beam.metrics.Metrics.counter("stream_predict", "report_rewrites")

    def process(self, keyed, ts=beam.DoFn.TimestampParam,
                records=beam.DoFn.StateParam(RECORDS), flush=beam.DoFn.TimerParam(FLUSH)):
        held = records.read() or []
        held.append(keyed[1])
        # Kept bounded as records arrive, not only at a flush.
        records.write(keep_newest(held) if len(held) > 2 * (MAX_WINDOWS + MAX_EVENTS)
                      else held)
        flush.set(Timestamp.of(max(float(ts), 0.0)))

    @userstate.on_timer(FLUSH)
    def on_flush(self, records=beam.DoFn.StateParam(RECORDS)):
        kept = keep_newest(records.read() or [])
        records.write(kept)
        try:
            write_atomically(self.path, stream_report(kept, self.source, self.window_secs))
            self.rewrites.inc()
        except Exception as e:  # noqa: BLE001 (a report is never worth stopping predictions)
            logging.warning("stream_predict: report.html not rewritten (%s: %s)",
                            type(e).__name__, e)


class WriteStreamReport(beam.PTransform):
    """MonitoringRecords -> `path` (report.html), rewritten as windows close."""

    def __init__(self, path: str, source: str, window_secs: float):
        super().__init__()
        self.path, self.source, self.window_secs = path, source, window_secs

    def expand(self, records):
        return (records
                | "Global" >> beam.WindowInto(window.GlobalWindows())
                | "OneKey" >> beam.Map(lambda r: ("report", r.to_dict()))
                | "Rewrite" >> beam.ParDo(RewriteReport(self.path, self.source,
                                                        self.window_secs)))
