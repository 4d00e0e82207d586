"""Render the same training task as a Kubeflow TFJob manifest and a Vertex AI CustomJob spec.

    python -m tools.render --image gcr.io/P/trainer:1 --workers 3 --ps 1 \\
        --output_dir templates/training -- --data_dir gs://B/prep --job_dir gs://B/job

Without `--ps`: N workers under MultiWorkerMirroredStrategy (TFJob: N `Worker` replicas;
Vertex: pool 0 = the chief, pool 1 = N-1 workers). With `--ps M`: a chief, N workers and M
parameter servers (TFJob: Chief/Worker/PS; Vertex: pools 0/1/2). Both platforms set TF_CONFIG;
Vertex also sets AIP_MODEL_DIR etc. from `baseOutputDirectory`, which training.task honours.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

import yaml

TASK_COMMAND = ["python", "-m", "training.task"]


def _job_dir(task_args: List[str]) -> Optional[str]:
    for i, a in enumerate(task_args):
        if a == "--job_dir" and i + 1 < len(task_args):
            return task_args[i + 1]
        if a.startswith("--job_dir="):
            return a.split("=", 1)[1]
    return None


def render_tfjob(name: str, image: str, workers: int, ps: int, task_args: List[str],
                 gpus: int = 0, cpu: str = "4", memory: str = "16Gi") -> dict:
    limits = {"cpu": cpu, "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = gpus

    def replica(count):
        return {"replicas": count, "restartPolicy": "OnFailure", "template": {"spec": {
            "containers": [{"name": "tensorflow",  # the name the training operator expects
                            "image": image, "command": list(TASK_COMMAND), "args": list(task_args),
                            "resources": {"limits": dict(limits)}}]}}}

    specs = {}
    if ps:
        specs["Chief"] = replica(1)
        specs["Worker"] = replica(workers)
        ps_spec = replica(ps)
        ps_spec["template"]["spec"]["containers"][0]["resources"] = {
            "limits": {"cpu": cpu, "memory": memory}}  # parameter servers need no GPU
        specs["PS"] = ps_spec
    else:
        specs["Worker"] = replica(workers)
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name},
            "spec": {"runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 3},
                     "tfReplicaSpecs": specs}}


def render_customjob(name: str, image: str, workers: int, ps: int, task_args: List[str],
                     machine_type: str = "n1-standard-8", gpus: int = 0,
                     accelerator_type: str = "NVIDIA_TESLA_T4") -> dict:
    def pool(count, with_gpu=True):
        machine = {"machineType": machine_type}
        if gpus and with_gpu:
            machine.update(acceleratorType=accelerator_type, acceleratorCount=gpus)
        return {"machineSpec": machine, "replicaCount": count,
                "containerSpec": {"imageUri": image, "command": list(TASK_COMMAND),
                                  "args": list(task_args)}}

    if ps:
        pools = [pool(1), pool(workers), pool(ps, with_gpu=False)]
    else:
        pools = [pool(1)] + ([pool(workers - 1)] if workers > 1 else [])
    job = {"displayName": name, "jobSpec": {"workerPoolSpecs": pools}}
    job_dir = _job_dir(task_args)
    if job_dir:
        job["jobSpec"]["baseOutputDirectory"] = {"outputUriPrefix": job_dir}
    return job


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, task_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv \
        else (argv, [])
    p = argparse.ArgumentParser(prog="python -m tools.render", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", default="tfdataflow-train")
    p.add_argument("--image", required=True, help="Container image with this package installed.")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--ps", type=int, default=0)
    p.add_argument("--gpus", type=int, default=0, help="GPUs per worker/chief.")
    p.add_argument("--machine_type", default="n1-standard-8", help="Vertex machine type.")
    p.add_argument("--accelerator_type", default="NVIDIA_TESLA_T4")
    p.add_argument("--output_dir", default=".", help="Where tfjob.yaml and customjob.json go.")
    a = p.parse_args(own)
    if a.workers < 1 or a.ps < 0 or a.gpus < 0:
        p.error("--workers must be >= 1, --ps and --gpus >= 0")
    if not task_args:
        p.error("give the training task's arguments after --")
    os.makedirs(a.output_dir, exist_ok=True)
    tfjob = render_tfjob(a.name, a.image, a.workers, a.ps, task_args, a.gpus)
    custom = render_customjob(a.name, a.image, a.workers, a.ps, task_args, a.machine_type,
                              a.gpus, a.accelerator_type)
    with open(os.path.join(a.output_dir, "tfjob.yaml"), "w") as f:
        yaml.safe_dump(tfjob, f, sort_keys=False)
    with open(os.path.join(a.output_dir, "customjob.json"), "w") as f:
        json.dump(custom, f, indent=2)
    print(f"wrote {a.output_dir}/tfjob.yaml (kubectl apply -f it) and {a.output_dir}/customjob.json "
          f"(the CustomJob body for POST https://REGION-aiplatform.googleapis.com/v1/projects/P/"
          f"locations/REGION/customJobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
