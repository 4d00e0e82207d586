"""batch_predict's `report.html` (preprocessing/reports/page.py), from the run's summary:
counts and rejects by reason, the metrics and the metrics by slice, the skew of each feature
against train as bars flagged by threshold, the gate's and the shadow's verdicts."""
from __future__ import annotations

from preprocessing.reports.page import Page, bar_chart, slice_sections

MAX_BARS = 40  # features or slices drawn; the tables list them all


def batch_report(summary: dict, staging: str = "") -> str:
    """The page of a run's summary (`staging`, where the run wrote, is not read)."""
    page = Page(f"batch_predict: model version {summary.get('model_version')}")
    page.text(f"input {summary.get('input')} -> output {summary.get('output')}", "note")
    _counts(page, summary)
    if summary.get("metrics"):
        _metrics(page, summary["metrics"])
    if summary.get("skew"):
        _skew(page, summary["skew"])
    if summary.get("model_gate"):
        _verdict(page, "Model gate", summary["model_gate"])
    if summary.get("shadow"):
        page.heading("Shadow model")
        page.table(sorted((k, v) for k, v in summary["shadow"].items()
                          if not isinstance(v, (dict, list))), ["figure", "value"])
    return page.html()


def redrive_report(summary: dict, staging: str = "") -> str:
    """A redrive's page. It replaces the earlier run's page, whose counts it changes; the
    earlier run's metrics, skew and verdicts are kept as files, not recomputed, so the page
    names them rather than redraw figures that no longer match the published rows."""
    page = Page(f"redrive: model version {summary.get('model_version')}")
    page.text(f"dead letters {summary.get('rejects')} -> output {summary.get('output')}", "note")
    _counts(page, summary)
    ignored = summary.get("ignored") or {}
    if ignored:
        page.table(sorted(ignored.items()), ["letter not redriven", "letters"])
    earlier = summary.get("previous_run") or {}
    page.heading("The run redriven")
    page.table([(k, earlier.get(k)) for k in ("job", "run_date", "input", "model_version",
                                               "rows_read", "rows_predicted")]
               + [("rejected", (earlier.get("rejected") or {}).get("total"))], ["", "value"])
    page.text("metrics.json, skew.json and shadow.json in the output are that run's, kept "
              "as they were: they are not recomputed over the redriven rows.", "note")
    return page.html()


def _counts(page: Page, s: dict) -> None:
    page.heading("Rows")
    rejected = s.get("rejected") or {}
    page.table([("rows read", s.get("rows_read")), ("rows predicted", s.get("rows_predicted")),
                ("rejected", rejected.get("total")),
                ("reconciled", "yes" if s.get("reconciled") else "NO"),
                ("seconds", s.get("wall_seconds"))], ["", "count"])
    reasons = rejected.get("by_reason") or {}
    if reasons:
        page.table(sorted(reasons.items(), key=lambda kv: -kv[1]), ["reject reason", "rows"])
        page.figure(bar_chart(list(reasons), list(reasons.values()), "rejects by reason"),
                    "rejects by reason")


def _metrics(page: Page, metrics: dict) -> None:
    page.heading("Metrics")
    page.table([(k, v) for k, v in metrics.items() if not isinstance(v, (dict, list))],
               ["metric", "value"])
    if metrics.get("residual_sample"):
        sample = metrics["residual_sample"]
        page.heading("Residuals")
        page.text(f"a uniform sample of {len(sample['labels'])} labelled rows", "note")
        page.figure(residual_figure(sample["labels"], sample["predictions"]), "residuals")
    if metrics.get("confusion_matrix"):
        matrix = metrics["confusion_matrix"]
        page.heading("Confusion matrix (rows: label, columns: predicted)")
        page.table([(c, *row) for c, row in zip(matrix["classes"], matrix["counts"])],
                   ["label \\ predicted", *matrix["classes"]])
        page.figure(confusion_figure(matrix["classes"], matrix["counts"]), "confusion matrix")
    figure = "rmse" if "rmse" in metrics else "accuracy"
    slice_sections(page, metrics.get("slices") or {}, figure, metrics.get(figure))


def residual_figure(labels, predictions):
    """Residual (label - prediction) against the prediction, with the zero line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.scatter(predictions, [y - p for y, p in zip(labels, predictions)], s=6, alpha=0.5)
    ax.axhline(0.0, color="#b42318", linewidth=1)
    ax.set_xlabel("prediction", fontsize=8)
    ax.set_ylabel("label - prediction", fontsize=8)
    ax.tick_params(labelsize=7)
    return fig


def confusion_figure(classes, counts):
    """The counts as a heat map, each cell written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    side = 1.2 + 0.45 * len(classes)
    fig, ax = plt.subplots(figsize=(side + 1.0, side))
    image = ax.imshow(counts, cmap="Blues")
    ax.set_xticks(range(len(classes)), classes, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(classes)), classes, fontsize=7)
    ax.set_xlabel("predicted", fontsize=8)
    ax.set_ylabel("label", fontsize=8)
    top = max(max(row) for row in counts) or 1
    for i, row in enumerate(counts):
        for j, n in enumerate(row):
            ax.text(j, i, str(n), ha="center", va="center", fontsize=6,
                    color="white" if n > top / 2 else "black")
    fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def _skew(page: Page, skew: dict) -> None:
    page.heading("Skew and drift against the train split")
    features = skew.get("features") or {}
    limit = (skew.get("thresholds") or {}).get("distance")
    names = sorted(features, key=lambda n: -(features[n].get("distance") or 0))
    page.table([(n, features[n].get("distance"), features[n].get("distance_kind"),
                 ", ".join(features[n].get("flags") or []) or "-") for n in names],
               ["feature", "distance", "kind", "flags"],
               css=["bad" if features[n].get("flags") else None for n in names])
    shown = names[:MAX_BARS]
    if shown:
        page.figure(bar_chart(shown, [features[n].get("distance") or 0.0 for n in shown],
                              f"distance to train (threshold {limit})", threshold=limit,
                              flagged=[bool(features[n].get("flags")) for n in shown]),
                    "skew by feature")


def _verdict(page: Page, title: str, record: dict) -> None:
    page.heading(title)
    accepted = record.get("event") == "version_accepted"
    page.text(f"{record.get('event')}: {record.get('reason')}", "ok" if accepted else "bad")
    page.table([(k, v) for k, v in record.items()
                if not isinstance(v, (dict, list)) and k != "event"], ["", "value"])
    if record.get("slices_regressed"):
        page.table([(r["slice"], r["examples"], r["candidate"], r["current"])
                    for r in record["slices_regressed"]],
                   ["slice", "golden rows", "candidate", "serving"])
