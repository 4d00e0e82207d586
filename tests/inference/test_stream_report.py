"""stream_predict's report.html: kept bounded, rewritten by the pipeline as windows close,
and showing the monitoring records' numbers as a real browser renders it."""
from __future__ import annotations

import os
import re

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_stream import TestStream as EventStream
from apache_beam.transforms.window import TimestampedValue

from inference.outputs import stream_report
from inference.outputs.stream_report import WriteStreamReport, keep_newest
from inference.windows import MonitoringRecord
from preprocessing.reference.evaluation import figure_text
from tests.helpers import CHROMIUM_MISSING, chromium_path, render_page

T0 = 1_700_000_000


def stats(start, n, rejects=None, pane=0, p50=3.0, p99=9.0):
    rejects = rejects or {}
    return {"event": "window_stats", "window_start": float(start), "window_end": start + 10.0,
            "pane": "LATE" if pane else "ON_TIME", "pane_index": pane, "predictions": n,
            "rejects": sum(rejects.values()), "rejects_by_reason": rejects,
            "latency_ms": {"p50": p50, "p90": p99, "p99": p99, "max": p99}}


def records(*timestamped):
    """The monitoring records the pipeline carries (MonitoringRecord), of the dicts the
    monitoring files hold."""
    return [TimestampedValue(MonitoringRecord.of_dict(r), ts) for r, ts in timestamped]


def test_a_late_pane_replaces_its_window_and_the_kept_records_are_bounded():
    kept = keep_newest([stats(T0, 5), stats(T0, 6, pane=1), stats(T0 + 10, 1),
                        {"event": "unknown"}])
    assert [(r["window_start"], r["predictions"]) for r in kept] == [(T0, 6), (T0 + 10, 1)]
    many = [stats(T0 + 10 * i, i) for i in range(stream_report.MAX_WINDOWS + 50)]
    events = [{"event": "version_refused", "time": T0 + i}
              for i in range(stream_report.MAX_EVENTS + 7)]
    kept = keep_newest(many + events)
    windows = [r for r in kept if r["event"] == "window_stats"]
    assert len(windows) == stream_report.MAX_WINDOWS
    assert windows[0]["predictions"] == 50  # the oldest 50 windows went
    assert [r["time"] for r in kept if r["event"] == "version_refused"][0] == T0 + 7


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The transform over two windows, a late pane, skew flags and a version swap; and the
    predictions total of each rewrite (the DirectRunner runs the DoFn in this process)."""
    path = str(tmp_path_factory.mktemp("stream_report") / "report.html")
    rewrites, write = [], stream_report.write_atomically

    def counting(target, text):
        rewrites.append(re.search(r"<td>predictions</td><td class=\"n\">([\d,]+)<", text)[1])
        write(target, text)
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    skew = {"event": "skew", "window_start": float(T0 + 10), "window_end": T0 + 20.0,
            "pane": "ON_TIME", "pane_index": 0, "rows": 40, "flagged": ["trip_miles"], "features": {}}
    swap = {"event": "version_accepted", "candidate_version": "200", "current_version": "100",
            "reason": "not_worse", "time": T0 + 15}
    stream = (EventStream()
              .add_elements(records((stats(T0, 50, {"invalid_json": 2}), T0 + 9.999)))
              .advance_watermark_to(T0 + 10)
              .add_elements(records((stats(T0 + 10, 70, {"bad_example": 3}, p50=4.25,
                                           p99=17.5), T0 + 19.999),
                                    (skew, T0 + 19.999), (swap, T0 + 15)))
              .advance_watermark_to(T0 + 25)
              .add_elements(records((stats(T0, 51, {"invalid_json": 2}, pane=1), T0 + 9.999)))
              .advance_watermark_to_infinity())
    stream_report.write_atomically = counting
    try:
        with beam.Pipeline(options=options) as p:
            _ = p | stream | WriteStreamReport(path, "projects/p/subscriptions/in", 10)
    finally:
        stream_report.write_atomically = write
    return path, rewrites


FIGURES = [figure_text(50 + 1 + 70), figure_text(5), figure_text(4.25), figure_text(17.5),
           "trip_miles", "200", "not_worse"]


def test_the_pipeline_writes_one_self_contained_page_with_the_records_numbers(written):
    written, rewrites = written
    # Rewritten as the watermark passed each window (not once per record, not only at the
    # end): the first window alone, both windows, then the late pane.
    assert rewrites == ["50", "120", "121"]
    page = open(written, encoding="utf-8").read()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert page.count("data:image/png;base64,") == 1
    for text in FIGURES:  # the late pane (51) replaced its on-time one (50): 121 predictions
        assert f">{text}<" in page, text
    assert "<td>invalid_json</td><td class=\"n\">2</td>" in page
    assert not [f for f in os.listdir(os.path.dirname(written)) if f.endswith(".tmp")]


def test_chromium_renders_the_stream_report(written, tmp_path):
    if not chromium_path():
        pytest.skip(CHROMIUM_MISSING)
    from PIL import Image, ImageStat
    png = str(tmp_path / "stream.png")
    text = re.sub(r"<[^>]+>", " ", render_page(written[0], png))
    for figure in FIGURES:
        assert f" {figure} " in text, figure
    assert ImageStat.Stat(Image.open(png).convert("L")).stddev[0] > 10


def _one_window(path):
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    stream = (EventStream()
              .add_elements(records((stats(T0, 7), T0 + 9.999)))
              .advance_watermark_to_infinity())
    with beam.Pipeline(options=options) as p:
        _ = p | stream | WriteStreamReport(path, "projects/p/subscriptions/in", 10)


def test_a_report_that_cannot_be_written_is_a_warning_and_the_pipeline_goes_on(
        tmp_path, caplog):
    """A report folder that is a file (or gone, then made again): predictions never stop
    for the page."""
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the report folder should be")
    with caplog.at_level("WARNING"):
        _one_window(str(blocker / "report.html"))  # returns: the pipeline was not stopped
    assert "report.html not rewritten" in caplog.text
    assert blocker.read_text().startswith("a file")
    gone = tmp_path / "gone" / "deeper" / "report.html"  # a folder removed under a running job
    _one_window(str(gone))
    assert ">7<" in gone.read_text(encoding="utf-8")


def test_a_monitoring_record_is_written_as_the_files_hold_it():
    """MonitoringRecord.to_dict is what the monitoring topic and files carry: the window's
    fields first, then the kind and its figures; of_dict reads it back."""
    window = stats(T0, 5, {"invalid_json": 1})
    record = MonitoringRecord.of_dict(window)
    assert record.event == "window_stats" and record.window == (float(T0), T0 + 10.0,
                                                                "ON_TIME", 0)
    assert "window_start" not in record.figures and record.figures["predictions"] == 5
    assert list(record.to_dict()) == ["window_start", "window_end", "pane", "pane_index",
                                      "event", "predictions", "rejects", "rejects_by_reason",
                                      "latency_ms"]
    assert record.to_dict() == window
    swap = {"event": "version_refused", "reason": "worse", "time": T0}
    assert MonitoringRecord.of_dict(swap).window is None
    assert MonitoringRecord.of_dict(swap).to_dict() == swap
