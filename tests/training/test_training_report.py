"""training's report.html beside metrics.json: the eval metrics and each candidate family's
figures, as Chromium renders it."""
from __future__ import annotations

import json
import os
import re

import pytest

from preprocessing.reference.evaluation import figure_text
from tests.helpers import CHROMIUM_MISSING, chromium_path, render_page


def _figures(metrics):
    out = [figure_text(v) for v in metrics["eval"].values() if isinstance(v, (int, float))]
    for c in metrics["model"]["candidates"].values():  # held-out and eval figures
        out += [figure_text(c[k]["rmse"]) for k in ("validation", "eval") if k in c]
    out += [figure_text(v) for v in metrics["importance"]["features"].values()]
    return out


def test_importance_ranks_the_column_the_fare_is_made_of_first(trained):
    # tools/datagen.py makes the fare from the trip's distance (plus noise): shuffling
    # trip_km must hurt most, and a column the fare is not made of (company) hardly at all.
    _, job_dir, metrics = trained
    imp = metrics["importance"]
    assert imp["rows"] > 0 and imp["loss"] == "squared error"
    first = next(iter(imp["features"]))
    assert first == "trip_km", imp["features"]
    assert imp["features"]["trip_km"] > 10 * abs(imp["features"]["company"])
    assert imp["features"]["trip_km"] > 0.5 * imp["base_loss"]


def test_training_reports_its_metrics_and_choice_in_one_page(trained, tmp_path):
    _, job_dir, _ = trained
    with open(os.path.join(job_dir, "metrics.json")) as f:
        metrics = json.load(f)
    page = open(os.path.join(job_dir, "report.html"), encoding="utf-8").read()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "data:image/png;base64," in page  # the learning curves
    for figure in _figures(metrics):
        assert f">{figure}<" in page, figure
    if not chromium_path():
        pytest.skip(CHROMIUM_MISSING)
    text = re.sub(r"<[^>]+>", " ", render_page(os.path.join(job_dir, "report.html"),
                                               str(tmp_path / "report.png")))
    for figure in _figures(metrics):
        assert f" {figure} " in text, figure
