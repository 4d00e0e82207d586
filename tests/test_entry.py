"""A quiet terminal and a fast --help (preprocessing/quiet.py, preprocessing/entry.py): real
processes, as a user starts them."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from preprocessing import entry, quiet
from preprocessing.reference.evaluation import metrics_table
from tests.helpers import library_lines
from tools import help_texts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def _python(code: str, *args, env=None):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT,
                          capture_output=True, timeout=120,
                          env={**os.environ, **(env or {})})


NOISY = """
    import os, subprocess, sys
    from preprocessing import quiet
    quiet.install(sys.argv[1:])
    os.write(2, b"I0000 00:00:1795878745.142622   22260 cudart_stub.cc:31] Could not find cuda\\n")
    print("mine 1", file=sys.stderr, flush=True)
    os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n")
    child = "import os; os.write(2, b'E0000 00:00:17.5 9 cuda_platform.cc:52] cuInit\\\\n')"
    subprocess.run([sys.executable, "-c", child + "; os.write(2, b'child line\\\\n')"])
    print("mine 2", file=sys.stderr, flush=True)
    """


def test_the_filter_drops_cpp_log_lines_of_the_process_and_its_children_and_keeps_the_rest():
    env = {quiet.QUIET_ENV: "", quiet.FILTERED_ENV: ""}
    r = _python(NOISY, env=env)
    assert r.returncode == 0
    assert r.stderr.decode().splitlines() == ["mine 1", "child line", "mine 2"]


@pytest.mark.parametrize("flag", [["-v"], ["--verbosity", "debug"], ["--verbosity=debug"]])
def test_verbosity_debug_keeps_every_line(flag):
    r = _python(NOISY, *flag, env={quiet.QUIET_ENV: "", quiet.FILTERED_ENV: ""})
    lines = r.stderr.decode().splitlines()
    assert "mine 1" in lines and "child line" in lines
    assert any("cudart_stub" in line for line in lines)
    assert any("cuInit" in line for line in lines)


def test_a_crash_still_shows_its_last_lines():
    r = _python("""
        import os, sys
        from preprocessing import quiet
        quiet.install([])
        print("last words", file=sys.stderr, flush=True)
        os.abort()
        """, env={quiet.QUIET_ENV: "", quiet.FILTERED_ENV: ""})
    assert r.returncode != 0
    assert b"last words" in r.stderr


def test_verbosity_of_reads_argv_before_any_parser():
    assert quiet.verbosity_of(["--input", "x", "-v"]) == "debug"
    assert quiet.verbosity_of(["--verbosity", "quiet"]) == "quiet"
    assert quiet.verbosity_of(["--verbose", "2"]) is None  # training's Keras flag, not ours
    assert entry.running_module(["python", "-m", "beam_jobs.redrive", "-h"]) == "beam_jobs.redrive"
    assert entry.running_module(["python", "x.py"]) is None


@pytest.mark.parametrize("module", help_texts.modules())
def test_help_answers_without_importing_beam_or_tensorflow(module):
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", module, "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0
    assert r.stdout == entry.stored_help(module)
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines()}
    assert not {"apache_beam", "tensorflow", "pandas"} & imported


def test_importing_a_job_module_does_not_load_tensorflow():
    """Launch-time checks and --help stay light: TensorFlow loads where a model or a
    transform runs (a DoFn's setup, the launch step that reads an export), not at import."""
    jobs = ["beam_jobs.preprocess", "beam_jobs.batch_predict", "beam_jobs.stream_predict",
            "beam_jobs.redrive"]
    code = ("import sys\n" + "".join(f"import {m}\n" for m in jobs)
            + "print(sorted(m for m in ('tensorflow', 'tensorflow_transform', 'keras') "
              "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.slow
def test_stored_help_texts_are_the_live_ones():
    assert help_texts.main(["--check"]) == 0, "run: python -m tools.help_texts"


@pytest.mark.slow
def test_a_job_that_loads_tensorflow_prints_only_its_own_lines(tmp_path):
    args = [sys.executable, "-m", "training.optimize", "--model_dir", str(tmp_path / "none")]
    env = {k: v for k, v in os.environ.items()
           if k not in (quiet.QUIET_ENV, quiet.FILTERED_ENV, "TF_CPP_MIN_LOG_LEVEL")}
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2
    assert library_lines(r.stdout + r.stderr) == []
    assert r.stderr.strip().splitlines()[-1].startswith("training.optimize: error: ")
    loud = subprocess.run(args + ["-v"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)
    assert loud.returncode == 2 and library_lines(loud.stderr)  # -v: TensorFlow's lines too


def test_metrics_print_as_an_aligned_table():
    text = metrics_table({"examples": 2965, "rmse": 1.0509637972983632, "label": "fare",
                          "labels_outside_train_range": {"examples": 3, "train_range": [0.5, 9.0]}})
    assert text.splitlines() == [
        "  examples                                2,965",
        "  rmse                                    1.0510",
        "  label                                   fare",
        "  labels_outside_train_range.examples     3",
        "  labels_outside_train_range.train_range  0.5000, 9.0000",
    ]
