"""Schema inference, the spec parser, and value coercion."""

import dataclasses
import re

import pyarrow as pa
import pytest

from preprocessing import TAXI_SPEC
from preprocessing.contract.schema import ColumnSpec, CrossSpec, DerivedSpec, Schema, SchemaError
from preprocessing.contract.values import coerce_value
from preprocessing.schema_inference.infer import infer_from_profile, infer_schema, parse_csv_sample
from preprocessing.schema_inference.profile import profile_rows, profile_tables
from tools.datagen import HEADER, generate_rows


def test_infer_taxi_schema_types_and_transforms():
    rows = [f for f, _ in generate_rows(500, seed=1, dirty_fraction=0.0)]
    s = infer_schema(HEADER, rows, label="fare_amount")
    kinds = {c.name: (c.type, c.transform) for c in s.columns}
    assert s.key == "key"  # found by name
    assert s.task == "regression"
    assert kinds["fare_amount"] == ("float", "none")
    assert kinds["pickup_longitude"] == ("float", "numeric")
    assert kinds["passenger_count"] == ("int", "numeric")
    assert kinds["pickup_datetime"] == ("string", "datetime")
    assert kinds["payment_type"] == ("string", "vocabulary")
    assert kinds["company"] == ("string", "vocabulary")
    # With dirty rows, passenger_count has empties: the train mean fills them (a float
    # column), instead of rejecting the rows.
    dirty = infer_schema(HEADER, [f for f, _ in generate_rows(500, seed=1, dirty_fraction=0.01)],
                         label="fare_amount")
    assert (dirty.column("passenger_count").type,
            dirty.column("passenger_count").default) == ("float", "mean")


def test_infer_classification_and_ids_by_statistics():
    header = ["uid", "colour", "size", "species"]
    rows = [[f"u{i}", ["red", "green"][i % 2], str(i % 7), ["cat", "dog", "owl"][i % 3]]
            for i in range(300)]
    s = infer_schema(header, rows, label="species")
    assert s.task == "classification"
    assert s.key == "uid"  # not a known key name, but unique strings: the key
    assert s.column("uid").transform == "none"
    assert s.column("colour").transform == "vocabulary"
    assert (s.column("size").type, s.column("size").transform) == ("int", "numeric")


def test_a_column_named_like_a_key_is_the_key_only_when_distinct_per_row():
    # geepack's respiratory: a patient's `id` over four visits is a group, a feature.
    rows = [[str(i), str(i // 4), str(i % 3), str(i % 2)] for i in range(200)]
    schema, decisions = infer_from_profile(profile_rows(["rownames", "id", "f", "y"], rows), "y")
    assert schema.key == "rownames"
    assert decisions["id"].role == "feature"
    assert decisions["id"].why.startswith("named like a key but repeated (50 distinct in 200")
    assert "--key_column id keeps each value's rows in one split" in decisions["id"].why
    unique = [[str(i), f"u{i}", str(i % 3), str(i % 2)] for i in range(200)]
    assert infer_schema(["n", "id", "f", "y"], unique, label="y").key == "id"


def test_a_repeated_numeric_id_is_a_number_and_a_category_with_a_never_seen_id():
    """Ecdat's Cracker: a household `id` over its purchases. As a number alone the trees did
    not read a household's choices; a hashed copy did, and cost 0.18 on households never
    trained on (docs/performance.md). The copy is an exact vocabulary now, whose id past
    the values seen stands for a new entity (training/models/entity_twins.py)."""
    rows = [[str(i), str(100 + i // 4), str(i % 3), str(i % 2)] for i in range(200)]
    schema, decisions = infer_from_profile(profile_rows(["rownames", "id", "f", "y"], rows), "y")
    assert schema.column("id").transform == "numeric"
    (copy,) = schema.derived
    assert (copy.name, copy.op, copy.inputs, copy.transform) == ("id_entity", "entity", ("id",),
                                                                 "vocabulary")
    assert schema.entity_vocabularies() == ("id_entity",)
    assert schema.categorical_outputs()["id_entity"] is None  # its size: after analysis
    assert "id" in schema.numeric_outputs() and "id_entity" not in schema.numeric_outputs()
    assert "--key_column id keeps each value's rows in one split" in decisions["id"].why
    assert "a category, `id_entity`" in decisions["id"].why
    assert Schema.from_dict(schema.to_dict()) == schema
    assert schema.entity_sources() == ()
    # A string id is read through its copy alone (its own vocabulary would name a new
    # entity's rows apart from the never-seen id); not when `id` is the key, nor a name taken.
    named = [[r[0], f"p{r[1]}", r[2], r[3]] for r in rows]
    texts, decisions = infer_from_profile(profile_rows(["rownames", "id", "f", "y"], named), "y")
    assert texts.derived == (copy,) and texts.entity_sources() == ("id",)
    assert "the models read it as the category `id_entity`" in decisions["id"].why
    assert not infer_from_profile(profile_rows(["rownames", "id", "f", "y"], rows), "y",
                                  key="id")[0].derived
    taken = [r + ["x"] for r in rows]
    for other in ("id_entity", "id entity"):  # the second's TensorFlow name is `id_entity`
        schema_t, _ = infer_from_profile(profile_rows(["rownames", "id", "f", "y", other],
                                                      taken), "y")
        assert not schema_t.derived and schema_t.column(other).transform == "vocabulary"
    # A hand-written spec may hash it instead (no never-seen id), round-tripped and checked.
    hashed = DerivedSpec("id_entity", "entity", ("id",), "hash", hash_buckets=100)
    written = dataclasses.replace(schema, derived=(hashed,))
    written.validate()
    assert written.categorical_outputs()["id_entity"] == 100
    assert written.entity_vocabularies() == ()
    assert Schema.from_dict(written.to_dict()) == written
    for wrong in (dataclasses.replace(copy, transform="zscore"),
                  dataclasses.replace(hashed, hash_buckets=0)):
        with pytest.raises(SchemaError, match="op 'entity' is a category"):
            dataclasses.replace(schema, derived=(wrong,)).validate()
    # A cross of an entity's copy, or of a string source read through it, would keep what
    # the twins hide: refused in one line.
    for crossed, f in ((schema, "id_entity"), (texts, "id_entity"), (texts, "id")):
        with pytest.raises(SchemaError, match=f"'{f}' names an entity"):
            dataclasses.replace(crossed, crosses=(CrossSpec((f, "f_bucket")),)).validate()
    # A copy of the label, or of the key (no model input), is refused in one line.
    for source in ("y", "rownames"):
        with pytest.raises(SchemaError, match=f"input '{source}' must be a feature column"):
            dataclasses.replace(schema, derived=(dataclasses.replace(copy, inputs=(source,)),)
                                ).validate()


def test_a_repeated_column_named_like_an_entity_is_one_from_twenty_values():
    """AER's TravelMode: `individual` over its four travel modes. Read as a number alone the
    jobs lost 0.024-0.063 accuracy to scikit-learn, which reads each individual's party size
    off its other rows; as `id` with its copy the jobs scored 1.0 (docs/performance.md)."""
    rows = [[str(i), str(1 + i // 4), str(i % 4), str(i % 2)] for i in range(200)]
    schema, decisions = infer_from_profile(
        profile_rows(["rownames", "individual", "mode", "y"], rows), "y")
    assert schema.key == "rownames"
    assert [d.name for d in schema.derived] == ["individual_entity"]
    assert decisions["individual"].why.startswith("named like an entity but repeated (50 ")
    for name in ("Subject", "household_id", "hhid"):
        assert infer_from_profile(profile_rows(["rownames", name, "mode", "y"], rows),
                                  "y")[0].derived[0].name == f"{name}_entity"
    # Under twenty values a noun is a category (a `user` flag of yes/no); distinct, no group.
    few = [[r[0], f"u{int(r[1]) % 19}", r[2], r[3]] for r in rows]
    unique = [[r[0], f"u{r[0]}", r[2], r[3]] for r in rows]
    for table in (few, unique):
        schema_n, decisions_n = infer_from_profile(
            profile_rows(["rownames", "user", "mode", "y"], table), "y")
        assert not schema_n.derived and "entity" not in decisions_n["user"].why
    # A name no list holds stays a number, as before.
    assert not infer_from_profile(profile_rows(["rownames", "traveller", "mode", "y"], rows),
                                  "y")[0].derived


def test_infer_small_int_label_is_classification():
    rows = [[str(i), str(i % 7), str(i % 3)] for i in range(100)]
    s = infer_schema(["x", "f", "y"], rows, label="y")
    assert s.task == "classification" and s.column("y").type == "string"


def test_a_few_integers_spread_with_gaps_are_a_count_not_classes():
    # AER's Affairs: how often, coded 0, 1, 2, 3, 7, 12. Classes would be 0..K-1 or 1..K.
    rows = [[str(i), str(i % 4), str([0, 1, 2, 3, 7, 12][i % 6])] for i in range(120)]
    s = infer_schema(["x", "f", "y"], rows, label="y")
    assert s.task == "regression" and s.column("y").type == "float"
    # Three runs missing or more: a count or measure however dense (Ecdat's Orange, freezing
    # days; AER's CPSSWEducation, school years). A jump or two to a special code (1..5, 9;
    # glass types 1, 2, 3, 5, 6, 7) is still classes.
    for values, task in (([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 19, 20, 22, 24, 32, 35],
                          "regression"),
                         ([6, 8, 9, 10, 11, 12, 13, 14, 16, 18], "regression"),
                         ([1, 2, 3, 4, 5, 9], "classification"),
                         ([1, 2, 3, 5, 6, 7], "classification"),
                         ([1, 2, 4, 5, 7, 8], "classification")):
        rows = [[str(i), str(i % 4), str(values[i % len(values)])] for i in range(180)]
        schema, decisions = infer_from_profile(profile_rows(["x", "f", "y"], rows), "y")
        assert schema.task == task, (values, decisions["y"].why)
        if values[-1] == 35:
            assert decisions["y"].why.startswith("18 integers spread over 0..35, not class ids")
    # Integers that start far from 0 are a measure (heights in inches, a difference -6..6);
    # codes from -1, 0 or 1 (a sign, a 1..5 scale, wine's quality 3..8) stay classes.
    for values, task in ((range(69, 89), "regression"), (range(-6, 7), "regression"),
                         ((-1, 0, 1), "classification"), (range(1, 6), "classification"),
                         (range(3, 9), "classification")):
        values = list(values)
        rows = [[str(i), str(i % 4), str(values[i % len(values)])] for i in range(120)]
        assert infer_schema(["x", "f", "y"], rows, label="y").task == task, values
        # as pandas writes an integer column with a missing value: 1.0, 2.0, ..., the same
        written = [[x, f, "" if i % 9 == 0 else f"{float(y)}"] for i, (x, f, y) in enumerate(rows)]
        assert infer_schema(["x", "f", "y"], written, label="y").task == task, values
    for pair in ([0, 5], [-1, 1], ["0.0", "1.0"]):  # two values: always classes
        binary = [[str(i), str(i % 4), str(pair[i % 2])] for i in range(120)]
        assert infer_schema(["x", "f", "y"], binary, label="y").task == "classification"


def test_task_flag_overrides_the_guess_and_refuses_text_for_regression():
    counts = profile_rows(["x", "f", "y"], [[str(i), str(i % 4), str(i % 5)] for i in range(100)])
    assert infer_from_profile(counts, "y")[0].task == "classification"
    schema, decisions = infer_from_profile(counts, "y", task="regression")
    assert schema.task == "regression" and schema.column("y").type == "float"
    assert decisions["y"].why == "--task regression"
    many = profile_rows(["x", "f", "y"], [[str(i), str(i % 4), str(i)] for i in range(100)])
    assert infer_from_profile(many, "y", task="classification")[0].task == "classification"
    words = profile_rows(["x", "f", "y"], [[str(i), str(i % 4), ["a", "b"][i % 2]] for i in range(10)])
    with pytest.raises(SchemaError, match="--task regression: label 'y' has no numeric value"):
        infer_from_profile(words, "y", task="regression")


def _prices(rows, text_every):
    prices = [("unknown" if i % text_every == 7 else f"{i * 0.37:.2f}") for i in range(rows)]
    # several batches, as the profile reads a file: the text count must carry across them
    batches = [pa.table({"f": [str(i % 4) for i in range(a, a + 1000)],
                         "y": prices[a:a + 1000]}) for a in range(0, rows, 1000)]
    return profile_tables(["f", "y"], batches)


def test_a_number_label_with_a_few_text_values_is_regression_and_those_rows_rejected():
    prof = _prices(5000, 1000)  # 5 "unknown" prices among 5,000
    assert prof.columns["y"].non_numeric == 5 and prof.columns["y"].stray_text
    schema, decisions = infer_from_profile(prof, "y")
    assert schema.task == "regression" and schema.column("y").type == "float"
    assert "5 value(s) are not numbers (e.g. ['unknown'])" in decisions["y"].why
    with pytest.raises(ValueError, match="'unknown' is not a decimal number"):
        coerce_value("unknown", schema.column("y").type)
    # Past 1% of text (2% here) the texts are counted no further, but most distinct values
    # are numbers: still a measure with bad rows (reported heights' `5' 4"`), not classes.
    many = _prices(5000, 50)
    assert many.columns["y"].mostly_text and not many.columns["y"].stray_text
    schema, decisions = infer_from_profile(many, "y")
    assert schema.task == "regression" and schema.column("y").type == "float"
    assert re.search(r"\d+\+ value\(s\) are not numbers .*rejected as unparsable_number",
                     decisions["y"].why)
    with pytest.raises(SchemaError, match=r"label 'y' has 4,9\d\d distinct values .* over 500 "
                                          r"classes; most of them are numbers: --task "
                                          r"regression"):
        infer_from_profile(many, "y", task="classification")
    numbers = profile_rows(["f", "y"], [[str(i % 4), f"{i * 0.5}"] for i in range(600)])
    with pytest.raises(SchemaError, match="600 distinct values .* most of them are numbers"):
        infer_from_profile(numbers, "y", task="classification")
    # Codes with leading zeros are classes, texts or not; so are a few numbers among words.
    codes = profile_rows(["f", "y"], [[str(i % 4), "n/k" if i % 20 == 0 else f"{i % 30:05d}"]
                                      for i in range(600)])
    assert infer_from_profile(codes, "y")[0].task == "classification"
    mixed = profile_rows(["f", "y"], [[str(i % 4), str(i % 10) if i % 3 else f"kind {i % 25}"]
                                      for i in range(600)])
    assert infer_from_profile(mixed, "y")[0].task == "classification"
    names = profile_rows(["f", "y"], [[str(i % 4), f"name {i}"] for i in range(600)])
    with pytest.raises(SchemaError, match="600 distinct values .* an identifier or free text"):
        infer_from_profile(names, "y", task="classification")
    # A label of dates (a user's likely slip: the date column named) is told so.
    days = profile_rows(["f", "y"], [[str(i % 4), f"{2020 + i // 365}-{i % 12 + 1:02d}-"
                                      f"{i % 28 + 1:02d}"] for i in range(600)])
    with pytest.raises(SchemaError, match=r"168 distinct values .* they are dates.* --task "
                                          r"classification to take each date as a class"):
        infer_from_profile(days, "y")
    assert infer_from_profile(days, "y", task="classification")[0].task == "classification"
    cohorts = profile_rows(["f", "y"], [[str(i % 4), f"2020-0{i % 3 + 1}-01"] for i in range(600)])
    assert infer_from_profile(cohorts, "y")[0].task == "classification"   # a few dates: classes


def test_infer_unknown_label_fails():
    with pytest.raises(SchemaError, match="label column 'nope'"):
        infer_schema(["a", "b"], [["1", "2"]], label="nope")


def test_taxi_spec_round_trips_through_json():
    s = Schema.load(TAXI_SPEC)
    again = Schema.loads(s.dumps(), "x.json")
    assert again == s
    assert s.derived[0].name == "trip_km"
    assert s.crosses[0].name == "cross_pickup_datetime_hour_x_pickup_datetime_weekday"
    assert s.categorical_outputs()[s.crosses[0].name] == 168


@pytest.mark.parametrize("x, field, value, before", [
    ({"type": "float", "decimal": ","}, "decimal", ",", "."),
    ({"type": "int", "grouping": ","}, "grouping", ",", ""),
    ({"type": "float", "unit": "%"}, "unit", "%", "")])
def test_a_number_form_round_trips_and_an_older_schema_reads_plain_numbers(x, field, value,
                                                                            before):
    spec = {"label": "y", "columns": [{"name": "x", **x}, {"name": "y", "type": "float"}]}
    schema = Schema.from_dict(spec)
    assert getattr(schema.column("x"), field) == value
    assert getattr(schema.column("y"), field) == before
    assert Schema.loads(schema.dumps(), "x.json") == schema
    assert field not in schema.to_dict()["columns"][1]  # a file of before reads the same


def test_a_grouping_or_a_unit_is_refused_where_no_number_could_hold_it():
    spec = {"label": "y", "columns": [{"name": "y", "type": "float"}]}
    for bad in ({"type": "string", "grouping": ","}, {"type": "float", "grouping": " "},
                {"type": "float", "decimal": ",", "grouping": ","},
                {"type": "float", "clock": True, "grouping": ","},
                {"type": "string", "unit": "%"}, {"type": "string", "unit": "kg"},
                {"type": "float", "unit": "e"}, {"type": "float", "unit": "5kg"},
                {"type": "float", "unit": "k g"}, {"type": "float", "unit": "kilometres"},
                {"type": "float", "unit": "$$"}, {"type": "float", "clock": True, "unit": "$"}):
        spec["columns"][1:] = [{"name": "x", **bad}]
        field = "grouping" if "grouping" in bad else "unit"
        with pytest.raises(SchemaError, match=f"column 'x': {field} .* must be"):
            Schema.from_dict(spec).validate()


def test_a_date_order_round_trips_and_an_older_schema_reads_iso_dates():
    spec = {"label": "y", "columns": [
        {"name": "d", "type": "string", "transform": "datetime", "date_order": "dmy",
         "default": "1.1.1970"}, {"name": "e", "type": "string", "transform": "datetime"},
        {"name": "y", "type": "float"}]}
    schema = Schema.from_dict(spec)
    assert schema.column("d").date_order == "dmy" and schema.column("e").date_order == "ymd"
    assert Schema.loads(schema.dumps(), "x.json") == schema
    assert "date_order" not in schema.to_dict()["columns"][1]  # a file of before reads the same

@pytest.mark.parametrize("spec, message", [
    ({"columns": [{"name": "a", "type": "float"}]}, "no 'label'"),
    ({"label": "a", "columns": [{"name": "a", "type": "double"}]}, "type 'double'"),
    ({"label": "a", "columns": [{"name": "a", "type": "float"},
                                {"name": "b", "type": "string", "transform": "zscore"}]},
     "needs a numeric column"),
    ({"label": "z", "columns": [{"name": "a", "type": "float"}]}, "label column 'z'"),
    ({"label": "a", "columns": [{"name": "a", "type": "float"},
                                {"name": "b", "type": "float", "transform": "zscore"},
                                {"name": "c", "type": "string", "transform": "hash"}],
      "crosses": [{"features": ["b", "c"]}]}, "'b' is not a categorical"),
    ({"label": "a", "columns": [{"name": "a", "type": "float"},
                                {"name": "d", "type": "string", "transform": "datetime",
                                 "parts": ["century"]}]}, "datetime parts"),
    ({"label": "a", "columns": [{"name": "a", "type": "float"},
                                {"name": "b", "type": "int", "default": "x"}]}, "default 'x'"),
    ({"label": "a", "columns": [{"name": "a", "type": "float"},
                                {"name": "d", "type": "string", "transform": "datetime",
                                 "date_order": "ydm"}]}, "date_order 'ydm' must be"),
    ({"label": "a", "columns": [{"name": "a", "type": "float"},
                                {"name": "d", "type": "string", "transform": "hash",
                                 "date_order": "mdy"}]}, "'mdy' / 'dmy' / 'ym' for a datetime column"),
    ({"label": "a", "columns": [{"name": "a", "type": "float"},
                                {"name": "d", "type": "string", "transform": "datetime",
                                 "date_order": "ym", "default": "1970-01-01"}]},
     "default '1970-01-01' is not a year and a month, no day"),
    ({"label": "a", "columns": [{"name": "a", "type": "float"},
                                {"name": "d", "type": "string", "transform": "datetime",
                                 "date_order": "mdy", "default": "1970-01-01"}]},
     "default '1970-01-01' is not M/D/YYYY"),
    ({"label": "a", "bogus": 1, "columns": [{"name": "a", "type": "float"}]}, "unknown spec keys"),
    ({"label": "a", "columns": [{"name": "a", "type": "float"}, {"name": "a", "type": "int"}]},
     "declared twice"),
    ({"label": "a", "columns": [{"name": "a", "type": "float"},
                                {"name": "b", "type": "int", "decimal": ","}]},
     "decimal ',' must be '.', or ',' for a float column"),
    ({"label": "a", "columns": [{"name": "a", "type": "float", "decimal": ";"}]},
     "decimal ';' must be"),
])
def test_bad_specs_are_rejected_with_the_reason(spec, message):
    with pytest.raises(SchemaError, match=message):
        Schema.from_dict(spec)


def test_yaml_spec_parse_error_names_the_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("label: [unclosed\n")
    with pytest.raises(SchemaError, match="cannot parse spec .*bad.yaml"):
        Schema.load(str(p))


def test_string_label_forces_classification():
    s = Schema(columns=(ColumnSpec("x", "float", "zscore"), ColumnSpec("y", "string")), label="y")
    assert s.task == "classification"
    with pytest.raises(SchemaError, match="must be classification"):
        Schema(columns=s.columns, label="y", task="regression")


@pytest.mark.parametrize("text, dtype, value", [
    ("3", "int", 3), ("3.0", "int", 3), ("-1.5", "float", -1.5), ("abc", "string", "abc")])
def test_coerce_value(text, dtype, value):
    assert coerce_value(text, dtype) == value


@pytest.mark.parametrize("text, dtype", [("3.5", "int"), ("x", "float"), ("nan", "float"),
                                         ("inf", "float")])
def test_coerce_value_rejects(text, dtype):
    with pytest.raises(ValueError):
        coerce_value(text, dtype)


def test_parse_csv_sample_handles_quotes():
    header, rows = parse_csv_sample('a,b\n1,"x, y"\n2,"multi\nline"\n')
    assert header == ["a", "b"] and rows == [["1", "x, y"], ["2", "multi\nline"]]
    with pytest.raises(SchemaError, match="empty"):
        parse_csv_sample("")


def test_a_cross_named_like_a_column_is_refused():
    """The names a user gives (columns, derived features, crosses) are refused when two make
    one transformed feature; the outputs a column makes beside its own step aside instead
    (test_a_column_named_like_another_columns_output_keeps_its_name)."""
    from preprocessing.contract.schema import ColumnSpec, CrossSpec, Schema, SchemaError
    with pytest.raises(SchemaError, match="column 'cross_a_x_b' and cross \\['a', 'b'\\] both "
                                          "make the transformed feature 'cross_a_x_b'"):
        Schema(columns=(ColumnSpec("a", "string", "vocabulary"),
                        ColumnSpec("b", "string", "vocabulary"),
                        ColumnSpec("cross_a_x_b", "float", "zscore"), ColumnSpec("y", "float")),
               label="y", task="regression", crosses=(CrossSpec(("a", "b")),))


def test_a_yaml_spec_with_aliases_is_refused_before_it_expands(tmp_path):
    import time
    bomb = ["columns: [{name: y, type: float}]", "label: y", 'a: &a ["lol","lol","lol","lol"]']
    for i in range(1, 12):  # each level 9x the last: 4 * 9**11 strings if expanded
        bomb.append(f"{chr(97 + i)}: &{chr(97 + i)} [{', '.join(['*' + chr(96 + i)] * 9)}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(bomb) + "\n")
    t0 = time.time()
    with pytest.raises(SchemaError, match="aliases"):
        Schema.load(str(path))
    assert time.time() - t0 < 5
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 << 20))
    with pytest.raises(SchemaError, match="over 1 MiB"):
        Schema.load(str(big))


def _marked_rows(n=600):
    """priors: None (64%) or 1..3; grade: A/B with NA in 30%; age: numbers, NA in 5%;
    outcome: None / Mild / Severe."""
    rows = []
    for i in range(n):
        priors = "None" if i % 25 < 16 else str(1 + i % 3)
        grade = "NA" if i % 10 < 3 else "AB"[i % 2]
        age = "NA" if i % 20 == 0 else str(18 + i % 50)
        rows.append([priors, grade, age, ("None", "Mild", "Severe")[i % 3], str(i % 7)])
    return profile_rows(["priors", "grade", "age", "outcome", "y"], rows)


def test_a_missing_mark_that_is_one_of_a_few_categories_stays_a_category():
    prof = _marked_rows()
    assert prof.columns["priors"].category_marks() == ("None",)
    schema, decisions = infer_from_profile(prof, "y", task="regression")
    priors = schema.column("priors")
    assert (priors.type, priors.transform) == ("string", "vocabulary")
    assert "None" not in priors.missing and "NA" in priors.missing
    assert "'None' in 64% of rows, beside 3 other value(s): a category" in \
        decisions["priors"].why
    assert "'NA' in 30% of rows" in decisions["grade"].why
    # A token at a small share of a column of many numbers is still a missing value.
    age = schema.column("age")
    assert age.type == "float" and "NA" in age.missing and age.default == "mean"
    assert prof.columns["age"].category_marks() == ()


def test_a_class_written_as_a_missing_mark_keeps_its_rows():
    schema, decisions = infer_from_profile(_marked_rows(), "outcome")
    outcome = schema.column("outcome")
    assert schema.task == "classification" and "None" not in outcome.missing
    assert "3 classes" in decisions["outcome"].why
    # A text label with a rare NA: those rows still have no label.
    rows = [["x", "NA" if i == 0 else "ab"[i % 2]] for i in range(100)]
    rare = infer_from_profile(profile_rows(["f", "y"], rows), "y")[0]
    assert "NA" in rare.column("y").missing


def _colliding_schema():
    """A column beside the names of the outputs another column makes (openintro's hfi has
    `pf_ss_women` with missing values beside `pf_ss_women_missing`)."""
    return Schema(columns=(
        ColumnSpec("v", "float", "numeric", default="mean", num_buckets=4),
        ColumnSpec("v_missing", "float", "zscore"),
        ColumnSpec("v_bucket", "string", "vocabulary"),
        ColumnSpec("t", "string", "datetime", parts=("hour", "weekday")),
        ColumnSpec("t_hour", "float", "numeric", num_buckets=4),
        ColumnSpec("y", "float")), label="y")


def test_a_column_named_like_another_columns_output_keeps_its_name():
    schema = _colliding_schema()
    origins = dict(schema.transformed_origins())
    assert len(origins) == len(schema.transformed_origins())    # every output its own name
    # The user's columns keep their names; the outputs made beside them take a `_` more.
    for name in ("v_missing", "v_bucket", "t_hour"):
        assert origins[name] == f"column '{name}'"
    assert origins["v_missing_"] == "column 'v' (missing flag)"
    assert origins["v_bucket_"] == "column 'v' (quantile bucket)"
    assert origins["t_hour_"] == "column 't' (hour)"
    assert origins["t_weekday"] == "column 't' (weekday)"
    assert origins["t_hour_bucket"] == "column 't_hour' (quantile bucket)"
    assert schema.output_name("v", "missing") == "v_missing_"
    assert schema.output_name("t_hour", "bucket") == "t_hour_bucket"
    # The categories the spec knows are those same names.
    cats = schema.categorical_outputs()
    assert cats["v_bucket_"] == 4 and cats["v_missing_"] == 2 and cats["t_hour_"] == 24
    assert cats["v_bucket"] is None      # the user's vocabulary column
    # Names the user gave twice are still refused, in one line.
    with pytest.raises(SchemaError, match="derived 'v_missing' clashes with a column name"):
        dataclasses.replace(schema, derived=(
            DerivedSpec("v_missing", "haversine_km", ("v", "v", "v", "v")),))
