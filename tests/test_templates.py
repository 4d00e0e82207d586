"""Deployment templates stay true to the jobs: Flex metadata, Cloud Scheduler, Airflow DAG."""
import ast
import json
import os

import pytest

from tests.helpers import ROOT
from tools import flex_templates


def _option_names(job):
    actions, _ = flex_templates.job_actions(job)
    return {a.dest for a in actions}


@pytest.mark.parametrize("job", flex_templates.JOBS)
def test_flex_metadata_matches_the_job_options_exactly(job):
    meta = json.load(open(flex_templates.path_for(job)))
    names = [p["name"] for p in meta["parameters"]]
    assert len(names) == len(set(names))
    assert set(names) == _option_names(job)
    required = set(flex_templates.job_module(job).REQUIRED_OPTIONS)
    assert {p["name"] for p in meta["parameters"] if not p["isOptional"]} == required
    # Each parameter really is an option the job's PipelineOptions parse.
    from apache_beam.options.pipeline_options import PipelineOptions

    flex_templates.job_module(job)  # imported: its options class is registered with Beam
    actions = {a.dest: a for a in flex_templates.job_actions(job)[0]}
    for p in meta["parameters"]:
        a = actions[p["name"]]
        value = (str(a.choices[0]) if a.choices else "3" if a.type is int
                 else "0.5" if a.type is float else "gs://b/x")
        got = PipelineOptions([f"--{p['name']}={value}"]).get_all_options()[p["name"]]
        # A repeatable flag (action append) given once by the template: a list of one.
        assert (got == [value]) if a.default is None and isinstance(got, list) \
            else str(got) == value


def test_committed_metadata_is_current():
    assert flex_templates.main(["--check"]) == 0


def test_scheduler_job_launches_the_template_with_real_options():
    job = json.load(open(os.path.join(ROOT, "templates", "batch_predict", "scheduler_job.json")))
    body = job["httpTarget"]["body"]["launchParameter"]
    assert job["httpTarget"]["uri"].endswith("/flexTemplates:launch")
    assert set(body["parameters"]) <= _option_names("batch_predict")
    assert {"model_dir", "input", "output"} <= set(body["parameters"])


def test_airflow_dag_passes_the_logical_date_and_real_options():
    src = open(os.path.join(ROOT, "templates", "batch_predict", "airflow_dag.py")).read()
    tree = ast.parse(src)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and getattr(n.func, "id", "") == "DataflowStartFlexTemplateOperator"]
    assert len(calls) == 1
    params = None
    for node in ast.walk(calls[0]):
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            if "model_dir" in keys:
                params = dict(zip(keys, node.values))
    assert params is not None
    assert set(params) <= _option_names("batch_predict")
    assert {"model_dir", "input", "output", "run_date"} <= set(params)
    assert params["run_date"].value == "{{ ds }}"


def test_all_jobs_options_parse_together():
    """Beam registers every PipelineOptions subclass in one parser: a flag defined by two jobs
    breaks every job once both modules are imported (as on Dataflow workers)."""
    import argparse

    from apache_beam.options.pipeline_options import PipelineOptions
    mods = [flex_templates.job_module(j) for j in flex_templates.JOBS]
    opts = PipelineOptions(["--model_dir", "m", "--input", "i"])
    everything = opts.get_all_options()
    assert everything["model_dir"] == "m" and everything["input"] == "i"
    owners = {}  # flag -> the option class defining it: one class per flag
    ours = [c for c in PipelineOptions.__subclasses__() if c.__module__.startswith("beam_jobs")]
    assert len(ours) >= 3 + len(mods)  # the shared IO, model and image flags, a class per job
    for cls in ours:
        parser = argparse.ArgumentParser(add_help=False)
        cls._add_argparse_args(parser)
        for a in parser._actions:
            assert a.dest not in owners or owners[a.dest] is cls, (a.dest, owners[a.dest], cls)
            owners[a.dest] = cls
    assert {"model_dir", "input", "output", "log_level"} <= set(owners)
