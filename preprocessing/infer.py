"""A schema inferred from the data (like TFX's SchemaGen) when no spec file is given, the image
schema, and the CSV sample inference reads."""
from __future__ import annotations

import csv
import io
from typing import Iterable, Optional, Sequence

from preprocessing.parsing import BOM, check_line_ends, header_names
from preprocessing.schema import ColumnSpec, Schema, SchemaError, coerce_value, looks_like_datetime

KEY_NAMES = ("key", "id", "uuid", "unique_key", "trip_id", "example_id")


def _kind(values: Sequence[str]) -> str:
    non_empty = [v for v in values if v != ""]
    if not non_empty:
        return "string"
    for dtype in ("int", "float"):
        ok = 0
        for v in non_empty:
            try:
                coerce_value(v, dtype)
                ok += 1
            except ValueError:
                pass
        # Tolerate a few dirty values, as SchemaGen tolerates low-frequency anomalies.
        if ok >= 0.98 * len(non_empty):
            return dtype
    return "string"


def image_schema() -> Schema:
    """The raw schema of image data: source uri (the key), JPEG bytes, size, and the label."""
    return Schema(columns=(ColumnSpec("uri", "string"),
                           ColumnSpec("image", "string", "image"),
                           ColumnSpec("height", "int", "identity"),
                           ColumnSpec("width", "int", "identity"),
                           ColumnSpec("label", "string")),
                  label="label", key="uri", task="classification")


def infer_schema(header: Sequence[str], rows: Iterable[Sequence[str]], label: str,
                 key: Optional[str] = None, max_vocab: int = 1000,
                 classification_max_classes: int = 20) -> Schema:
    """Infers column types and transforms from a header and sample rows (all strings).

    Numeric columns are z-scored; low-cardinality strings get a vocabulary; datetime-looking
    strings get datetime parts; high-cardinality strings (ids, free text) are hashed. A string
    label means classification; an int label with few distinct non-negative values too;
    otherwise regression. The result is a plain spec the user can save, edit and pass back.
    """
    header = [h.strip() for h in header]
    if label not in header:
        raise SchemaError(f"label column '{label}' is not in the header {header}")
    if key is None:
        key = next((h for h in header if h.lower() in KEY_NAMES), None)
    elif key not in header:
        raise SchemaError(f"key column '{key}' is not in the header {header}")
    columns_values = [[] for _ in header]
    n = 0
    for r in rows:
        if len(r) != len(header):
            continue
        n += 1
        for i, v in enumerate(r):
            columns_values[i].append(v.strip())
    if n == 0:
        raise SchemaError("no well-formed sample rows to infer the schema from")
    cols, task = [], None
    for name, values in zip(header, columns_values):
        dtype = _kind(values)
        non_empty = [v for v in values if v != ""]
        distinct = set(non_empty)
        if name == key:
            cols.append(ColumnSpec(name=name, type="string"))
            continue
        if name == label:
            if dtype == "string":
                task = "classification"
            elif dtype == "int" and len(distinct) <= classification_max_classes and \
                    all(int(float(v)) >= 0 for v in distinct if _is_number(v)):
                task = "classification"
                dtype = "string"  # class ids become vocabulary entries
            else:
                task = "regression"
                dtype = "float"
            cols.append(ColumnSpec(name=name, type=dtype))
            continue
        if dtype in ("int", "float"):
            transform = "zscore"
        elif non_empty and sum(looks_like_datetime(v) for v in non_empty) >= 0.98 * len(non_empty):
            transform = "datetime"
        elif len(distinct) <= max_vocab and len(distinct) <= max(10, 0.5 * len(non_empty)):
            transform = "vocabulary"
        else:
            transform = "hash"
        has_empty = len(non_empty) < len(values)
        default = None
        if has_empty and transform != "datetime":
            # Fill empties rather than reject rows, as TFX's ImputeOrDefault examples do.
            default = "" if dtype == "string" else 0
        cols.append(ColumnSpec(name=name, type=dtype, transform=transform, default=default,
                               hash_buckets=max(100, min(10_000, len(distinct)))))
    return Schema(columns=tuple(cols), label=label, key=key, task=task)


def _is_number(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


def parse_csv_sample(text: str, delimiter: str = ",", max_rows: int = 10_000):
    """Header and up to max_rows rows from the start of a CSV text."""
    if text.startswith(BOM):  # a UTF-8 byte-order mark (spreadsheet exports)
        text = text[len(BOM):]
    try:
        check_line_ends(text.split("\n", 1)[0], "the input file")
    except ValueError as e:
        raise SchemaError(str(e)) from None
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    header = next(reader, None)
    if header is None:
        raise SchemaError("the input file is empty (no header row)")
    try:
        header = list(header_names(header))
    except ValueError as e:
        raise SchemaError(str(e)) from None
    rows = []
    for r in reader:
        if len(rows) >= max_rows:
            break
        if r:
            rows.append(r)
    return header, rows
