"""The shared preprocessing_fn: TF datetime/haversine helpers and a full tf.transform run."""
import calendar
import dataclasses
import datetime
import random
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from preprocessing.contract.schema import ColumnSpec, CrossSpec, DerivedSpec, Schema
from preprocessing.contract.values import looks_like_datetime
from preprocessing.features.transform import datetime_parts, haversine_km, make_preprocessing_fn
from tools.datagen import haversine_km as np_haversine


def test_datetime_parts_match_python_calendar():
    rng = random.Random(3)
    start = datetime.datetime(1999, 1, 1)
    stamps = [start + datetime.timedelta(seconds=rng.randrange(0, 40 * 365 * 86400))
              for _ in range(2000)]
    texts = [d.strftime("%Y-%m-%d %H:%M:%S") + (" UTC" if i % 2 else "")
             for i, d in enumerate(stamps)]
    texts[0] = stamps[0].strftime("%Y-%m-%dT%H:%M:%S")
    # read by position: a date written YYYY/MM/DD or YYYY.MM.DD gives the same parts
    texts[1::3] = [d.strftime("%Y/%m/%d %H:%M:%S") for d in stamps[1::3]]
    texts[2::3] = [d.strftime("%Y.%m.%d %H:%M:%S") for d in stamps[2::3]]
    texts[4::9] = [d.strftime("%Y-%m-%d %H:%M") for d in stamps[4::9]]  # no seconds
    assert all(looks_like_datetime(t) for t in texts)
    parts = {k: v.numpy() for k, v in datetime_parts(tf.constant(texts)).items()}
    assert parts["weekday"].tolist() == [d.weekday() for d in stamps]
    assert parts["hour"].tolist() == [d.hour for d in stamps]
    assert parts["month"].tolist() == [d.month - 1 for d in stamps]
    assert parts["day"].tolist() == [d.day - 1 for d in stamps]
    assert parts["minute"].tolist() == [d.minute for d in stamps]
    assert parts["time_of_day"].tolist() == [d.hour * 60 + d.minute for d in stamps]


def test_datetime_offsets_are_converted_to_utc_across_day_and_year_ends():
    rng = random.Random(4)
    zones = ["Z", " UTC", "+05:30", "-0330", "+14:00", "-11", ".125+01:00", ".5"]
    texts, utc = [], []
    for _ in range(3000):
        local = datetime.datetime(1970, 1, 1) + datetime.timedelta(
            seconds=rng.randrange(-300 * 365 * 86400, 400 * 365 * 86400))
        zone = rng.choice(zones)
        text = local.strftime("%Y-%m-%d %H:%M:%S") + zone
        aware = datetime.datetime.fromisoformat(text.replace(" UTC", "+00:00"))
        texts.append(text)
        utc.append(aware.astimezone(datetime.timezone.utc) if aware.tzinfo else aware)
    parts = {k: v.numpy().tolist() for k, v in datetime_parts(tf.constant(texts)).items()}
    got = list(zip(parts["hour"], parts["minute"], parts["weekday"], parts["month"], parts["day"]))
    assert got == [(d.hour, d.minute, d.weekday(), d.month - 1, d.day - 1) for d in utc]
    # One instant written in three zones: the same features.
    same = datetime_parts(tf.constant(["2025-12-31 23:30:00-05:00", "2026-01-01 04:30:00Z",
                                       "2026-01-01 10:00:00+05:30"]))
    assert all(len(set(v.numpy().tolist())) == 1 for v in same.values())


def test_a_date_alone_is_midnight_utc_and_days_count_from_1970():
    rng = random.Random(6)
    dates = [datetime.date(1950, 1, 1) + datetime.timedelta(days=rng.randrange(0, 40000))
             for _ in range(500)]
    parts = {k: v.numpy().tolist() for k, v in datetime_parts(tf.constant(
        [d.isoformat() for d in dates])).items()}
    assert parts["days"] == [(d - datetime.date(1970, 1, 1)).days for d in dates]
    assert parts["weekday"] == [d.weekday() for d in dates]
    assert parts["month"] == [d.month - 1 for d in dates] and set(parts["hour"]) == {0}
    same = datetime_parts(tf.constant(["2025-03-09", "2025-03-09 00:00:00", " 2025-03-09 "]))
    assert all(len(set(v.numpy().tolist())) == 1 for v in same.values())


def test_haversine_matches_numpy_twin():
    rng = np.random.default_rng(0)
    lat1, lat2 = rng.uniform(40.6, 40.9, (2, 500))
    lon1, lon2 = rng.uniform(-74.05, -73.75, (2, 500))
    tf_km = haversine_km(*[tf.constant(v, tf.float32) for v in (lat1, lon1, lat2, lon2)]).numpy()
    np.testing.assert_allclose(tf_km, np_haversine(lat1, lon1, lat2, lon2), atol=0.02)


def _analyze_and_transform(schema, rows, apply_to=None):
    """Analyzes `rows` with tf.transform, then applies the saved transform_fn to them (or to
    `apply_to`)."""
    import apache_beam as beam
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    from preprocessing.parsing.record_batches import raw_feature_spec
    meta = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(
        raw_feature_spec(schema)))
    out_dir = tempfile.mkdtemp()
    with beam.Pipeline() as p, tft_beam.Context(temp_dir=tempfile.mkdtemp()):
        transform_fn = ((p | beam.Create(rows), meta)
                        | tft_beam.AnalyzeDataset(make_preprocessing_fn(schema)))
        _ = transform_fn | tft_beam.WriteTransformFn(out_dir)
    dtypes = {"float": tf.float32, "int": tf.int64, "string": tf.string}
    rows = rows if apply_to is None else apply_to
    raw = {c.name: tf.constant([r[c.name] for r in rows], dtypes[c.type]) for c in schema.columns}
    out = tft.TFTransformOutput(out_dir).transform_raw_features(raw)
    cols = {k: v.numpy().tolist() for k, v in out.items()}
    return [{k: cols[k][i] for k in cols} for i in range(len(rows))]


@pytest.mark.slow
def test_preprocessing_fn_end_to_end_classification():
    schema = Schema(
        columns=(ColumnSpec("id", "string"),
                 ColumnSpec("x", "float", "zscore"),
                 ColumnSpec("n", "int", "bucketize", num_buckets=4),
                 ColumnSpec("c", "string", "vocabulary", top_k=2, num_oov_buckets=1),
                 ColumnSpec("h", "string", "hash", hash_buckets=8),
                 ColumnSpec("g", "int", "numeric", num_buckets=4),
                 ColumnSpec("y", "string")),
        label="y", key="id", crosses=(CrossSpec(("n", "c"), hash_buckets=16),),
        derived=(DerivedSpec("g_entity", "entity", ("g",), "hash", hash_buckets=1000),
                 DerivedSpec("g_known", "entity", ("g",), "vocabulary")))
    rows = [{"id": f"r{i}", "x": float(i), "n": i % 10, "c": ["a", "a", "a", "b", "b", "z"][i % 6],
             "h": f"h{i % 5}", "g": 1000 + i // 3,
             "y": ["cat", "dog"][i % 2] if i % 7 else "cat"} for i in range(120)]
    out = _analyze_and_transform(schema, rows)
    assert len(out) == 120
    # The entity's number stays a number, and its hashed copy groups its rows: one bucket
    # for an entity's 3 rows, 40 entities in (nearly) 40 buckets of 1000.
    by_entity = {}
    for r in out:
        by_entity.setdefault(round(r["g"], 4), set()).add(r["g_entity"])
    assert len(by_entity) == 40 and all(len(b) == 1 for b in by_entity.values())
    assert len({r["g_entity"] for r in out}) >= 38
    assert all(0 <= r["g_entity"] < 1000 for r in out)
    # The vocabulary copy: one id per entity seen, exactly; an entity never seen takes the
    # one id past them (what the models learn as "never seen").
    known = {}
    for r in out:
        known.setdefault(round(r["g"], 4), set()).add(r["g_known"])
    assert sorted(i for ids in known.values() for i in ids) == list(range(40))
    unseen = dict(rows[0], g=99_999)
    assert [r["g_known"] for r in _analyze_and_transform(schema, rows, [rows[3], unseen])] == \
        [out[3]["g_known"], 40]
    xs = np.array([r["x"] for r in out])
    assert abs(xs.mean()) < 1e-5 and abs(xs.std() - 1) < 1e-3
    by_id = {r["id"].decode() if isinstance(r["id"], bytes) else r["id"]: r for r in out}
    # top_k=2 keeps 'a' (most frequent, index 0) and 'b' (1); 'z' falls in the OOV bucket (2).
    assert by_id["r0"]["c"] == 0 and by_id["r3"]["c"] == 1 and by_id["r5"]["c"] == 2
    assert {r["n"] for r in out} <= {0, 1, 2, 3}
    assert all(0 <= r["h"] < 8 and 0 <= r["cross_n_x_c"] < 16 for r in out)
    # 'cat' is the more frequent class: index 0.
    assert by_id["r0"]["y"] == 0 and by_id["r1"]["y"] == 1


def _numeric_schema(n, missing=False):
    cols = [ColumnSpec("id", "string")]
    for i in range(n):
        cols.append(ColumnSpec(f"v{i}", "float", "numeric", num_buckets=4 if i % 2 else 8,
                               default="mean" if missing and i == 0 else None))
    return Schema(columns=tuple(cols + [ColumnSpec("y", "float")]), label="y", key="id")


@pytest.mark.slow
def test_numeric_columns_analysed_together_get_what_each_gets_alone():
    """`numeric` columns share their analyzers (one per bucket count, element by element);
    each column still gets its own mean, spread, range, missing value and quantiles. A
    user's column named `v0_missing` keeps its name: v0's flag is `v0_missing_`."""
    rng = np.random.default_rng(5)
    rows = [{"id": f"r{i}", "v0": float("nan") if i % 9 == 0 else float(rng.normal(10, 3)),
             "v1": float(rng.integers(0, 40)), "v2": float(rng.exponential(100)),
             "v0_missing": float(i % 2), "y": 1.0} for i in range(300)]
    schema = _numeric_schema(3, missing=True)
    schema = dataclasses.replace(schema, columns=schema.columns[:-1] + (
        ColumnSpec("v0_missing", "float", "passthrough"), schema.columns[-1]))
    together = _analyze_and_transform(schema, rows)
    assert [r["v0_missing"] for r in together] == [r["v0_missing"] for r in rows]
    assert [r["v0_missing_"] for r in together] == [int(i % 9 == 0) for i in range(300)]
    for name, alone_schema in (("v0", Schema(columns=(
            ColumnSpec("id", "string"),
            ColumnSpec("v0", "float", "numeric", num_buckets=8, default="mean"),
            ColumnSpec("y", "float")), label="y", key="id")),
            ("v1", Schema(columns=(ColumnSpec("id", "string"),
                                   ColumnSpec("v1", "float", "numeric", num_buckets=4),
                                   ColumnSpec("y", "float")), label="y", key="id"))):
        alone = _analyze_and_transform(alone_schema, [{k: r[k] for k in ("id", name, "y")}
                                                      for r in rows])
        for a, b in zip(together, alone):
            assert a[f"{name}_bucket"] == b[f"{name}_bucket"]
            assert a[name] == pytest.approx(b[name], abs=1e-5)
            if name == "v0":
                assert a["v0_missing_"] == b["v0_missing"]
    z = np.array([r["v2"] for r in together])
    assert abs(z.mean()) < 1e-5 and abs(z.std() - 1) < 1e-3
    assert sorted({r["v1_bucket"] for r in together}) == [0, 1, 2, 3]
    assert sum(r["v0_missing_"] for r in together) == 34


def test_the_analysis_graph_does_not_grow_with_the_numeric_columns():
    """A table of 377 numeric columns took over 10 minutes and 8 GB to build its Beam graph
    when each column had its own analyzers."""
    import apache_beam as beam
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    from preprocessing.parsing.record_batches import raw_feature_spec

    def graph_size(n):
        schema = _numeric_schema(n, missing=True)
        meta = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(
            raw_feature_spec(schema)))
        p = beam.Pipeline()
        with tft_beam.Context(temp_dir=tempfile.mkdtemp()):
            _ = ((p | beam.Create([]), meta)
                 | tft_beam.AnalyzeDataset(make_preprocessing_fn(schema)))
        return len(p.to_runner_api().components.transforms)
    assert graph_size(40) == graph_size(4)


def test_a_numeric_column_adds_a_handful_of_ops_to_the_transform_graph():
    """tf.transform traces the graph several times per job (analysis, metadata, the saved
    transform_fn, each split's transform), so every op a column adds is paid per column in
    each. At 69 ops per column, 1,000 numeric columns took 219 s to preprocess 1,000 rows."""
    from tensorflow_transform import impl_helper

    from preprocessing.parsing.record_batches import raw_feature_spec

    def ops(n):
        schema = _numeric_schema(n, missing=True)
        specs = impl_helper.get_type_specs_from_feature_specs(raw_feature_spec(schema))
        graph = impl_helper.trace_preprocessing_function(
            make_preprocessing_fn(schema), specs, use_tf_compat_v1=False)
        graph = graph[0] if isinstance(graph, tuple) else graph
        return len(graph.get_operations())
    assert (ops(40) - ops(4)) / 36 <= 16


@pytest.mark.parametrize("order", ["mdy", "dmy"])
def test_month_and_day_first_datetimes_match_python_calendar(order):
    """The serving graph reads `1/3/2011 9:05` (month first) and `3.1.11` (day first), the
    month maybe named (`Jan 3, 2011`, `3-JAN.-11`), as the calendar does: two-digit years
    00-29 in the 2000s, 30-99 in the 1900s, no time midnight."""
    rng = random.Random(11)
    texts, stamps = [], []
    for _ in range(1500):
        d = datetime.datetime(1900, 1, 1) + datetime.timedelta(
            minutes=rng.randrange(0, 199 * 365 * 1440))
        if rng.random() < 0.3:
            d = d.replace(hour=0, minute=0)
            clock = ""
        else:
            clock = rng.choice([f" {d.hour}:{d.minute:02d}", f" {d.hour:02d}:{d.minute:02d}:07"])
        short = 1930 <= d.year <= 2029 and rng.random() < 0.5
        year = f"{d.year % 100:02d}" if short else str(d.year)
        # The month as a number, or named as spreadsheets write it (6-Aug-09, Aug 6, 2009).
        month = rng.choice([f"{d.month:0{rng.choice((1, 2))}d}", d.strftime("%b"),
                            d.strftime("%B"), d.strftime("%b").upper() + "."])
        named = not month.isdigit()
        first, second = (month, d.day) if order == "mdy" else (f"{d.day:0{rng.choice((1, 2))}d}",
                                                               month)
        sep = rng.choice("/.- " if named else "/.-")
        comma = "," if named and sep == " " and rng.random() < 0.5 else ""
        texts.append(f"{first}{sep}{second}{comma}{sep}{year}{clock}")
        stamps.append(d)
    assert all(looks_like_datetime(t, order) for t in texts)
    parts = {k: v.numpy().tolist() for k, v in datetime_parts(tf.constant(texts), order).items()}
    assert parts["weekday"] == [d.weekday() for d in stamps]
    assert parts["month"] == [d.month - 1 for d in stamps]
    assert parts["day"] == [d.day - 1 for d in stamps]
    assert parts["hour"] == [d.hour for d in stamps]
    assert parts["minute"] == [d.minute for d in stamps]
    assert parts["days"] == [(d.date() - datetime.date(1970, 1, 1)).days for d in stamps]
    # KMsurv's baboon (day first): its `26/3/64` is 1964, not 2064.
    days = datetime_parts(tf.constant(["26/3/64", "3/26/64"]), order)["days"].numpy()[
        int(order == "mdy")]
    assert days == (datetime.date(1964, 3, 26) - datetime.date(1970, 1, 1)).days


def test_months_without_their_day_match_python_calendar():
    """The serving graph reads `2018-03`, `3/2018`, `Mar-18`, `1960 Jan`, `MARCH 2018` and a
    quarter `1998 Q2` as the first day of that month (of the quarter's first month)."""
    rng = random.Random(12)
    texts, firsts = [], []
    for _ in range(1500):
        year, month = rng.randrange(1900, 2100), rng.randrange(1, 13)
        short = 1930 <= year <= 2029 and rng.random() < 0.3
        name = rng.choice([f"{month:0{rng.choice((1, 2))}d}", calendar.month_abbr[month],
                           calendar.month_name[month].upper(), f"Q{(month + 2) // 3}"])
        if name.isdigit():
            text = rng.choice([f"{year}-{name}", f"{name}/{year}"])
        elif name.startswith("Q"):
            month = month - (month - 1) % 3
            text = rng.choice([f"{year} {name}", f"{name}-{year}"])
        elif short:
            text = f"{name}-{year % 100:02d}"
        else:
            text = rng.choice([f"{name} {year}", f"{year} {name}", f"{name}/{year}"])
        texts.append(text)
        firsts.append(datetime.date(year, month, 1))
    assert all(looks_like_datetime(t, "ym") for t in texts)
    parts = {k: v.numpy().tolist() for k, v in datetime_parts(tf.constant(texts), "ym").items()}
    assert parts["days"] == [(d - datetime.date(1970, 1, 1)).days for d in firsts]
    assert parts["month"] == [d.month - 1 for d in firsts]
    assert set(parts["day"]) == set(parts["hour"]) == {0}
