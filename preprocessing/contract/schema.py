"""The one declaration of the data: raw column types, key, label, and per-feature transforms.

Training and inference import this module, so the columns are declared once. A schema comes
from one of three places:

1. `preprocessing.schema_inference.infer.infer_schema(header, sample_rows, label=...)`, like TFX's SchemaGen,
   when no spec is given;
2. a declarative spec file (JSON or YAML), loaded with `Schema.load(path)`;
3. either of those plus a TFX-style module file whose `preprocessing_fn` replaces the
   generated one (see `preprocessing.features.transform.load_module_preprocessing_fn`).

Spec file format (YAML shown; JSON has the same keys)::

    label: fare_amount            # required
    key: key                      # optional; used for the split and kept with every record
    task: regression              # optional; inferred from the label's type if left out
    columns:
      - {name: pickup_datetime, type: string, transform: datetime, parts: [hour, weekday]}
      - {name: pickup_longitude, type: float, transform: zscore}
      - {name: tip_share, type: float, decimal: ",", transform: zscore}  # written 0,15
      - {name: income, type: float, grouping: ",", transform: zscore}  # written 52,000
      - {name: int_rate, type: float, unit: "%", transform: zscore}  # written 13.5%
      - {name: ordered_on, type: string, transform: datetime, date_order: mdy}  # 1/3/2011
      - {name: start_time, type: float, clock: true, transform: zscore}  # 7:05 p.m., in seconds
      - {name: race_time, type: float, clock: duration}  # 58:12 or 1:02:03, in seconds
      - {name: passenger_count, type: int, default: 1, transform: scale_0_1}
      - {name: payment_type, type: string, transform: vocabulary, top_k: 10, num_oov_buckets: 1}
      - {name: trip_seconds, type: float, transform: bucketize, num_buckets: 10}
      - {name: company, type: string, transform: hash, hash_buckets: 64}
    derived:                      # computed inside the transform graph, so serving gets it too
      - {name: trip_km, op: haversine_km,
         inputs: [pickup_latitude, pickup_longitude, dropoff_latitude, dropoff_longitude]}
    crosses:                      # of categorical *transformed* features
      - {features: [pickup_datetime_hour, pickup_datetime_weekday], hash_buckets: 168}

A column with a `default` may be empty in the data; one without is required. `identity` keeps
a column as it is (any type); `image` marks encoded image bytes (kept as they are).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Optional, Union

from preprocessing.contract.checks import validate
from preprocessing.contract.kinds import (  # noqa: F401 (SchemaError: re-exported)
    DATETIME_PARTS,
    MEAN_DEFAULT,
    SchemaError,
)
from preprocessing.contract.names import output_names, tf_names
from preprocessing.contract.spec_files import parse_spec_text, read_spec_text
from preprocessing.contract.values import coerce_value

# The raw schema file preprocess writes beside its outputs, and the export carries as
# assets.extra/RAW_SCHEMA_FILE for serving (one name, every reader).
RAW_SCHEMA_FILE = "raw_schema.json"
# Where an export keeps the raw schema it serves (inside the SavedModel folder).
RAW_SCHEMA_ASSET = "assets.extra/" + RAW_SCHEMA_FILE


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    type: str
    transform: str = "none"
    default: Any = None
    top_k: Optional[int] = None
    num_oov_buckets: int = 1
    num_buckets: int = 10
    hash_buckets: int = 100
    parts: tuple = ("hour", "weekday", "month")
    missing: tuple = ()  # texts read as a missing value besides the empty field ("NA", "?")
    # The decimal mark of a float column's numbers: "," where they are written 39,1 (a
    # European spreadsheet's ';'-delimited file); every reader parses them as 39.1.
    decimal: str = "."
    # A number column's thousands separator: "," where its numbers are written 1,234,567.5
    # (grouped in threes; "." beside a decimal comma, 1.234.567,5): values.GROUPING_MARKS.
    grouping: str = ""
    # A number column's unit sign, dropped by every reader: "$" (or "€", "£") before the
    # digits or after the number ($1,234.50, -$5, 5 €), "%" after it (13.5%, read 13.5):
    # units.UNITS, or a word (units.is_unit).
    unit: str = ""
    # How a datetime column's dates are written: "ymd" (ISO, YYYY-MM-DD or YYYY/MM/DD), "mdy" / "dmy"
    # (1/3/2011 month first, a US spreadsheet's; 03.01.2011 day first), or "ym", a month
    # without its day (2018-03, Mar-2018, 1998 Q1): values.DATE_ORDERS.
    date_order: str = "ymd"
    # A float column written as a clock: true for a time of day (13:30, 5:00 a.m.) or hours
    # first (2:31:38), "duration" for elapsed times whose two parts are minutes and seconds
    # (58:12, 1:02.35, beside 1:02:03); read as seconds (values.CLOCK_PATTERN). A number
    # there (a default too) is seconds.
    clock: Union[bool, str] = False

    @property
    def required(self) -> bool:
        return self.default is None

    @property
    def imputed(self) -> bool:
        return self.default == MEAN_DEFAULT

    def typed_default(self):
        """The value an empty field reads as: None (required), NaN (`mean`), or the typed
        default."""
        if self.default is None:
            return None
        if self.imputed:
            return float("nan")
        return coerce_value(str(self.default), self.type, clock=self.clock)


def _suffixes(c: ColumnSpec) -> tuple:
    """The outputs column `c` makes beside its own (Schema.output_name), in the order the
    preprocessing_fn makes them."""
    parts = tuple(c.parts) if c.transform == "datetime" else ()
    return parts + (("bucket",) if c.transform == "numeric" else ()) + \
        (("missing",) if c.imputed else ())


_SUFFIX_WORDS = {"bucket": "quantile bucket", "missing": "missing flag"}


@dataclass(frozen=True)
class DerivedSpec:
    name: str
    op: str
    inputs: tuple
    transform: str = "zscore"
    # op `entity`: transform `vocabulary` (each value seen in train its own id, one more id
    # for an entity never seen: the trees learn it, training/models/entity_twins.py) or
    # `hash` (into hash_buckets buckets; a new entity shares a trained one's bucket)
    hash_buckets: int = 0


@dataclass(frozen=True)
class CrossSpec:
    features: tuple
    hash_buckets: int = 1000

    @property
    def name(self) -> str:
        return "cross_" + "_x_".join(self.features)


@dataclass(frozen=True)
class Schema:
    columns: tuple
    label: str
    key: Optional[str] = None
    task: Optional[str] = None
    derived: tuple = ()
    crosses: tuple = ()

    def __post_init__(self):
        # Over distinct names: a name declared twice is validate()'s error to report.
        object.__setattr__(self, "tf_names", tf_names(list(dict.fromkeys(self.names))))
        object.__setattr__(self, "_outputs", output_names(
            [(self.tf_names[c.name], _suffixes(c)) for c in self.feature_columns()],
            [*self.tf_names.values(), *(d.name for d in self.derived),
             *(x.name for x in self.crosses)]))
        if self.task is None:
            label = self.column(self.label) if self.label in self.names else None
            task = "classification" if label is not None and label.type == "string" else "regression"
            object.__setattr__(self, "task", task)
        self.validate()

    # ---- lookups -------------------------------------------------------------------------
    @property
    def names(self) -> tuple:
        return tuple(c.name for c in self.columns)

    def tf_name(self, name: str) -> str:
        """The name TensorFlow sees for column `name` (preprocessing/contract/names.py)."""
        return self.tf_names[name]

    def output_name(self, column: str, suffix: str) -> str:
        """The transformed feature column `column` makes beside its own: `suffix` "bucket"
        (a numeric column's quantile bucket), "missing" (an imputed column's flag) or a
        datetime part (preprocessing/contract/names.py output_names)."""
        return self._outputs[(self.tf_names[column], suffix)]

    def column_of_output(self, output: str) -> ColumnSpec:
        """The column whose transformed feature is named `output` (a TensorFlow name)."""
        for c in self.columns:
            if self.tf_names[c.name] == output:
                return c
        raise KeyError(output)

    def entity_vocabularies(self) -> tuple:
        """The derived `entity` features given exact vocabularies (one id past the values
        seen in train: an entity never seen)."""
        return tuple(d.name for d in self.derived
                     if d.op == "entity" and d.transform == "vocabulary")

    def entity_sources(self) -> tuple:
        """The TensorFlow names of string columns an exact `entity` vocabulary is made of:
        no model input themselves, as the copy holds every value they do and its never-seen
        id must not be read back from them (training/models/entity_twins.py)."""
        exact = self.entity_vocabularies()
        return tuple(self.tf_name(d.inputs[0]) for d in self.derived if d.name in exact
                     and self.column(d.inputs[0]).type == "string")

    def column(self, name: str) -> ColumnSpec:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def feature_columns(self) -> tuple:
        """Columns that feed the model: everything but the key and the label."""
        return tuple(c for c in self.columns if c.name not in (self.key, self.label))

    def serving_columns(self) -> tuple:
        """Raw columns a caller sends at serving time (no label; key optional)."""
        return tuple(c for c in self.feature_columns() if c.transform != "none")

    def categorical_outputs(self) -> dict:
        """Transformed categorical feature name -> cardinality known from the spec alone.

        Vocabulary sizes are only known after analysis; they map to None here.
        """
        out = {}
        for c in self.feature_columns():
            name = self.tf_names[c.name]
            if c.transform == "vocabulary":
                out[name] = None
            elif c.transform in ("bucketize", "numeric"):
                out[name if c.transform == "bucketize" else
                    self.output_name(c.name, "bucket")] = c.num_buckets
            elif c.transform == "hash":
                out[name] = c.hash_buckets
            elif c.transform == "datetime":
                for p in c.parts:
                    if p in DATETIME_PARTS:  # `days` is a number
                        out[self.output_name(c.name, p)] = DATETIME_PARTS[p]
            if c.imputed:
                out[self.output_name(c.name, "missing")] = 2
        for d in self.derived:
            if d.op == "entity":
                out[d.name] = None if d.transform == "vocabulary" else d.hash_buckets
        for x in self.crosses:
            out[x.name] = x.hash_buckets
        return out

    def transformed_origins(self) -> list:
        """(transformed feature name, what makes it) for every output of the
        preprocessing_fn (preprocessing/features/transform.py), in order."""
        out = []
        for c in self.feature_columns():
            name = self.tf_names[c.name]
            what = f"column '{c.name}'"
            if c.transform != "datetime":  # a datetime's parts stand in for it
                out.append((name, what))
            out += [(self.output_name(c.name, s), f"{what} ({_SUFFIX_WORDS.get(s, s)})")
                    for s in _suffixes(c)]
        out += [(d.name, f"derived '{d.name}'") for d in self.derived]
        out += [(x.name, f"cross {list(x.features)}") for x in self.crosses]
        out.append((self.tf_names[self.label], f"label '{self.label}'"))
        if self.key:
            out.append((self.tf_names[self.key], f"key '{self.key}'"))
        return out

    def numeric_outputs(self) -> tuple:
        names = [self.tf_names[c.name] for c in self.feature_columns()
                 if c.transform in ("numeric", "zscore", "scale_0_1", "passthrough")]
        names += [d.name for d in self.derived if d.op != "entity"]
        return tuple(names)

    # ---- validation ----------------------------------------------------------------------
    def validate(self) -> None:
        """Raises SchemaError on the first thing wrong (preprocessing/contract/checks.py)."""
        validate(self)

    # ---- (de)serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict:
        def col(c: ColumnSpec):
            d = {"name": c.name, "type": c.type, "transform": c.transform}
            defaults = ColumnSpec(name="", type="float")
            for f in dataclasses.fields(ColumnSpec):
                if f.name in d:
                    continue
                v = getattr(c, f.name)
                if v != getattr(defaults, f.name):
                    d[f.name] = list(v) if isinstance(v, tuple) else v
            return d

        out = {"label": self.label, "key": self.key, "task": self.task,
               "columns": [col(c) for c in self.columns]}
        if self.derived:
            out["derived"] = [{"name": d.name, "op": d.op, "inputs": list(d.inputs),
                               "transform": d.transform,
                               **({"hash_buckets": d.hash_buckets} if d.hash_buckets else {})}
                              for d in self.derived]
        if self.crosses:
            out["crosses"] = [{"features": list(x.features), "hash_buckets": x.hash_buckets}
                              for x in self.crosses]
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Schema":
        if not isinstance(d, dict):
            raise SchemaError("spec must be a mapping with 'columns' and 'label'")
        unknown = set(d) - {"label", "key", "task", "columns", "derived", "crosses"}
        if unknown:
            raise SchemaError(f"unknown spec keys {sorted(unknown)}")
        if "label" not in d:
            raise SchemaError("spec has no 'label'")
        cols = []
        col_fields = {f.name for f in dataclasses.fields(ColumnSpec)}
        for i, c in enumerate(d.get("columns") or []):
            if not isinstance(c, dict) or "name" not in c or "type" not in c:
                raise SchemaError(f"columns[{i}] needs at least 'name' and 'type'")
            bad = set(c) - col_fields
            if bad:
                raise SchemaError(f"column '{c['name']}': unknown keys {sorted(bad)}")
            c = dict(c)
            for listed in ("parts", "missing"):
                if listed in c:
                    c[listed] = tuple(c[listed])
            cols.append(ColumnSpec(**c))
        derived = []
        for x in d.get("derived") or []:
            try:
                derived.append(DerivedSpec(name=x["name"], op=x["op"], inputs=tuple(x["inputs"]),
                                           transform=x.get("transform", "zscore"),
                                           hash_buckets=int(x.get("hash_buckets", 0))))
            except (KeyError, TypeError) as e:
                raise SchemaError(f"derived entry {x!r} needs name, op and inputs ({e})") from None
        crosses = []
        for x in d.get("crosses") or []:
            try:
                crosses.append(CrossSpec(features=tuple(x["features"]),
                                         hash_buckets=int(x.get("hash_buckets", 1000))))
            except (KeyError, TypeError) as e:
                raise SchemaError(f"cross entry {x!r} needs 'features' ({e})") from None
        return cls(columns=tuple(cols), label=d["label"], key=d.get("key"), task=d.get("task"),
                   derived=tuple(derived), crosses=tuple(crosses))

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    @classmethod
    def loads(cls, text: str, path_hint: str = "") -> "Schema":
        try:
            data = parse_spec_text(text, path_hint)
        except ValueError as e:
            raise SchemaError(str(e)) from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str) -> "Schema":
        try:
            text = read_spec_text(path)
        except ValueError as e:
            raise SchemaError(str(e)) from None
        return cls.loads(text, path)

    def save(self, path: str) -> None:
        from apache_beam.io.filesystems import FileSystems
        with FileSystems.create(path) as f:
            f.write(self.dumps().encode("utf-8"))

    def with_overrides(self, **kw) -> "Schema":
        return dataclasses.replace(self, **kw)

