"""The same spec as a Vertex AI HyperparameterTuningJob: the study spec (parameters, scales,
metric and goal, algorithm, median early stopping), the trial counts, and the trainer image
running the unchanged `training.task` as each trial's worker pool. Vertex passes a trial's
parameters as `--name=value` arguments after these, sets CLOUD_ML_TRIAL_ID (each trial then
writes under JOB_DIR/trial_<id>) and reads the metric the trainer reports
(training/reporting/report.py)."""
from __future__ import annotations

from training.tuning.spec import TuneSpec

ALGORITHM = {"bayesian": "ALGORITHM_UNSPECIFIED",  # Vertex's default: Bayesian optimisation
             "random": "RANDOM_SEARCH", "grid": "GRID_SEARCH"}
SCALE = {"linear": "UNIT_LINEAR_SCALE", "log": "UNIT_LOG_SCALE"}


def parameter_spec(p) -> dict:
    out = {"parameterId": p.name}
    if p.type == "double":
        out["doubleValueSpec"] = {"minValue": p.min, "maxValue": p.max}
    elif p.type == "integer":
        out["integerValueSpec"] = {"minValue": str(int(p.min)), "maxValue": str(int(p.max))}
    elif p.type == "discrete":
        out["discreteValueSpec"] = {"values": list(p.values)}
    else:
        out["categoricalValueSpec"] = {"values": list(p.values)}
    if p.type != "categorical":
        out["scaleType"] = SCALE[p.scale]
    return out


def tuning_job(spec: TuneSpec, name: str, image: str, machine_type: str, data_dir: str,
               job_dir: str, fixed: list) -> dict:
    """The job as the JSON `aiplatform_v1.HyperparameterTuningJob.from_json` takes (and
    `gcloud ai hp-tuning-jobs create --config` after its `studySpec`/`trialJobSpec`)."""
    study = {"metrics": [{"metricId": spec.metric, "goal": spec.goal.upper()}],
             "parameters": [parameter_spec(p) for p in spec.parameters],
             "algorithm": ALGORITHM[spec.algorithm]}
    if spec.early_stopping == "median":
        study["medianAutomatedStoppingSpec"] = {"useElapsedDuration": False}
    args = ["--data_dir", data_dir, "--job_dir", job_dir, "--hypertune_metric", spec.metric,
            *[str(a) for a in fixed]]
    return {
        "displayName": name,
        "studySpec": study,
        "maxTrialCount": spec.max_trials,
        "parallelTrialCount": spec.parallel_trials,
        "maxFailedTrialCount": spec.failure_limit,
        "trialJobSpec": {
            "workerPoolSpecs": [{
                "machineSpec": {"machineType": machine_type},
                "replicaCount": "1",
                "containerSpec": {"imageUri": image,
                                  "command": ["python", "-m", "training.task"],
                                  "args": args},
            }],
            "baseOutputDirectory": {"outputUriPrefix": job_dir},
        },
    }
