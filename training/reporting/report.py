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
from preprocessing.reports.page import Page, bar_chart, slice_sections

REPORT = "report.html"
MAX_BARS = 40  # columns drawn; the table lists them all

log = logging.getLogger("training")


def write_report(job_dir: str, metrics: dict) -> None:
    """metrics.json (strict JSON), the learning curves beside it, and report.html."""
    tf.io.gfile.makedirs(job_dir)
    with tf.io.gfile.GFile(os.path.join(job_dir, "metrics.json"), "w") as f:
        f.write(filesys.dumps_json(metrics, sort_keys=False))
    if metrics.get("history"):
        plot_curves(metrics["history"], os.path.join(job_dir, "curves.png"))
    try:
        page = training_page(metrics)
    except Exception as e:  # noqa: BLE001 (the model and metrics.json are the run's promise)
        log.warning("no report.html (%s: %s)", type(e).__name__, e)
        return
    with tf.io.gfile.GFile(os.path.join(job_dir, REPORT), "w") as f:
        f.write(page)


def training_page(metrics: dict) -> str:
    """report.html: the eval metrics, the family choice with each candidate's validation
    and eval figures (and the rule's standard error in `chosen_by`), the defaults chosen and
    why, and the learning curves."""
    model = metrics.get("model") or {}
    page = Page(f"training: {model.get('family', '')} for {metrics.get('label')}")
    page.text(f"export {metrics.get('export_dir')}", "note")
    page.heading("Eval split")
    page.table([(k, v) for k, v in (metrics.get("eval") or {}).items()
                if not isinstance(v, (dict, list))], ["metric", "value"])
    if metrics.get("test"):
        page.heading("Test split")
        page.table([(k, v) for k, v in metrics["test"].items()
                    if not isinstance(v, (dict, list))], ["metric", "value"])
    candidates = model.get("candidates") or {}
    if candidates:
        figure = default_metric(metrics.get("task", "regression"))
        page.heading("The model family: candidates on held-out rows")
        page.text(f"kept: {model.get('family')} ({model.get('chosen_by')})")
        page.table([(name, (c.get("validation") or {}).get(figure),
                     (c.get("eval") or {}).get(figure), c.get("train_seconds"))
                    for name, c in candidates.items()],
                   ["candidate", f"validation {figure}", f"eval {figure}", "train seconds"],
                   css=["ok" if name == model.get("family") else None for name in candidates])
    defaults = metrics.get("defaults") or {}
    if defaults:
        page.heading("Settings chosen by default, and why")
        page.table([(k, str(d.get("value")), d.get("why")) for k, d in defaults.items()
                    if isinstance(d, dict)], ["setting", "value", "why"])
    sliced = metrics.get("eval_slices") or {}
    if sliced:
        figure = default_metric(metrics.get("task", "regression"))
        page.heading("Eval metrics by slice")
        page.text(sliced.get("note") or f"on {sliced.get('measured_on')} ({sliced.get('rows')} "
                  "rows)", "note")
        slice_sections(page, sliced.get("slices") or {}, figure,
                       (metrics.get("eval") or {}).get(figure))
    if metrics.get("importance"):
        _importance(page, metrics["importance"])
    model = metrics.get("model") or {}
    forest = ((model.get("candidates") or {}).get("boosted_trees") or {}).get("ydf_importance")
    if forest and model.get("family") in ("boosted_trees", "blend"):
        _forest_importance(page, forest)
    if metrics.get("history"):
        page.heading("Learning curves")
        page.figure(curves_figure(metrics["history"]), "learning curves")
    return page.html()


def _importance(page: Page, imp: dict) -> None:
    _ranked(page, "Feature importance (permutation, on the eval split)",
            f"the rise in mean {imp.get('loss')} over {imp.get('rows')} eval rows when a "
            f"column is shuffled (from {imp.get('base_loss'):.4g}); near or below 0: not used "
            "on these rows", imp.get("features") or {}, ("column", "loss rise"),
            "loss rise when shuffled")


def _forest_importance(page: Page, imp: dict) -> None:
    _ranked(page, "The trees' own importance (YDF)",
            f"{imp.get('kind')}: each model input's share of the loss reduction of the "
            "exported trees' splits", imp.get("features") or {}, ("model input", "share"),
            "share of the split gain")


def _ranked(page: Page, heading: str, note: str, features: dict, header, title: str) -> None:
    """A ranked {name: figure} as a table and bars (the first MAX_BARS)."""
    page.heading(heading)
    page.text(note, "note")
    page.table(list(features.items()), list(header))
    shown = list(features)[:MAX_BARS]
    if shown:
        page.figure(bar_chart(shown, [features[n] for n in shown], title,
                              flagged=[False] * len(shown)), heading)


def plot_curves(history: dict, path: str) -> None:
    import matplotlib.pyplot as plt

    fig = curves_figure(history)
    with tf.io.gfile.GFile(path, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    plt.close(fig)


def curves_figure(history: dict):
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
    return fig


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
