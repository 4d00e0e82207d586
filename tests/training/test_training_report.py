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
    out += [figure_text(m["rmse"]) for c in metrics["eval_slices"]["slices"].values()
            for m in c.values()]
    return out


def test_eval_slices_partition_the_golden_rows_and_agree_with_their_whole(trained):
    import types

    from preprocessing.files import saved_models
    from preprocessing.reference.golden import EXPORT_GOLDEN
    from preprocessing.reference.golden_score import read_golden, score
    _, _, metrics = trained
    export = metrics["export_dir"]
    sliced = metrics["eval_slices"]
    schema = saved_models_schema(export)
    rows = read_golden(os.path.join(export, EXPORT_GOLDEN), schema)
    whole = score(types.SimpleNamespace(path=export, module=saved_models.load(export)), rows,
                  "regression")
    assert sliced["rows"] == len(rows) > 0
    assert set(sliced["slices"]) == {"payment_type", "passenger_count"}
    for column, slices in sliced["slices"].items():
        assert sum(m["examples"] for m in slices.values()) == len(rows), column
        pooled = sum(m["examples"] * m["rmse"] ** 2 for m in slices.values()) / len(rows)
        assert pooled ** 0.5 == pytest.approx(whole.value, rel=1e-6), column
    assert len(sliced["slices"]["passenger_count"]) >= 2  # train quintiles, not one bucket


def saved_models_schema(export):
    from preprocessing.contract.schema import RAW_SCHEMA_ASSET, Schema
    with open(os.path.join(export, RAW_SCHEMA_ASSET)) as f:
        return Schema.loads(f.read())


def test_a_column_that_cannot_be_sliced_stops_training_before_it_starts(preprocessed, tmp_path):
    from tests.helpers import small_train_config
    from training import train_and_evaluate
    from training.guards import TrainingError
    data_dir, _ = preprocessed
    for column, says in (("nope", "is not a column"), ("fare_amount", "is the label")):
        with pytest.raises(TrainingError, match=says):
            train_and_evaluate(small_train_config(data_dir, str(tmp_path / column),
                                                  slice_by=(column,)))
        assert not os.path.exists(os.path.join(tmp_path, column, "export"))


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


def test_the_trees_own_importance_is_ydfs_split_gain_as_shares():
    """YDF's SUM_SCORE of a forest whose label is made of one input: nearly all of it."""
    import numpy as np
    import ydf

    from training.reporting.importance import forest_importance
    rng = np.random.default_rng(0)
    rows = {"made_of": rng.random(2000), "noise": rng.random(2000)}
    rows["y"] = 3 * rows["made_of"] + 0.01 * rng.random(2000)
    forest = ydf.GradientBoostedTreesLearner(label="y", task=ydf.Task.REGRESSION,
                                             num_trees=20).train(rows, verbose=0)
    imp = forest_importance(forest)
    assert imp["kind"] == "SUM_SCORE" and next(iter(imp["features"])) == "made_of"
    assert abs(sum(imp["features"].values()) - 1) < 1e-4
    assert imp["features"]["made_of"] > 0.95


def test_the_report_shows_the_trees_importance_when_trees_are_exported(trained):
    _, job_dir, metrics = trained
    trees = metrics["model"]["candidates"].get("boosted_trees") or {}
    page = open(os.path.join(job_dir, "report.html"), encoding="utf-8").read()
    if metrics["model"]["family"] not in ("boosted_trees", "blend"):
        assert "The trees' own importance" not in page
        return
    imp = trees["ydf_importance"]
    top = next(iter(imp["features"]))
    assert top.startswith("trip_km"), imp  # what the fare is made of (tools/datagen.py)
    assert "The trees' own importance (YDF)" in page and f"<td>{top}</td>" in page


def test_importance_rows_bounds_the_rows_and_0_measures_none(monkeypatch):
    """--importance_rows N reaches the measure as its bound; 0 (a tuning trial's time)
    skips it."""
    from training import trainer
    calls = []
    monkeypatch.setattr(trainer, "permutation_importance",
                        lambda *a: calls.append(a[-1]) or {"rows": a[-1]})
    assert trainer._importance("model", ["eval"], "info", 256, 0, 0) is None
    assert trainer._importance("model", ["eval"], "info", 256, 0, 7) == {"rows": 7}
    assert calls == [7]
