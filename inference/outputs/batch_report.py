"""batch_predict's `report.html` (preprocessing/reports/page.py), from the run's summary:
counts and rejects by reason, the metrics and the metrics by slice, the skew of each feature
against train as bars flagged by threshold, the gate's and the shadow's verdicts."""
from __future__ import annotations

from preprocessing.reports.page import Page, bar_chart

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
    by_slice = metrics.get("slices") or {}
    figure = "rmse" if "rmse" in metrics else "accuracy"
    for column, slices in by_slice.items():
        page.heading(f"Metrics by slice: {column}")
        rows = [(k, m.get("examples"), m.get(figure), "small" if m.get("small") else "")
                for k, m in slices.items()]
        page.table(rows, ["slice", "rows", figure, ""])
        shown = [r for r in rows if r[2] is not None][:MAX_BARS]
        if shown:
            page.figure(bar_chart([r[0] for r in shown], [r[2] for r in shown],
                                  f"{figure} by {column} (overall {metrics.get(figure):.4g})",
                                  flagged=[False] * len(shown)), f"{figure} by {column}")


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
