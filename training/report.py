"""What a training run reports: metrics.json and its learning curves for people, and its
metric for tuning.

The metric follows the cloudml-hypertune convention, which Vertex AI tuning jobs and
`python -m training.tune` read: JSON lines in $CLOUD_ML_HP_METRIC_FILE (default
/tmp/hypertune/output.metrics), the newest last. Per epoch: the validation slice's figure
(early stopping of trials compares these; training.callbacks.EpochReporter); last: the eval
split's figure (the trial's result).
"""
from __future__ import annotations

import logging
import os
from typing import Optional

import tensorflow as tf

from preprocessing.files import filesys

log = logging.getLogger("training")


def write_report(job_dir: str, metrics: dict) -> None:
    """metrics.json (strict JSON) and the learning curves beside it."""
    tf.io.gfile.makedirs(job_dir)
    with tf.io.gfile.GFile(os.path.join(job_dir, "metrics.json"), "w") as f:
        f.write(filesys.dumps_json(metrics, sort_keys=False))
    if metrics.get("history"):
        plot_curves(metrics["history"], os.path.join(job_dir, "curves.png"))


def plot_curves(history: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in history if not k.startswith("val_")]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.5), squeeze=False)
    for ax, k in zip(axes[0], keys):
        epochs = range(1, len(history[k]) + 1)
        ax.plot(epochs, history[k], marker="o", label="train")
        if f"val_{k}" in history:
            ax.plot(range(1, len(history[f"val_{k}"]) + 1), history[f"val_{k}"], marker="o",
                    label="eval")
        ax.set_title(k)
        ax.set_xlabel("epoch")
        ax.legend()
    fig.tight_layout()
    with tf.io.gfile.GFile(path, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    plt.close(fig)


_reporter = None  # one per process: HyperTune rewrites its file from its own queue


def default_metric(task: str) -> str:
    return "rmse" if task == "regression" else "accuracy"


def metric_to_report(flag: Optional[str], task: str) -> Optional[str]:
    """The tag this run reports, or None: a run reports when it is a tuning trial (the flag,
    or the variables Vertex AI and training.tune set), not on every training run."""
    if flag or os.environ.get("CLOUD_ML_HP_METRIC_FILE") or os.environ.get("CLOUD_ML_TRIAL_ID"):
        return flag or default_metric(task)
    return None


def report_metric(tag: str, value: float, step: int) -> None:
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
