"""Hyperparameter tuning: parallel trials of the unchanged trainer, resumable, the best one
gated and exported.

    python -m training.tune --spec tune.yaml --data_dir out/prep --job_dir out/job \\
        [training.task flags every trial gets]

Each trial is `python -m training.task` in its own process and folder
(JOB_DIR/tuning/trials/NNNN), reporting its eval-split metric with the cloudml-hypertune
convention. Optuna proposes the parameters and keeps the study in a file journal
(JOB_DIR/tuning/study.journal): run the same command again after any stop and it continues
(a trial that was running resumes from its own backup; none runs twice; raising max_trials
adds only the difference). JOB_DIR/tuning/trials.jsonl has a line per trial, trials.png a
plot, report.html the trials, parameters against the metric and the gate's verdict,
best.json the best trial with its test-split figure; its export becomes the newest
version under JOB_DIR/export only if it predicts the golden set no worse than the version
there (the prediction jobs' gate rule).

    python -m training.tune --spec tune.yaml --data_dir gs://B/prep --job_dir gs://B/job \\
        --vertex_spec hp_job.json --trainer_image IMAGE

writes the same study as a Vertex AI HyperparameterTuningJob instead of running it.
"""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import logging
import os
import sys
from typing import List, Optional

from preprocessing import flags, quiet
from preprocessing.flags import at_least, flag
from preprocessing.reference.golden_score import DEFAULT_MAX_METRIC_REGRESSION
from preprocessing.reference.slices import parse_slice_by
from training.tuning.spec import SpecError, TuneSpec, load_spec, trainer_parser

log = logging.getLogger("training.tune")
MAX_DISPLAY_NAME = 128     # Vertex AI's limit on a job's display name
TRIAL_MEMORY = 2 << 30     # what one local trial (a TensorFlow trainer process) may take


@dataclasses.dataclass(frozen=True)
class TuneConfig:
    """training.tune's own flags, each declared once (preprocessing/flags.py), in --help's
    order; every other flag is the trainer's (`trainer_args`)."""
    spec: str = flag(help="The study: YAML or JSON (training/tuning/spec.py).", required=True)
    data_dir: str = flag(help="The preprocess job's output directory.", required=True)
    job_dir: str = flag(help="Local: the study, each trial's folder, best.json and the "
                             "published export (JOB_DIR/export).", required=True)
    vertex_spec: Optional[str] = flag(help="Write the study as a Vertex AI "
                                           "HyperparameterTuningJob (JSON) to this file and "
                                           "exit, running nothing.")
    trainer_image: str = flag("us-docker.pkg.dev/PROJECT/tfdataflow/trainer:latest",
                              "--vertex_spec: the trainer container "
                              "(templates/training/Dockerfile).")
    machine_type: str = flag("n1-standard-4", "--vertex_spec: per trial.")
    display_name: str = flag("tfdataflow-tune", "--vertex_spec: the job's name.")
    max_metric_regression: float = flag(
        DEFAULT_MAX_METRIC_REGRESSION, "The gate's tolerance for the best trial replacing "
        "JOB_DIR/export's newest version: RMSE relative (0.05 = 5%% higher), accuracy absolute "
        "(0.05 = 5 points).", check=at_least(0))
    max_slice_regression: Optional[float] = flag(
        help="The gate also refuses the best trial when a slice of the trainer's --slice_by "
             "columns with at least 30 golden rows is worse than the serving version's by more "
             "than this (as --max_metric_regression). Default: off.", type=float,
        check=at_least(0))
    verbosity: str = quiet.verbosity_flag()
    trial_timeout: Optional[float] = flag(help="Seconds a trial may run before it is stopped "
                                               "and counted as failed (default: no limit).",
                                          type=float, check=(lambda v: v > 0, "> 0 seconds"))
    seed: int = flag(42, "The search's seed.")
    max_parallel_trials: Optional[int] = flag(
        help="Local studies: run up to this many trials at once even when the spec's "
             "parallel_trials is over what this machine holds (default: its cores, and 2 GiB "
             "of available memory a trial).", type=int, check=at_least(1))
    trainer_args: tuple = ()  # the trainer's flags, passed to every trial

    def __post_init__(self):
        if not self.vertex_spec and "://" in self.job_dir:
            raise SpecError("--job_dir: the tuner runs its trials here and needs a local folder "
                            "(for a study on Vertex AI, write it with --vertex_spec)")
        if self.vertex_spec:
            for flag, path in (("--data_dir", self.data_dir), ("--job_dir", self.job_dir)):
                if not path.startswith("gs://") or len(path.rstrip("/")) <= len("gs://"):
                    raise SpecError(f"{flag} {path}: a Vertex AI study reads and writes Cloud "
                                    "Storage; give a gs://BUCKET/... path")
            if not 1 <= len(self.display_name) <= MAX_DISPLAY_NAME or \
                    any(ord(c) < 32 or ord(c) == 127 for c in self.display_name):
                raise SpecError(f"--display_name: Vertex AI takes 1 to {MAX_DISPLAY_NAME} "
                                "characters without control characters, got "
                                f"{len(self.display_name)}")
        said = flags.problem(self)
        if said:
            raise SpecError(said)
        if self.max_slice_regression is not None and not self.trainer_slice_by:
            raise SpecError("--max_slice_regression needs the trainer's --slice_by: the "
                            "columns to slice the golden set by")

    @property
    def trainer_slice_by(self) -> tuple:
        """The trainer's --slice_by columns among the trials' flags (the gate slices by them)."""
        known, _ = trainer_parser().parse_known_args(
            ["--data_dir", "d", "--job_dir", "j"] + [str(a) for a in self.trainer_args])
        return parse_slice_by(known.slice_by or ())

    @property
    def tuning_dir(self) -> str:
        return os.path.join(self.job_dir, "tuning")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.tune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add_arguments(p, TuneConfig)
    return p


def config_from_args(argv=None) -> TuneConfig:
    p = parser()
    args, rest = p.parse_known_args(argv)
    try:
        return flags.from_mapping(TuneConfig, vars(args), trainer_args=tuple(rest))
    except SpecError as e:
        p.error(str(e))


def task_of(data_dir: str, trainer_args: List[str]) -> str:
    from training.data import load_feature_info
    label_key = None
    if "--label_key" in trainer_args:
        label_key = trainer_args[trainer_args.index("--label_key") + 1]
    return load_feature_info(data_dir, label_key).task


def launch(cfg: TuneConfig) -> TuneSpec:
    """The I/O checks: the spec file, and the metric against the data's task (a Vertex job
    whose spec names its metric reads no data here: its data_dir is the cloud's)."""
    spec = load_spec(cfg.spec, list(cfg.trainer_args))
    if spec.metric and cfg.vertex_spec:
        return spec
    if not cfg.vertex_spec:
        spec = cap_parallel_trials(spec, cfg.max_parallel_trials)
    try:
        task = task_of(cfg.data_dir, list(cfg.trainer_args))
    except Exception as e:  # a missing folder, or a storage error from TensorFlow's gfile
        raise SpecError(f"--data_dir {cfg.data_dir}: {str(e).splitlines()[0][:300]}"
                        + (" (or name the metric in the spec)" if cfg.vertex_spec else "")) \
            from None
    return spec.with_metric(task)


def machine_room() -> tuple:
    """(cores, bytes of available memory) of this machine."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return cores, available


def cap_parallel_trials(spec: TuneSpec, allowed: Optional[int]) -> TuneSpec:
    """parallel_trials within what this machine holds: its cores, and TRIAL_MEMORY of
    available memory a trial (64 trials on 2 cores passed 3 GB in 20 s), unless
    --max_parallel_trials allows more; said in a warning."""
    cores, available = machine_room()
    room = max(1, min(cores, available // TRIAL_MEMORY if available else cores))
    cap = allowed if allowed is not None else room
    if spec.parallel_trials <= cap:
        return spec
    log.warning("training.tune: parallel_trials %d is more than %s; running %d at once "
                "(--max_parallel_trials N to change it)", spec.parallel_trials,
                f"--max_parallel_trials {allowed}" if allowed is not None else
                f"this machine holds ({cores} cores, {(available or 0) / 2**30:.1f} GiB "
                f"available, {TRIAL_MEMORY >> 30} GiB a trial)", cap)
    return dataclasses.replace(spec, parallel_trials=cap)


def write_vertex_spec(cfg: TuneConfig, spec: TuneSpec) -> str:
    from google.cloud import aiplatform_v1

    from training.tuning.vertex import tuning_job
    job = tuning_job(spec, cfg.display_name, cfg.trainer_image, cfg.machine_type, cfg.data_dir,
                     cfg.job_dir, list(cfg.trainer_args))
    text = json.dumps(job, indent=2)
    aiplatform_v1.HyperparameterTuningJob.from_json(text)  # what Vertex's client accepts
    with open(cfg.vertex_spec, "w") as f:
        f.write(text + "\n")
    return cfg.vertex_spec


def hold_lock(tuning_dir: str):
    """One tuner per study: a second one on the same JOB_DIR is refused (the lock goes with
    its holder, kill -9 included)."""
    f = open(os.path.join(tuning_dir, "tuner.lock"), "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        raise SpecError(f"another tuner is running this study ({tuning_dir}; pid "
                        f"{f.read().strip() or '?'})") from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def main(argv=None) -> int:
    cfg = config_from_args(argv)
    try:
        spec = launch(cfg)
        if cfg.vertex_spec:
            print(f"training.tune: wrote {write_vertex_spec(cfg, spec)} (a Vertex AI "
                  f"HyperparameterTuningJob: {spec.max_trials} trials, {spec.parallel_trials} "
                  f"parallel, {spec.metric} {spec.goal})")
            return 0
        os.makedirs(cfg.tuning_dir, exist_ok=True)
        lock = hold_lock(cfg.tuning_dir)
    except SpecError as e:
        print(f"training.tune: error: {e}", file=sys.stderr)
        return 2
    from training.tuning.study import Study
    try:
        study = Study(cfg, spec)
        outcome = study.run()
    except SpecError as e:
        print(f"training.tune: error: {e}", file=sys.stderr)
        return 2
    finally:
        lock.close()
    if outcome.stopped:
        print(f"training.tune: stopped: {outcome.stopped} (the trials: "
              f"{os.path.join(cfg.tuning_dir, 'report.html')})", file=sys.stderr)
        return 1
    best = outcome.best
    gate = best["gate"]
    test = best["metric"]["test"]
    print(f"training.tune: best trial {best['trial']} {best['parameters']}: {spec.metric} "
          f"{best['metric']['eval']:.6g} on the eval split"
          + (f", {test:.6g} on the test split" if test is not None else
             " (no test split to check it on)"))
    if best["published"]:
        print(f"training.tune: published {best['published']} (gate: {gate['reason']})")
    else:
        print(f"training.tune: the gate refused it ({gate['reason']}: golden-set "
              f"{gate.get('metric')} {gate.get('candidate_metric')} against the current "
              f"{gate.get('current_metric')}); {os.path.join(cfg.job_dir, 'export')} is "
              "unchanged")
    print(f"training.tune: report {os.path.join(cfg.tuning_dir, 'report.html')}")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sys.exit(main())  # quiet: training/__init__.py

