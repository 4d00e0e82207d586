"""Shadow models (inference/model/shadow.py): a second model scores the same rows, its outputs never
reach the prediction sinks, and a comparison record says how far apart the two are."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from beam_jobs import batch_predict, stream_predict
from beam_jobs.shared import errors
from inference.model.shadow import ShadowSums, aligned, compare
from tests.helpers import GOOD, read_jsonl


def test_compare_regression_and_classification_by_hand():
    sums = compare("regression", {"predictions": np.array([1.0, 2.0, 4.0])},
                   {"predictions": np.array([1.5, 2.0, 1.0])}, [1.0, None, 4.0])
    rec = sums.record("regression", "1", "2")
    assert rec["compared"] == 3 and rec["mean_abs_diff"] == pytest.approx(3.5 / 3)
    assert rec["serving_metrics"]["rmse"] == 0.0 and rec["serving_metrics"]["examples"] == 2
    assert rec["shadow_metrics"]["rmse"] == pytest.approx(np.sqrt((0.25 + 9) / 2))
    cls = compare("classification", {"classes": np.array([b"a", b"b", b"c", b"a"], object)},
                  {"classes": np.array([b"a", b"c", b"c", b"b"], object)}, ["a", "b", "c", "a"])
    rec = cls.merge(ShadowSums(rows=2, shadow_rejected=2)).record("classification")
    assert rec["class_flip_rate"] == 0.5 and rec["rows"] == 6 and rec["shadow_rejected"] == 2
    assert rec["serving_metrics"]["accuracy"] == 1.0 and rec["shadow_metrics"]["accuracy"] == 0.5
    assert "serving_version" not in rec  # unknown versions are left out, not null


def test_aligned_keeps_rows_both_models_scored():
    s, h, common = aligned([0, 1, 3], {"p": np.array([10, 11, 13])},
                           [1, 2, 3], {"p": np.array([21, 22, 23])})
    assert common == [1, 3] and s["p"].tolist() == [11, 13] and h["p"].tolist() == [21, 23]


def test_batch_shadow_compares_without_touching_the_outputs(trained, shuffled_export,
                                                            taxi_csv, tmp_path):
    export = trained[2]["export_dir"]
    summary = batch_predict.run(["--model_dir", export, "--shadow_model_dir", shuffled_export,
                                 "--input", taxi_csv[0], "--output", str(tmp_path / "out"),
                                 "--evaluate_label", "fare_amount"])
    shadow, metrics = summary["shadow"], summary["metrics"]
    assert shadow["rows"] == shadow["compared"] == summary["rows_predicted"]
    assert shadow["serving_metrics"]["rmse"] == pytest.approx(metrics["rmse"], rel=1e-12)
    assert shadow["shadow_metrics"]["rmse"] > 1.5 * metrics["rmse"]
    assert shadow["mean_abs_diff"] > 0.5
    preds = read_jsonl(str(tmp_path / "out" / "predictions-*.jsonl"))
    assert {p["model_version"] for p in preds} == {summary["model_version"]}
    # The same model as its own shadow: no difference at all.
    summary = batch_predict.run(["--model_dir", export, "--shadow_model_dir", export,
                                 "--input", taxi_csv[0], "--output", str(tmp_path / "same")])
    assert summary["shadow"]["mean_abs_diff"] == 0.0
    assert "serving_metrics" not in summary["shadow"]  # no labels asked for


def test_a_shadow_model_that_cannot_score_the_rows_fails_at_launch(trained, taxi_csv, tmp_path):
    with pytest.raises(errors.JobError, match="cannot read the shadow model"):
        batch_predict.run(["--model_dir", trained[2]["export_dir"], "--shadow_model_dir",
                           str(tmp_path / "nothing"), "--input", taxi_csv[0],
                           "--output", str(tmp_path / "out")])


def test_streaming_shadow_writes_a_comparison_per_window(trained, shuffled_export, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(trained[2]["export_dir"], model / "100")
    lines = [json.dumps({"id": f"e{i}", "event_time": 1_700_000_000 + i * 0.5,
                         "data": dict(GOOD, passenger_count=1 + i % 4)}) for i in range(30)]
    lines.append("not json")
    src = tmp_path / "events.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    stream_predict.run(["--streaming", "--model_dir", str(model), "--replay", str(src),
                        "--replay_rate", "200", "--output_dir", str(out), "--window_secs", "5",
                        "--shadow_model_dir", shuffled_export])
    preds = read_jsonl(str(out / "predictions-*.jsonl"))
    assert len(preds) == 30 and {p["model_version"] for p in preds} == {"100"}
    monitoring = read_jsonl(str(out / "monitoring" / "*.jsonl"))
    shadow = [m for m in monitoring if m.get("event") == "shadow_comparison"]
    assert len(shadow) >= 3 and all(m["window_end"] - m["window_start"] == 5 for m in shadow)
    assert sum(m["compared"] for m in shadow if m["pane"] == "ON_TIME") == 30
    assert all(m["mean_abs_diff"] > 0 for m in shadow)
    stats = [m for m in monitoring if m["event"] == "window_stats"]
    assert sum(m["predictions"] for m in stats if m["pane"] == "ON_TIME") == 30
