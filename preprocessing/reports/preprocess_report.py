"""preprocess's `report.html` (page.py), from the run's summary and what it staged: each
column's inferred type and why, missing rates, distributions of the train split (from
statistics.json: a number's deciles as a histogram of variable-width bins, a string's most
frequent values), rejects by reason with a few example lines, and the split sizes."""
from __future__ import annotations

import json
from typing import Dict, List

from apache_beam.io.filesystems import FileSystems

from preprocessing.reference.statistics import STATISTICS_FILE, read_statistics
from preprocessing.reports.page import Page

EXAMPLES = 3            # rejected lines shown per reason
EXAMPLE_BYTES = 1 << 20  # read at most this much of the dead letters for them
RAW_CHARS = 160         # of each example line
MAX_PLOTS = 24          # columns drawn; the table lists them all
TOP = 8                 # a string column's values drawn


def preprocess_report(summary: dict, staging: str) -> str:
    page = Page(f"preprocess: {summary.get('input')}")
    page.text(f"output {summary.get('output')}; task {summary.get('task')}, label "
              f"{summary.get('label')}", "note")
    page.heading("Rows")
    splits = summary.get("splits") or {}
    rejected = summary.get("rejected") or {}
    page.table([("rows read", summary.get("rows_read"))] +
               [(f"{name} split", n) for name, n in splits.items()] +
               [("rejected", rejected.get("total")),
                ("reconciled", "yes" if summary.get("reconciled") else "NO")], ["", "rows"])
    reasons = rejected.get("by_reason") or {}
    if reasons:
        page.heading("Rejects by reason")
        examples = _examples(staging, reasons)
        page.table([(r, n, " | ".join(examples.get(r, []))) for r, n in
                    sorted(reasons.items(), key=lambda kv: -kv[1])],
                   ["reason", "rows", f"first lines (at most {EXAMPLES})"])
    if summary.get("inferred_columns"):
        page.heading("Columns: what was inferred, and why")
        page.table([(c.get("column"), c.get("role"), c.get("type"), c.get("transform"),
                     c.get("missing_rate"), c.get("distinct"), c.get("why"))
                    for c in summary["inferred_columns"]],
                   ["column", "role", "type", "transform", "missing", "distinct", "why"])
    stats = _statistics(staging)
    if stats:
        page.heading(f"The train split's columns ({stats.get('rows', 0):,} rows)")
        features = stats.get("features") or {}
        page.table([(n, f.get("type"), f.get("missing_rate"), f.get("mean"), f.get("min"),
                     f.get("max"), f.get("distinct")) for n, f in sorted(features.items())],
                   ["column", "type", "missing", "mean", "min", "max", "distinct"])
        drawn = sorted(features)[:MAX_PLOTS]
        if drawn:
            page.figure(_distributions({n: features[n] for n in drawn}),
                        "distributions of the train split")
    return page.html()


def _examples(staging: str, reasons) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    budget = EXAMPLE_BYTES
    for m in FileSystems.match([FileSystems.join(staging, "rejects", "*.jsonl")])[0].metadata_list:
        with FileSystems.open(m.path, compression_type="uncompressed") as f:
            for line in f.read(budget).splitlines():
                budget -= len(line) + 1
                try:
                    letter = json.loads(line)
                except ValueError:
                    continue  # a line cut by the budget
                shown = out.setdefault(letter.get("reason"), [])
                if len(shown) < EXAMPLES:
                    shown.append(f"line {letter.get('line')}: {str(letter.get('raw'))[:RAW_CHARS]}")
        if budget <= 0 or all(len(out.get(r, [])) >= EXAMPLES for r in reasons):
            break
    return out


def _statistics(staging: str):
    return read_statistics(FileSystems.join(staging, STATISTICS_FILE))


def _distributions(features: dict):
    """Small multiples: a number's deciles as variable-width bins (each holds a tenth of the
    rows, so its height is 0.1 / width), a string's TOP most frequent values."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cols = 3
    rows = (len(features) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(7.2, 1.9 * rows), squeeze=False)
    for ax, (name, f) in zip(axes.flat, features.items()):
        qs = f.get("quantiles") or []
        if f.get("type") == "number" and len(qs) > 1:
            shares = f.get("histogram") or [1 / (len(qs) - 1)] * (len(qs) - 1)
            for lo, hi, share in zip(qs, qs[1:], shares):
                width = hi - lo
                ax.bar(lo, share / width if width > 0 else 0, width=width or 1e-9,
                       align="edge", color="#4472c4", edgecolor="white", linewidth=0.3)
        else:
            top = (f.get("top_values") or [])[:TOP]
            ax.barh([str(v)[:14] for v, _ in top][::-1], [s for _, s in top][::-1],
                    color="#4472c4")
        ax.set_title(name[:28], fontsize=8)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(features):]:
        ax.axis("off")
    fig.tight_layout()
    return fig
