"""Feature statistics of raw rows, computed the same way over the train split (preprocess) and
over what the prediction jobs serve, so that the two can be compared (inference/skew.py).

Per column: count and missing rate (None or NaN; an empty string), and for numbers mean, std,
min, max, deciles and the share of values in each decile bucket (from a uniform bottom-k
sample of SAMPLE values, which merges exactly), for strings the most frequent values and
their frequencies (exact while a column has at most MAX_DISTINCT values). Accumulators are
plain picklable objects that merge, so a Beam CombineFn builds them on every worker.
"""
from __future__ import annotations

import json
import math
from typing import Dict, Optional

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from preprocessing.contract.schema import Schema

STATISTICS_FILE = "statistics.json"
EXPORT_STATISTICS = "assets.extra/train_statistics.json"
SAMPLE = 20_000        # numeric values kept per column for its quantiles
MAX_DISTINCT = 20_000  # string values counted per column; more are counted as overflow
TOP_VALUES = 1_000     # string values written to the statistics file
BUCKETS = 10           # decile buckets


class ColumnAcc:
    """One column's running statistics (see the module docstring)."""

    def __init__(self, kind: str):
        self.kind = kind  # "number" or "string"
        self.n = self.missing = 0
        self.s = self.ss = 0.0
        self.lo, self.hi = math.inf, -math.inf
        self.keys = np.empty(0)      # the bottom-k sample: random keys and their values
        self.values = np.empty(0)
        self.counts: Dict[str, int] = {}
        self.overflow = 0

    def add(self, values) -> None:
        if self.kind == "number":
            self._add_numbers(values)
        else:
            self._add_strings(values)

    def _add_numbers(self, values) -> None:
        if hasattr(values, "to_numpy"):  # an Arrow array (nulls become NaN)
            values = values.to_numpy(zero_copy_only=False)
        if isinstance(values, (list, tuple)):
            values = [np.nan if v is None else v for v in values]
        x = np.asarray(values, np.float64)
        ok = np.isfinite(x)
        self.n += len(x)
        self.missing += int(len(x) - ok.sum())
        x = x[ok]
        if not len(x):
            return
        self.s += float(x.sum())
        self.ss += float((x * x).sum())
        self.lo, self.hi = min(self.lo, float(x.min())), max(self.hi, float(x.max()))
        keys = np.random.default_rng().random(len(x))
        self._keep(np.concatenate([self.keys, keys]), np.concatenate([self.values, x]))

    def _add_strings(self, values) -> None:
        if hasattr(values, "value_counts"):  # Arrow: counted in C
            self.n += len(values)
            pairs = [(p["values"], p["counts"]) for p in values.value_counts().to_pylist()]
        else:
            values = list(values)
            self.n += len(values)
            uniq: Dict = {}
            for v in values:
                uniq[v] = uniq.get(v, 0) + 1
            pairs = list(uniq.items())
        for v, c in pairs:
            if v is None or v == "" or v == b"":
                self.missing += c
            else:
                self._count(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v), c)

    def _count(self, text: str, c: int) -> None:
        if text in self.counts or len(self.counts) < MAX_DISTINCT:
            self.counts[text] = self.counts.get(text, 0) + c
        else:
            self.overflow += c

    def _keep(self, keys: np.ndarray, values: np.ndarray) -> None:
        if len(keys) > SAMPLE:
            top = np.argpartition(keys, SAMPLE)[:SAMPLE]
            keys, values = keys[top], values[top]
        self.keys, self.values = keys, values

    def merge(self, other: "ColumnAcc") -> "ColumnAcc":
        out = ColumnAcc(self.kind)
        out.n, out.missing = self.n + other.n, self.missing + other.missing
        out.s, out.ss = self.s + other.s, self.ss + other.ss
        out.lo, out.hi = min(self.lo, other.lo), max(self.hi, other.hi)
        out._keep(np.concatenate([self.keys, other.keys]),
                  np.concatenate([self.values, other.values]))
        out.counts, out.overflow = dict(self.counts), self.overflow + other.overflow
        for v, c in other.counts.items():
            out._count(v, c)
        return out

    def present(self) -> int:
        return self.n - self.missing

    def summary(self) -> dict:
        """The column's statistics as JSON-able values."""
        out = {"type": self.kind, "count": self.n,
               "missing_rate": self.missing / self.n if self.n else None}
        k = self.present()
        if self.kind == "number":
            if k:
                mean = self.s / k
                qs = np.quantile(self.values, np.linspace(0, 1, BUCKETS + 1)).tolist()
                out.update(mean=mean, std=math.sqrt(max(self.ss / k - mean * mean, 0.0)),
                           min=self.lo, max=self.hi, quantiles=qs,
                           histogram=bucket_shares(self.values, qs).tolist())
            return out
        top = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_VALUES]
        out.update(distinct=len(self.counts), values_complete=(
            self.overflow == 0 and len(self.counts) <= TOP_VALUES),
            top_values=[[v, c / k] for v, c in top] if k else [])
        return out


def bucket_shares(values: np.ndarray, quantiles) -> np.ndarray:
    """The share of `values` in each of the buckets the inner quantiles bound:
    (-inf, q1], (q1, q2], ..., (q9, inf)."""
    inner = np.asarray(quantiles[1:-1], np.float64)
    counts = np.bincount(np.searchsorted(inner, values, side="left"),
                         minlength=len(inner) + 1).astype(np.float64)
    return counts / counts.sum() if counts.sum() else counts


def profiled_columns(schema: Schema) -> dict:
    """Column -> kind, for the columns statistics cover: all but the key, images and
    datetimes (served times are always new ones: their text says nothing about skew)."""
    return {c.name: ("string" if c.type == "string" else "number") for c in schema.columns
            if c.name != schema.key and c.transform not in ("image", "datetime")}


class TableAcc:
    """Statistics of many columns, by the user's column names."""

    def __init__(self, kinds: Dict[str, str]):
        self.rows = 0
        self.columns = {name: ColumnAcc(kind) for name, kind in kinds.items()}

    def add(self, rows: int, columns: Dict[str, object]) -> "TableAcc":
        """`columns`: name -> values (numpy, Arrow or a list) of `rows` rows; a column a
        table lacks is left out (its statistics say so by their count)."""
        self.rows += rows
        for name, values in columns.items():
            if name in self.columns:
                self.columns[name].add(values)
        return self

    def merge(self, other: "TableAcc") -> "TableAcc":
        out = TableAcc({})
        out.rows = self.rows + other.rows
        names = list(self.columns) + [n for n in other.columns if n not in self.columns]
        for n in names:
            a, b = self.columns.get(n), other.columns.get(n)
            out.columns[n] = a.merge(b) if a is not None and b is not None else (a or b)
        return out

    def summary(self) -> dict:
        return {"rows": self.rows,
                "features": {n: c.summary() for n, c in self.columns.items()}}


def merge_all(accs) -> "TableAcc":
    """Accumulators (TableAccs, or anything with merge()) merged into one."""
    accs = list(accs)
    out = accs[0]
    for a in accs[1:]:
        out = out.merge(a)
    return out


def record_batch_columns(rb, schema: Schema, names) -> dict:
    """A raw RecordBatch's columns (one-value lists under TensorFlow names) by user name."""
    return {n: rb.column(schema.tf_name(n)).flatten() for n in names}


class TableStatistics(beam.CombineFn):
    """Raw RecordBatches (preprocess's parsed rows) -> the statistics of `schema`'s columns."""

    def __init__(self, schema: Schema):
        self.schema = schema
        self.kinds = profiled_columns(schema)

    def create_accumulator(self):
        return TableAcc(self.kinds)

    def add_input(self, acc, rb):
        return acc.add(rb.num_rows, record_batch_columns(rb, self.schema, self.kinds))

    def merge_accumulators(self, accs):
        return merge_all(accs)

    def extract_output(self, acc) -> dict:
        return acc.summary()


def load_train_statistics(export_dir: str) -> Optional[dict]:
    """The export's train statistics, or None (an export made before they were kept)."""
    return read_statistics(FileSystems.join(export_dir, EXPORT_STATISTICS))


def read_statistics(path: str) -> Optional[dict]:
    """A statistics file (preprocess's statistics.json, an export's copy), or None where
    there is none; at most 64 MiB is read."""
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return json.loads(f.read(64 << 20).decode("utf-8"))
