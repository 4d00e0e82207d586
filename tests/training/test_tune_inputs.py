"""training.tune's inputs bounded like every other input: the spec read as a schema spec is
(bytes refused, never cut; no YAML aliases; a depth bound; regular files only), counts that
Vertex AI can take, parallel trials the machine holds, nothing tuned that changes what is
predicted, Vertex jobs that Vertex would accept, and a trial never published twice."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from tests.helpers import ROOT
from training import tune
from training.tuning import results as tune_results
from training.tuning.spec import SpecError, load_spec, parse_spec

EPOCHS = {"epochs": {"type": "integer", "min": 1, "max": 3}}


def _tune(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "training.tune", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_a_spec_of_aliases_is_refused_before_it_expands(tmp_path):
    lol = ["a: &a [x, x, x, x, x, x, x, x, x, x]"] + [
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]" for p, c in zip("abcdefgh", "bcdefghi")]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lol) + "\nmax_trials: *i\nparameters: {}\n")
    with pytest.raises(SpecError, match=r"aliases \(\*name\) are not allowed"):
        load_spec(str(path))


def test_a_spec_over_the_byte_bound_is_refused_not_cut(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * (1 << 20) + "\nmax_trials: 2\nmetric: {name: mae}\n"
                    "parameters: {epochs: {type: integer, min: 1, max: 3}}\n")
    with pytest.raises(SpecError, match="over 1 MiB"):
        load_spec(str(path))


def test_deep_nesting_and_files_that_are_no_files_are_one_line(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("parameters: " + "[" * 20000 + "]" * 20000 + "\n")
    with pytest.raises(SpecError, match="nested deeper than"):
        load_spec(str(deep))
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    done = threading.Event()

    def read():
        with pytest.raises(SpecError, match="not a regular file"):
            load_spec(str(fifo))
        done.set()
    threading.Thread(target=read, daemon=True).start()
    assert done.wait(10), "reading a FIFO blocked"
    with pytest.raises(SpecError, match="not a regular file"):
        load_spec(str(tmp_path))


@pytest.mark.parametrize("extra, says", [
    ({"max_trials": 10**10}, "max_trials must be an integer from 1 to 2,147,483,647"),
    ({"parallel_trials": 2**31}, "parallel_trials must be"),
    ({"max_failed_trials": 10**12}, "max_failed_trials must be"),
])
def test_counts_vertex_cannot_take_are_refused(extra, says):
    with pytest.raises(SpecError, match=says):
        parse_spec({"parameters": EPOCHS, **extra})


def test_what_changes_the_target_or_the_outputs_is_never_tuned():
    with pytest.raises(SpecError, match="label_key changes what the model predicts"):
        parse_spec({"parameters": {"label_key": {"type": "categorical",
                                                 "values": ["fare_amount", "trip_km"]}}})
    for flag in ("hypertune_metric", "serving_base_path"):
        with pytest.raises(SpecError, match=f"--{flag} is set by the tuner"):
            parse_spec({"parameters": EPOCHS}, [f"--{flag}", "rmse"])
    parse_spec({"parameters": EPOCHS}, ["--label_key", "x"])  # fixed for every trial: fine


def test_a_name_with_a_newline_stays_on_one_line():
    with pytest.raises(SpecError) as e:
        parse_spec({"parameters": {"job_dir\n--job_dir=/elsewhere": EPOCHS["epochs"]}})
    assert "\n" not in str(e.value) and "\\n--job_dir=/elsewhere" in str(e.value)


def test_parallel_trials_are_capped_by_the_machine_unless_allowed(monkeypatch, caplog):
    spec = parse_spec({"parameters": EPOCHS, "parallel_trials": 64, "max_trials": 100})
    monkeypatch.setattr(tune, "machine_room", lambda: (2, 24 << 30))
    assert tune.cap_parallel_trials(spec, None).parallel_trials == 2
    assert "--max_parallel_trials N" in caplog.text
    monkeypatch.setattr(tune, "machine_room", lambda: (8, 5 << 30))
    assert tune.cap_parallel_trials(spec, None).parallel_trials == 2  # 2 GiB a trial
    assert tune.cap_parallel_trials(spec, 16).parallel_trials == 16   # the operator's call
    small = parse_spec({"parameters": EPOCHS, "parallel_trials": 2})
    assert tune.cap_parallel_trials(small, None) is small


@pytest.mark.parametrize("args, says", [
    (["--data_dir", "out/prep", "--job_dir", "gs://B/job"], "--data_dir out/prep: a Vertex"),
    (["--data_dir", "gs://B/prep", "--job_dir", "/tmp/job"], "--job_dir /tmp/job: a Vertex"),
    (["--data_dir", "gs://B/prep", "--job_dir", "gs://B/job", "--display_name", "x" * 300],
     "--display_name: Vertex AI takes 1 to 128"),
    (["--data_dir", "gs://B/prep", "--job_dir", "gs://B/job", "--display_name", "a\nb"],
     "without control characters"),
])
def test_a_vertex_job_vertex_would_refuse_is_refused_here(tmp_path, args, says):
    spec = tmp_path / "s.yaml"
    spec.write_text(json.dumps({"parameters": EPOCHS, "metric": {"name": "rmse"}}))
    proc = _tune("--spec", str(spec), "--vertex_spec", str(tmp_path / "job.json"), *args)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "job.json").exists()
    last = proc.stderr.strip().splitlines()[-1]  # after argparse's usage, one line of ours
    assert last.startswith("python -m training.tune: error: ") and says in last


def test_a_trial_is_never_published_twice(tmp_path):
    """A stop between the publish and best.json, then the study finished again: the trial's
    version is found by the record the publish put in it, not published a second time."""
    export = tmp_path / "trial" / "export"
    (export / "variables").mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"x")
    base = tmp_path / "job" / "export"
    origin = {"study": str(tmp_path / "job" / "tuning"), "trial": 3}
    first = tune_results.publish(str(export), str(base), origin)
    assert tune_results.published_before(str(base), origin) == first
    assert tune_results.published_before(str(base), dict(origin, trial=4)) is None
    assert sorted(os.listdir(base)) == [os.path.basename(first)]
