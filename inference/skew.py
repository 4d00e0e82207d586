"""Train/serve skew and drift: the statistics of what a prediction job serves, compared per
feature with the train split's (preprocessing/reference/statistics.py; preprocess writes them, training
puts them in each export as assets.extra/train_statistics.json).

Distances, as TFDV defines them: Jensen-Shannon divergence (base 2, 0..1) between the shares
of values in the train split's decile buckets (numbers), L-infinity distance between value
frequencies (strings). Also: the share of served values never seen in training (strings;
"not among the train split's top values" when it had more than statistics.TOP_VALUES), and
the change in missing rate. A feature is flagged when a distance passes `threshold`, or the
unseen share or the missing-rate change passes UNSEEN_SHARE / MISSING_CHANGE, once at least
`min_rows` rows were served (fewer: reported, not flagged).
"""
from __future__ import annotations

import logging
import math
from typing import Optional, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from preprocessing.reference.statistics import (  # noqa: F401 (load_train_statistics: read from here too)
    TableAcc,
    bucket_shares,
    load_train_statistics,
    merge_all,
)

DEFAULT_THRESHOLD = 0.1
UNSEEN_SHARE = 0.05
MISSING_CHANGE = 0.05
MIN_ROWS = 100


def train_label_range(train_stats: Optional[dict],
                      label: str) -> Optional[Tuple[float, float]]:
    """(min, max) of `label` in an export's train statistics (load_train_statistics), or
    None (not a number there, or no statistics kept): what a model bounded by its training
    labels can predict."""
    stats = ((train_stats or {}).get("features") or {}).get(label) or {}
    if stats.get("min") is None or stats.get("max") is None:
        return None
    return float(stats["min"]), float(stats["max"])


def feature_statistics(train_stats: dict, schema, passthrough=()) -> dict:
    """`train_stats` with only the columns the model reads (not the label, the key, a
    left-out identifier or a passthrough column)."""
    features = {c.name for c in schema.serving_columns()} - set(passthrough)
    return dict(train_stats, features={n: f for n, f in train_stats.get("features", {}).items()
                                       if n in features})


def js_divergence(p, q) -> float:
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    m = (p + q) / 2

    def kl(a):
        nz = a > 0
        return float(np.sum(a[nz] * np.log2(a[nz] / m[nz])))
    return max(0.0, 0.5 * kl(p) + 0.5 * kl(q))


def feature_skew(train: dict, col, rows: int) -> dict:
    """One feature's comparison: `train` its train statistics, `col` the served ColumnAcc
    (None: the served rows never had the column)."""
    served_missing = 1.0 if col is None or col.n == 0 else col.missing / col.n
    out = {"missing_rate": served_missing,
           "missing_rate_change": served_missing - (train.get("missing_rate") or 0.0)}
    present = 0 if col is None else col.present()
    if not present:
        out["distance"] = None
        return out
    if train["type"] == "number":
        if "quantiles" in train:
            out["distance_kind"] = "jensen_shannon"
            out["distance"] = js_divergence(train["histogram"],
                                            bucket_shares(col.values, train["quantiles"]))
        out["mean"] = col.s / present
        return out
    seen = {v: f for v, f in train.get("top_values", [])}
    served = {v: c / present for v, c in col.counts.items()}
    out["distance_kind"] = "l_infinity"
    out["distance"] = max([abs(f - served.get(v, 0.0)) for v, f in seen.items()] +
                          [f for v, f in served.items() if v not in seen] + [0.0])
    unseen = sum(c for v, c in col.counts.items() if v not in seen) + col.overflow
    out["unseen_share" if train.get("values_complete") else "share_outside_train_top"] = \
        unseen / present
    return out


def skew_report(train_stats: dict, acc: TableAcc, threshold: float = DEFAULT_THRESHOLD,
                min_rows: int = MIN_ROWS) -> dict:
    """Every feature's comparison, and the flagged ones, worst first."""
    features, severity = {}, {}
    for name, train in train_stats.get("features", {}).items():
        f = feature_skew(train, acc.columns.get(name), acc.rows)
        checks = {"distance": (f.get("distance"), threshold),
                  "unseen_values": (f.get("unseen_share"), UNSEEN_SHARE),
                  "missing_rate": (abs(f["missing_rate_change"]), MISSING_CHANGE)}
        f["flags"] = [k for k, (v, limit) in checks.items() if v is not None and v > limit]
        if f["flags"]:
            severity[name] = max(v / limit for v, limit in checks.values()
                                 if v is not None and v > limit)
        features[name] = f
    enough = acc.rows >= min_rows
    flagged = sorted(severity, key=lambda n: -severity[n]) if enough else []
    return {"event": "skew", "rows": acc.rows, "features": features, "flagged": flagged,
            "thresholds": {"distance": threshold, "unseen_share": UNSEEN_SHARE,
                           "missing_rate_change": MISSING_CHANGE, "min_rows": min_rows},
            **({} if enough else {"note": f"fewer than {min_rows} rows: nothing flagged"})}


def skew_line(report: dict, limit: int = 5) -> str:
    """The report as one log line naming the worst features."""
    if not report["flagged"]:
        return f"skew: no feature past its thresholds over {report['rows']:,} rows"
    parts = []
    for name in report["flagged"][:limit]:
        f = report["features"][name]
        bits = []
        if "distance" in f["flags"]:
            bits.append(f"{f['distance_kind']} {f['distance']:.3f}")
        if "unseen_values" in f["flags"]:
            bits.append(f"unseen {f['unseen_share']:.1%}")
        if "missing_rate" in f["flags"]:
            bits.append(f"missing {f['missing_rate']:.1%} ({f['missing_rate_change']:+.1%})")
        parts.append(f"{name} ({', '.join(bits)})")
    more = len(report["flagged"]) - limit
    return (f"skew: {len(report['flagged'])} of {len(report['features'])} features past their "
            f"thresholds over {report['rows']:,} rows: " + "; ".join(parts)
            + (f"; and {more} more" if more > 0 else ""))


def kinds_of(train_stats: dict) -> dict:
    return {n: f["type"] for n, f in train_stats.get("features", {}).items()}


class SkewReport(beam.CombineFn):
    """Partial TableAccs of served rows -> the skew report against the train statistics."""

    def __init__(self, train_stats: dict, threshold: float = DEFAULT_THRESHOLD,
                 min_rows: int = MIN_ROWS):
        self.train_stats, self.threshold, self.min_rows = train_stats, threshold, min_rows

    def create_accumulator(self):
        return TableAcc(kinds_of(self.train_stats))

    def add_input(self, acc, partial):
        return acc.merge(partial)

    def merge_accumulators(self, accs):
        return merge_all(accs)

    def extract_output(self, acc):
        report = skew_report(self.train_stats, acc, self.threshold, self.min_rows)
        (logging.warning if report["flagged"] else logging.info)("%s", skew_line(report))
        return report


def row_batch_partial(kinds: dict, rb) -> TableAcc:
    """Batch jobs: a RowBatch's columns as a partial TableAcc."""
    return TableAcc(kinds).add(len(rb), {n: rb.column(n) for n in rb.names if n in kinds})


class SkewOfBatches(beam.PTransform):
    """Batch jobs: RowBatches -> one skew report of the rows served against the train
    statistics (the features the model was trained on; not the label, key or passthrough)."""

    def __init__(self, train_stats: dict, threshold: float = DEFAULT_THRESHOLD):
        super().__init__()
        self.train_stats, self.threshold = train_stats, threshold

    def expand(self, batches):
        kinds = kinds_of(self.train_stats)
        return (batches | "Partials" >> beam.Map(lambda rb: row_batch_partial(kinds, rb))
                | "Report" >> beam.CombineGlobally(SkewReport(self.train_stats, self.threshold)))


class RowPartials(beam.DoFn):
    """Streaming: (MessageMeta, row dict) -> a partial TableAcc per event-time window of
    `window_secs`, per bundle (row by row would cost a numpy call per value)."""

    def __init__(self, kinds: dict, window_secs: float):
        self.kinds, self.window_secs = kinds, window_secs

    def start_bundle(self):
        self._groups = {}

    def process(self, keyed):
        meta, row = keyed
        key = math.floor(meta.event_time / self.window_secs)
        self._groups.setdefault(key, (meta.event_time, []))[1].append(row)

    def finish_bundle(self):
        groups, self._groups = self._groups, {}
        for ts, rows in groups.values():
            columns = {n: [r.get(n) for r in rows] for n in self.kinds
                       if any(n in r for r in rows)}
            yield WindowedValue(TableAcc(self.kinds).add(len(rows), columns), ts,
                                [GlobalWindow()])
