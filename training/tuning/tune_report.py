"""training.tune's `report.html` in JOB_DIR/tuning, rewritten as trials end: the trials over
time, each parameter against the metric, every trial's row, and, once the study is done, the
best trial with the gate's verdict on publishing it (best.json's figures)."""
from __future__ import annotations

import logging
import os
from typing import Optional

from preprocessing.reports.page import Page
from training.tuning.results import trials_figure, write_atomic

REPORT = "report.html"
MAX_ROWS = 200  # trials listed, newest first; every trial is in trials.jsonl

log = logging.getLogger("training.tune")


def write_report(tuning_dir: str, records: list, spec, best: Optional[dict] = None) -> None:
    """report.html beside trials.jsonl; a report that cannot be drawn is a warning."""
    try:
        text = tune_page(records, spec, best)
    except Exception as e:  # noqa: BLE001 (trials.jsonl and best.json are the promise)
        log.warning("training.tune: no report.html (%s: %s)", type(e).__name__, e)
        return
    write_atomic(os.path.join(tuning_dir, REPORT), text)


def tune_page(records: list, spec, best: Optional[dict] = None) -> str:
    states = {}
    for r in records:
        states[r["state"]] = states.get(r["state"], 0) + 1
    page = Page(f"training.tune: {spec.metric} ({spec.goal}) over {len(records)} of "
                f"{spec.max_trials} trials")
    page.text(", ".join(f"{n} {state}" for state, n in sorted(states.items())) +
              f"; {spec.algorithm} search, {spec.parallel_trials} at a time", "note")
    if best:
        _best(page, best)
    if any(r["state"] == "complete" for r in records):
        page.heading("Trials over time")
        page.figure(trials_figure(records, spec), "trials over time")
        figure = parameters_figure(records, spec)
        if figure is not None:
            page.heading("Each parameter against the metric")
            page.figure(figure, "parameters against the metric")
    page.heading("Trials")
    names = sorted({k for r in records for k in (r.get("parameters") or {})})
    shown = sorted(records, key=lambda r: -r["trial"])[:MAX_ROWS]
    page.table([(r["trial"], r["state"], r.get("metric"), r.get("seconds"),
                 *[_value((r.get("parameters") or {}).get(n)) for n in names],
                 r.get("reason") or "") for r in shown],
               ["trial", "state", spec.metric, "seconds", *names, "reason"],
               css=["ok" if best and r["trial"] == best.get("trial") else
                    "bad" if r["state"] == "failed" else None for r in shown])
    return page.html()


def _best(page: Page, best: dict) -> None:
    metric, gate = best.get("metric") or {}, best.get("gate") or {}
    page.heading(f"Best trial: {best.get('trial')}")
    page.table([(f"{metric.get('name')} (eval)", metric.get("eval")),
                (f"{metric.get('name')} (test)", metric.get("test")),
                ("family", best.get("family")),
                *[(k, _value(v)) for k, v in sorted((best.get("parameters") or {}).items())]],
               ["", "value"])
    accepted = gate.get("accepted")
    page.text(f"gate: {'accepted' if accepted else 'refused'} ({gate.get('reason')}); "
              + (f"published as {best['published']}" if best.get("published")
                 else "not published"), "ok" if accepted else "bad")
    page.table([(k, gate.get(k)) for k in ("metric", "candidate_metric", "current_metric",
                                           "max_metric_regression", "golden_rows", "current")
                if gate.get(k) is not None], ["gate", "value"])


def _value(v):
    return os.path.basename(v) if isinstance(v, str) and os.sep in v else v


def parameters_figure(records: list, spec):
    """One panel per parameter: its value in each complete trial against the metric (a
    categorical parameter's values as labels); None when no trial completed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    done = [r for r in records if r["state"] == "complete" and r.get("metric") is not None]
    names = sorted({k for r in done for k in (r.get("parameters") or {})})
    if not done or not names:
        return None
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        values = [r["parameters"].get(name) for r in done]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            ax.scatter(values, [r["metric"] for r in done], s=18)
        else:
            labels = sorted({str(_value(v)) for v in values})
            ax.scatter([labels.index(str(_value(v))) for v in values],
                       [r["metric"] for r in done], s=18)
            ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
        ax.set_title(name, fontsize=9)
        ax.set_ylabel(spec.metric, fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig
