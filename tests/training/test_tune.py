"""training.tune: the spec checked before any trial, parallel trial processes, a failing trial
that does not stop the study, kill -9 and resume, the gate on the best trial, the Vertex spec."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml

from preprocessing.reference.evaluation import figure_text
from tests.helpers import CHROMIUM_MISSING, ROOT, chromium_path, render_page
from training.tuning import results as tune_results
from training.tuning.spec import SpecError, parse_spec

TEMPLATE_SPEC = os.path.join(ROOT, "templates", "training", "tune.yaml")
TEMPLATE_JOB = os.path.join(ROOT, "templates", "training", "hp_tuning_job.json")


@pytest.mark.parametrize("params, fixed, says", [
    ({"learning_rat": {"type": "double", "min": 0.1, "max": 1}}, [], "no flag --learning_rat"),
    ({"learning_rate": {"type": "double", "min": 0.1, "max": 0.01}}, [], "must be below max"),
    ({"learning_rate": {"type": "double", "min": 0, "max": 0.1, "scale": "log"}}, [],
     "log scale needs min > 0"),
    ({"learning_rate": {"type": "float", "min": 0.01, "max": 0.1}}, [], "type must be one of"),
    ({"epochs": {"type": "integer", "min": 1.5, "max": 4}}, [], "are integers"),
    ({"dropout": {"type": "discrete", "values": [0.1, 1.5]}}, [], "--dropout must be in [0, 1)"),
    ({"model": {"type": "categorical", "values": ["dnn", "forest"]}}, [], "'forest' is refused"),
    ({"job_dir": {"type": "categorical", "values": ["a", "b"]}}, [], "set by the tuner"),
    ({"epochs": {"type": "integer", "min": 1, "max": 3}}, ["--epochs", "2"], "both tuned"),
    ({"epochs": {"type": "integer", "min": 1, "max": 3, "step": 1}}, [], "unknown key(s) step"),
    ({"epochs": {"type": "integer", "min": 1, "max": 3}}, ["--no_such_flag", "1"],
     "unrecognized arguments"),
])
def test_a_bad_spec_is_one_line_before_any_trial(params, fixed, says):
    with pytest.raises(SpecError) as e:
        parse_spec({"parameters": params}, fixed)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_spec_rules_beside_the_parameters():
    base = {"parameters": {"epochs": {"type": "integer", "min": 1, "max": 3}}}
    for extra, says in (({"algorithm": "hyperband"}, "algorithm must be"),
                        ({"metric": {"name": "rmse", "goal": "maximize"}}, "goal is minimize"),
                        ({"metric": {"name": "auc"}}, "metric.name must be"),
                        ({"max_trials": 0}, "max_trials must be"),
                        ({"early_stopping": "hyperband"}, "early_stopping must be"),
                        ({"algorithm": "grid", "parameters": {"learning_rate": {
                            "type": "double", "min": 0.01, "max": 0.1}}}, "not double")):
        with pytest.raises(SpecError, match=".*" + says.replace("(", r"\(")):
            parse_spec({**base, **extra})
    spec = parse_spec({**base, "max_trials": 40})
    assert spec.failure_limit == 10 and spec.metric is None and spec.parallel_trials == 1
    assert parse_spec({**base, "max_trials": 5}).failure_limit == 3
    assert spec.with_metric("classification").goal == "maximize"
    assert spec.with_metric("regression").metric == "rmse"
    with pytest.raises(SpecError, match="not a figure of a regression"):
        parse_spec({**base, "metric": {"name": "accuracy"}}).with_metric("regression")


def test_the_vertex_job_of_the_template_spec_is_what_vertex_takes(tmp_path):
    from google.cloud import aiplatform_v1
    out = tmp_path / "job.json"
    proc = subprocess.run(
        [sys.executable, "-m", "training.tune", "--spec", TEMPLATE_SPEC,
         "--data_dir", "gs://BUCKET/prep", "--job_dir", "gs://BUCKET/tune",
         "--vertex_spec", str(out), "--trainer_image",
         "us-docker.pkg.dev/PROJECT/tfdataflow/trainer:latest", "--batch_size", "256"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    job = aiplatform_v1.HyperparameterTuningJob.from_json(out.read_text())
    spec = yaml.safe_load(open(TEMPLATE_SPEC))
    assert job.max_trial_count == spec["max_trials"]
    assert job.parallel_trial_count == spec["parallel_trials"]
    study = job.study_spec
    assert study.metrics[0].metric_id == spec["metric"]["name"]
    assert study.metrics[0].goal.name == spec["metric"]["goal"].upper()
    assert [p.parameter_id for p in study.parameters] == list(spec["parameters"])
    lr = next(p for p in study.parameters if p.parameter_id == "learning_rate")
    assert lr.scale_type.name == "UNIT_LOG_SCALE"
    assert lr.double_value_spec.min_value == spec["parameters"]["learning_rate"]["min"]
    assert study.median_automated_stopping_spec is not None
    args = list(job.trial_job_spec.worker_pool_specs[0].container_spec.args)
    assert args[args.index("--hypertune_metric") + 1] == spec["metric"]["name"]
    assert args[-2:] == ["--batch_size", "256"]
    # The checked-in example is this rendering (regenerate it with the command in its README).
    assert json.loads(open(TEMPLATE_JOB).read()) == json.loads(out.read_text())


def _tune(job_dir, spec: dict, data_dir, *flags, wait=True):
    path = os.path.join(job_dir, "spec.yaml")
    os.makedirs(job_dir, exist_ok=True)
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    cmd = [sys.executable, "-m", "training.tune", "--spec", path, "--data_dir", data_dir,
           "--job_dir", job_dir, *flags]
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _trials(job_dir) -> list:
    with open(os.path.join(job_dir, "tuning", "trials.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def parallel_study(preprocessed, tmp_path_factory):
    """Two trials at once, one of them a model module that fails."""
    data_dir, _ = preprocessed
    root = tmp_path_factory.mktemp("parallel")
    good = str(root / "good_model.py")
    shutil.copy(os.path.join(ROOT, "training", "examples", "custom_model.py"), good)
    bad = root / "bad_model.py"
    bad.write_text("X = 1  # no build_model\n")
    job = str(root / "job")
    spec = {"algorithm": "grid", "max_trials": 2, "parallel_trials": 2, "max_failed_trials": 2,
            "parameters": {"model_module": {"type": "categorical", "values": [good, str(bad)]}}}
    proc = _tune(job, spec, data_dir, "--epochs", "1", "--batch_size", "64")
    return job, proc, good, str(bad)


def test_parallel_trials_a_failing_one_does_not_stop_the_study(parallel_study):
    job, proc, good, bad = parallel_study
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    trials = {t["parameters"]["model_module"]: t for t in _trials(job)}
    assert trials[good]["state"] == "complete" and trials[good]["metric"] > 0
    assert trials[bad]["state"] == "failed"
    assert "build_model" in trials[bad]["reason"]
    # Two processes at once: each started before the other ended.
    a, b = trials.values()
    assert a["started"] < b["ended"] and b["started"] < a["ended"]
    best = json.load(open(os.path.join(job, "tuning", "best.json")))
    assert best["trial"] == trials[good]["trial"] and best["metric"]["test"] > 0
    assert best["published"] and os.path.isdir(best["published"])
    assert os.path.dirname(best["published"]) == os.path.join(job, "export")
    assert os.path.getsize(os.path.join(job, "tuning", "trials.png")) > 1000
    assert "failed (exit 2" in proc.stdout and "best trial" in proc.stdout
    assert os.path.join(job, "tuning", "report.html") in proc.stdout
    page = open(os.path.join(job, "tuning", "report.html"), encoding="utf-8").read()
    assert f"<h2>Best trial: {best['trial']}</h2>" in page and "published as" in page
    assert f">{figure_text(best['metric']['eval'])}<" in page
    assert f">{figure_text(best['metric']['test'])}<" in page
    assert page.count('<tr class="bad">') == 1  # the failed trial's row


def test_chromium_renders_the_tune_report(parallel_study, tmp_path):
    if not chromium_path():
        pytest.skip(CHROMIUM_MISSING)
    job = parallel_study[0]
    best = json.load(open(os.path.join(job, "tuning", "best.json")))
    png = str(tmp_path / "t.png")
    text = re.sub(r"<[^>]+>", " ", render_page(os.path.join(job, "tuning", "report.html"), png))
    for figure in (best["metric"]["eval"], best["metric"]["test"]):
        assert f" {figure_text(figure)} " in text
    assert os.path.getsize(png) > 5_000


def _wait_for(predicate, timeout: float, what: str):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_killed_tuner_resumes_no_trial_lost_or_repeated_and_the_gate_keeps_a_better_export(
        preprocessed, trained_trees, tmp_path):
    data_dir, _ = preprocessed
    job = str(tmp_path / "job")
    current = os.path.join(job, "export", "1")
    shutil.copytree(trained_trees[2]["export_dir"], current)  # 60 trees: better than any trial
    spec = {"algorithm": "random", "max_trials": 2, "parallel_trials": 1,
            "parameters": {"num_trees": {"type": "integer", "min": 1, "max": 3},
                           "max_depth": {"type": "integer", "min": 1, "max": 2}}}
    flags = ("--model", "boosted_trees", "--shrinkage", "0.05")
    first = _tune(job, spec, data_dir, *flags, wait=False)

    def one_done_one_running():
        try:
            states = [t["state"] for t in _trials(job)]
        except (OSError, ValueError):
            return False
        return "complete" in states and "running" in states
    try:
        _wait_for(one_done_one_running, 300, "a finished trial and a running one")
        running = [t for t in _trials(job) if t["state"] == "running"][0]
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    finally:
        first.kill()
    # The running trial's trainer dies with the tuner (no orphan writing into its folder).
    time.sleep(1)
    orphans = subprocess.run(["pgrep", "-f", os.path.join(job, "tuning", "trials")],
                             capture_output=True, text=True).stdout.split()
    assert orphans == []
    done_before = {t["trial"]: t for t in _trials(job) if t["state"] == "complete"}

    spec["max_trials"] = 3  # resumed with a raised budget: only the difference is added
    again = _tune(job, spec, data_dir, *flags)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    trials = _trials(job)
    assert [t["trial"] for t in trials] == [0, 1, 2]
    assert all(t["state"] == "complete" for t in trials)
    for n, t in done_before.items():  # kept as they were, not run again
        assert trials[n] == t
    assert trials[running["trial"]]["parameters"] == running["parameters"]
    assert f"trial {running['trial']} was running when the tuner stopped" in again.stdout

    best = json.load(open(os.path.join(job, "tuning", "best.json")))
    assert best["gate"]["accepted"] is False and best["gate"]["reason"] == "metric_regression"
    assert best["published"] is None and "the gate refused it" in again.stdout
    page = open(os.path.join(job, "tuning", "report.html"), encoding="utf-8").read()
    assert "gate: refused (metric_regression)" in page and "not published" in page
    assert f">{figure_text(best['gate']['current_metric'])}<" in page
    assert sorted(os.listdir(os.path.join(job, "export"))) == ["1"]


def test_gate_check_accepts_a_better_version_and_refuses_a_worse_one(trained_trees,
                                                                     shuffled_export):
    good = trained_trees[2]["export_dir"]
    worse = tune_results.gate_check(shuffled_export, good, 0.05)
    assert worse["accepted"] is False and worse["reason"] == "metric_regression"
    assert worse["candidate_metric"] > worse["current_metric"]
    same = tune_results.gate_check(good, good, 0.0)  # no worse: accepted at zero tolerance
    assert same["accepted"] is True and same["reason"] == "within_tolerance"
    assert tune_results.gate_check(good, None, 0.05)["reason"] == "no_current_version"


def test_the_slice_gate_takes_its_columns_from_the_trainers_slice_by(tmp_path):
    from training import tune
    base = ["--spec", "s.yaml", "--data_dir", "d", "--job_dir", str(tmp_path)]
    cfg = tune.config_from_args(base + ["--max_slice_regression", "0.1", "--slice_by",
                                        "payment_type,company", "--epochs", "1"])
    assert cfg.trainer_slice_by == ("payment_type", "company")
    assert "--slice_by" in cfg.trainer_args  # still the trials' flag too
    with pytest.raises(SystemExit):  # no columns to slice by: one line, before any trial
        tune.config_from_args(base + ["--max_slice_regression", "0.1"])
