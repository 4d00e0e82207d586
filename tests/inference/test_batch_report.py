"""batch_predict's report.html: written in the pipeline beside summary.json, self-contained,
and showing the same numbers as the JSON outputs, as a real browser renders it."""
from __future__ import annotations

import json
import os
import re

import pytest

from beam_jobs import batch_predict
from preprocessing.reference.evaluation import figure_text
from tests.helpers import CHROMIUM_MISSING, chromium_path, read_jsonl, render_page


@pytest.fixture(scope="module")
def report_run(trained, taxi_csv, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "out"
    summary = batch_predict.run(["--model_dir", trained[2]["export_dir"], "--input",
                                 taxi_csv[0], "--output", str(out), "--evaluate_label",
                                 "fare_amount", "--slice_by", "payment_type"])
    return str(out), summary


def _figures(summary):
    metrics = json.loads(open(os.path.join(summary["output"], "metrics.json")).read())
    return metrics, [figure_text(summary["rows_read"]), figure_text(summary["rows_predicted"]),
                     figure_text(metrics["rmse"]), figure_text(metrics["mae"])] + [
        figure_text(m["rmse"]) for m in metrics["slices"]["payment_type"].values()]


def test_the_report_is_one_self_contained_file_with_the_json_figures(report_run):
    out, summary = report_run
    page = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # no network access
    assert page.count("data:image/png;base64,") >= 4  # rejects, residuals, slices, skew
    assert "<h2>Residuals</h2>" in page
    metrics, figures = _figures(summary)
    for text in figures:
        assert f">{text}<" in page, text
    for reason, n in summary["rejected"]["by_reason"].items():
        assert f"<td>{reason}</td><td class=\"n\">{figure_text(n)}</td>" in page


def test_the_residual_sample_is_rows_the_job_predicted(report_run):
    out, summary = report_run
    metrics = json.loads(open(os.path.join(out, "metrics.json")).read())
    sample = metrics["residual_sample"]
    assert 0 < len(sample["labels"]) == len(sample["predictions"]) <= 1000
    predicted = {round(p["prediction"], 4) for p in read_jsonl(os.path.join(out, "predictions-*"))}
    assert {round(p, 4) for p in sample["predictions"]} <= predicted


def test_chromium_renders_the_report_with_the_same_numbers(report_run, tmp_path):
    if not chromium_path():
        pytest.skip(CHROMIUM_MISSING)
    from PIL import Image, ImageStat
    out, summary = report_run
    png = str(tmp_path / "report.png")
    dom = render_page(os.path.join(out, "report.html"), png)
    _, figures = _figures(summary)
    text = re.sub(r"<[^>]+>", " ", dom)
    for figure in figures:
        assert f" {figure} " in text, figure
    image = Image.open(png).convert("L")
    assert image.size[0] == 412
    assert ImageStat.Stat(image).stddev[0] > 10  # drawn, not a blank page
