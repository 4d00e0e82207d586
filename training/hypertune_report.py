"""The trainer's metric in the cloudml-hypertune convention, which Vertex AI tuning jobs and
`python -m training.tune` read: JSON lines in $CLOUD_ML_HP_METRIC_FILE (default
/tmp/hypertune/output.metrics), the newest last. Per epoch: the validation slice's figure
(early stopping of trials compares these); last: the eval split's figure (the trial's result).
"""
from __future__ import annotations

import logging
import os
from typing import Optional

import tf_keras as keras

log = logging.getLogger("training")

_reporter = None  # one per process: HyperTune rewrites its file from its own queue


def default_metric(task: str) -> str:
    return "rmse" if task == "regression" else "accuracy"


def metric_to_report(flag: Optional[str], task: str) -> Optional[str]:
    """The tag this run reports, or None: a run reports when it is a tuning trial (the flag,
    or the variables Vertex AI and training.tune set), not on every training run."""
    if flag or os.environ.get("CLOUD_ML_HP_METRIC_FILE") or os.environ.get("CLOUD_ML_TRIAL_ID"):
        return flag or default_metric(task)
    return None


def report(tag: str, value: float, step: int) -> None:
    """Appends one measurement; an unwritable metric file is a warning, never a failed run."""
    global _reporter
    try:
        import hypertune
        if _reporter is None:
            _reporter = hypertune.HyperTune()
        _reporter.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag=tag, metric_value=float(value), global_step=step)
    except (OSError, ValueError) as e:
        log.warning("training: the hypertune metric was not reported: %s", e)


class EpochReporter(keras.callbacks.Callback):
    """Reports `val_<metric>` after each epoch (when the epoch validated)."""

    def __init__(self, metric: str):
        super().__init__()
        self.metric = metric

    def on_epoch_end(self, epoch, logs=None):
        value: Optional[float] = (logs or {}).get("val_" + self.metric)
        if value is not None:
            report(self.metric, value, epoch + 1)
