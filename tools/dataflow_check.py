"""Offline Dataflow check: build each job's real Dataflow job spec and assert on it.

Catches what the DirectRunner cannot: each job is launched with `--runner DataflowRunner
--template_location <local file>` against a local GCS emulator (STORAGE_EMULATOR_HOST,
anonymous credentials), so Beam translates the graph for Dataflow (Runner v2), builds the sdist
from setup.py and stages everything, then stops short of submitting. The check then reads the
spec and the staged pipeline proto and asserts that the job's steps are there, that the pipeline
options (worker knobs included) are as given, and that the package built from setup.py is
among the staged files. A graph Dataflow cannot translate, or a setup file that cannot be
built, fails the build, and so the check.

    python -m tools.dataflow_check --model_dir out/job/export/1234
    python -m tools.dataflow_check --jobs preprocess --setup_file ./setup.py

Without STORAGE_EMULATOR_HOST it starts gcp-storage-emulator (requirements-dev.txt) itself.
Known gap: tf.transform writes its analysis graphs through TensorFlow's own GCS client while the
graph is built, and that client has no emulator endpoint, so the preprocess check uses a local
--tft_temp_dir (on Dataflow it defaults to temp_location/tft_tmp).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = "dataflow-check"
PROJECT = "offline-check-1"
REGION = "us-central1"
# Steps each job's Dataflow graph must contain (user-facing transform names, a composite's
# parts as Outer/Inner). Every batch job
# ends in Finalize: on a template launch nothing after p.run() runs, so it is the only place
# outputs get published, summarised and marked _SUCCESS.
JOB_STEPS = {
    "preprocess": ["ReadCsv", "ReadCsv/ParseAndSplit", "Analyze", "Transform_train", "Write_train",
                   "WriteTransform", "DeadLetters", "Finalize"],
    "batch_predict": ["Read", "Read/Parse", "RunInference", "Format", "WriteJsonl", "WriteBigQuery",
                      "DeadLetters", "Finalize"],
    "stream_predict": ["ReadPubSub", "Parse", "RunInference", "Format", "WritePredictions",
                       "WriteBigQuery", "InsertFailures", "WriteRejects", "Monitor"],
}
# Pipeline-level knobs users set on Dataflow; the check asserts they reach the job spec.
KNOBS = ["--machine_type", "n2-standard-4", "--max_num_workers", "7",
         "--autoscaling_algorithm", "THROUGHPUT_BASED",
         "--dataflow_service_options", "enable_prime", "--labels", "team=ml"]


class CheckFailed(Exception):
    pass


def start_emulator() -> subprocess.Popen:
    from tools import gcs_emulator
    proc, endpoint = gcs_emulator.start()
    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    return proc


def _upload_tree(local: str, remote: str) -> None:
    from preprocessing.files.filesys import copy_local_tree
    copy_local_tree(local, remote)


def prepare_inputs(model_dir: str | None) -> Dict[str, str]:
    """Puts a small CSV, the taxi spec and (if given) a model export into the emulator."""
    from apache_beam.io.filesystems import FileSystems
    from google.api_core import exceptions as gexc
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from preprocessing import TAXI_SPEC
    from tools.datagen import write_csv
    try:
        storage.Client(project=PROJECT, credentials=AnonymousCredentials()).create_bucket(BUCKET)
    except gexc.Conflict:
        pass
    base = f"gs://{BUCKET}"
    tmp = tempfile.mkdtemp(prefix="dfcheck_")
    write_csv(os.path.join(tmp, "taxi.csv"), 200, seed=3)
    with open(os.path.join(tmp, "taxi.csv"), "rb") as f, \
            FileSystems.create(f"{base}/raw/taxi.csv") as out:
        out.write(f.read())
    with open(TAXI_SPEC, "rb") as f, FileSystems.create(f"{base}/taxi.yaml") as out:
        out.write(f.read())
    paths = {"csv": f"{base}/raw/*.csv", "spec": f"{base}/taxi.yaml", "base": base}
    if model_dir:
        _upload_tree(model_dir, f"{base}/models/1")
        paths["model"] = f"{base}/models"
    return paths


def job_args(job: str, paths: Dict[str, str], tft_temp: str) -> List[str]:
    b = paths["base"]
    if job == "preprocess":
        return ["--input", paths["csv"], "--output", f"{b}/prep", "--schema_spec", paths["spec"],
                "--tft_temp_dir", tft_temp]
    if job == "batch_predict":
        return ["--model_dir", paths["model"], "--input", paths["csv"],
                "--output", f"{b}/predictions/{{date}}", "--run_date", "2026-11-22",
                "--output_table", f"{PROJECT}:predictions.daily"]
    return ["--streaming", "--model_dir", paths["model"],
            "--input_subscription", f"projects/{PROJECT}/subscriptions/in",
            "--output_topic", f"projects/{PROJECT}/topics/out",
            "--dead_letter_topic", f"projects/{PROJECT}/topics/dead",
            "--monitoring_topic", f"projects/{PROJECT}/topics/mon",
            "--output_table", f"{PROJECT}:predictions.stream"]


def build_spec(job: str, args: List[str], spec_path: str, setup_file: str) -> None:
    import importlib
    mod = importlib.import_module(f"beam_jobs.{job}")
    argv = args + ["--runner", "DataflowRunner", "--project", PROJECT, "--region", REGION,
                   "--temp_location", f"gs://{BUCKET}/tmp/{job}", "--no_auth",
                   "--template_location", spec_path, "--setup_file", setup_file] + KNOBS
    # Workers install the package from setup.py; the launcher's __main__ is not needed there.
    mod.run(argv, save_main_session=False)


def _check_pubsub_dedup(proto, problems: list) -> None:
    """The Pub/Sub read de-duplicates by the message id attribute (id_label) on Dataflow."""
    from apache_beam.portability.api import beam_runner_api_pb2 as rapi
    reads = [t for t in proto.components.transforms.values()
             if t.spec.urn == "beam:transform:pubsub_read:v1"]
    if not reads:
        problems.append("no Pub/Sub read in the streaming graph")
        return
    payload = rapi.PubSubReadPayload.FromString(reads[0].spec.payload)
    if payload.id_attribute != "id":
        problems.append(f"the Pub/Sub read de-duplicates by {payload.id_attribute!r}, not 'id'")


def verify(job: str, spec_path: str) -> dict:
    """Reads the spec and the staged pipeline proto; raises CheckFailed listing what is wrong."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.portability.api import beam_runner_api_pb2
    problems = []
    if not os.path.exists(spec_path):
        raise CheckFailed(f"{job}: no job spec was written")
    spec = json.load(open(spec_path))
    env = spec.get("environment", {})
    options = env.get("sdkPipelineOptions", {}).get("options", {})
    url = options.get("pipelineUrl", "")
    if url.startswith("storage.googleapis.com/"):
        url = "gs://" + url[len("storage.googleapis.com/"):]
    names = set()
    try:
        with FileSystems.open(url) as f:
            proto = beam_runner_api_pb2.Pipeline.FromString(f.read())
        names = {t.unique_name for t in proto.components.transforms.values()}
        if job == "stream_predict":
            _check_pubsub_dedup(proto, problems)
    except Exception as e:
        problems.append(f"cannot read the staged pipeline {url}: {e}")
    tops = {n.split("/")[0] for n in names}
    missing = [s for s in JOB_STEPS[job] if s not in tops and s not in names]
    if missing:
        problems.append(f"steps missing from the Dataflow graph: {missing}")
    want = {"machine_type": "n2-standard-4", "max_num_workers": 7,
            "autoscaling_algorithm": "THROUGHPUT_BASED", "region": REGION, "project": PROJECT}
    for k, v in want.items():
        got = options.get(k)
        if got != v and not (isinstance(v, int) and got == float(v)):
            problems.append(f"option {k} is {got!r}, expected {v!r}")
    if "enable_prime" not in (options.get("dataflow_service_options") or []):
        problems.append("dataflow_service_options did not reach the spec")
    if "team=ml" not in (options.get("labels") or []) and spec.get("labels", {}).get("team") != "ml":
        problems.append("labels did not reach the spec")
    if job == "stream_predict" and not options.get("streaming"):
        problems.append("the streaming job's spec is not streaming")
    packages = [p for pool in env.get("workerPools", []) for p in pool.get("packages", [])]
    sdist = [p for p in packages if p.get("name") == "workflow.tar.gz"]
    if not sdist:
        problems.append(f"the package built from setup.py is not staged (staged: "
                        f"{[p.get('name') for p in packages]})")
    else:
        loc = sdist[0]["location"]
        loc = "gs://" + loc[len("storage.googleapis.com/"):] if loc.startswith("storage.") else loc
        with tempfile.NamedTemporaryFile(suffix=".tar.gz") as tmp:
            from apache_beam.io.filesystem import CompressionTypes
            with FileSystems.open(loc, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                tmp.write(f.read())
            tmp.flush()
            members = tarfile.open(tmp.name).getnames()
        if not any(m.endswith(f"beam_jobs/{job}.py") for m in members):
            problems.append(f"the staged sdist lacks beam_jobs/{job}.py")
    if problems:
        raise CheckFailed(f"{job}: " + "; ".join(problems))
    return {"job": job, "steps": len(names), "staged": [p.get("name") for p in packages]}


def check(jobs: List[str], model_dir: str | None, setup_file: str, workdir: str) -> List[dict]:
    paths = prepare_inputs(model_dir)
    reports = []
    for job in jobs:
        if job != "preprocess" and "model" not in paths:
            raise CheckFailed(f"{job}: give --model_dir (a local export) to check it")
        spec = os.path.join(workdir, f"{job}.json")
        if os.path.exists(spec):
            os.remove(spec)
        try:
            build_spec(job, job_args(job, paths, os.path.join(workdir, "tft_tmp")), spec,
                       setup_file)
        except SystemExit as e:  # a job's own fail-fast error
            raise CheckFailed(f"{job}: the job refused to build: {e.code}") from None
        except Exception as e:
            raise CheckFailed(f"{job}: the Dataflow job could not be built or staged: "
                              f"{type(e).__name__}: {str(e).splitlines()[0][:400]}") from None
        reports.append(verify(job, spec))
    return reports


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.dataflow_check",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", default="preprocess,batch_predict,stream_predict")
    ap.add_argument("--model_dir", help="A local export (needed for the prediction jobs).")
    ap.add_argument("--setup_file", default=os.path.join(ROOT, "setup.py"))
    ap.add_argument("--workdir", default=None, help="Where the job specs are written.")
    a = ap.parse_args(argv)
    emulator = None if os.environ.get("STORAGE_EMULATOR_HOST") else start_emulator()
    workdir = a.workdir or tempfile.mkdtemp(prefix="dataflow_specs_")
    try:
        reports = check([j.strip() for j in a.jobs.split(",") if j.strip()], a.model_dir,
                        a.setup_file, workdir)
    except CheckFailed as e:
        print(f"dataflow_check: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if emulator:
            emulator.terminate()
    for r in reports:
        print(f"dataflow_check: {r['job']}: OK ({r['steps']} transforms; staged {r['staged']}); "
              f"spec {os.path.join(workdir, r['job'] + '.json')}")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())
