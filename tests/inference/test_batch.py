"""inference/batch.py under Beam's TestPipeline + assert_that: ParseInputs,
FormatPredictions and EvalMetrics alone, and the reading composite (ReadInputs): CSV
blocks against record by record, one-row files, JSON lines objects and instances, and what
is rejected why. No model is loaded here: the rows a model would score are compared;
tests/beam_jobs/test_batch_predict.py runs the whole job."""
import collections
import gzip
import json

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.ml.inference.base import PredictionResult
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_jobs.shared.local_runner import LocalRunner
from inference.batch import EvalMetrics, FormatPredictions, ParseInputs, ReadInputs
from inference.model.model_handler import RowBatch
from inference.outputs.predictions import PredictionBlock
from preprocessing import TAXI_SPEC
from preprocessing.accounting import counting
from preprocessing.accounting.counting import Tallies
from preprocessing.accounting.rejects import Reject
from preprocessing.contract.schema import ColumnSpec, Schema
from preprocessing.files.reading import Chunk
from tools.datagen import write_csv

JOB = "batch_predict"
HEADER = ("id", "x", "y")


def _pipeline():
    return BeamTestPipeline(runner=LocalRunner())


@pytest.fixture(scope="module")
def schema():
    return Schema.load(TAXI_SPEC)  # what preprocess writes as raw_schema.json for the taxi spec


@pytest.fixture(scope="module")
def dirty_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("dirty") / "taxi.csv"
    write_csv(str(path), 400, seed=22, dirty_fraction=0.05)
    return path


def _plain(v):
    if isinstance(v, pa.Scalar):
        v = v.as_py()
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    if isinstance(v, float) and v != v:
        return "nan"
    return v


def _rows(batch):
    """A RowBatch's rows as (key, {column: value} as JSON, passthrough dict as JSON)."""
    columns = [c.tolist() if isinstance(c, np.ndarray) else list(c) for c in batch.columns]
    for i, key in enumerate(batch.keys):
        values = {n: _plain(col[i]) for n, col in zip(batch.names, columns)}
        extra = batch.extras[i] if batch.extras is not None else None
        yield _plain(key), json.dumps(values, sort_keys=True), json.dumps(extra, sort_keys=True)


def _outcome(inputs, label):
    """One element: {"rows": [...], "rejects": [...], "totals": {...}} for a ReadInputs."""
    rows = inputs.batches | f"{label}Rows" >> beam.FlatMap(_rows)
    n_rows = inputs.batches | f"{label}N" >> beam.Map(lambda b: ("rows", len(b)))
    totals = ((inputs.counts, n_rows) | f"{label}Counts" >> beam.Flatten(),
              inputs.rejects) | f"{label}Totals" >> Tallies()
    dead = inputs.rejects | f"{label}Dead" >> beam.Map(
        lambda r: tuple(r.get(k) for k in ("source", "line", "reason", "raw")))
    parts = [(name, pc | f"{label}List{name}" >> beam.combiners.ToList())
             for name, pc in (("rows", rows), ("rejects", dead))]
    parts.append(("totals", totals))
    keyed = [pc | f"{label}Key{name}" >> beam.Map(lambda v, n=name: (n, v)) for name, pc in parts]
    return (tuple(keyed) | f"{label}All" >> beam.Flatten()
            | f"{label}One" >> beam.combiners.ToDict()
            | f"{label}Tag" >> beam.Map(lambda d, lb=label: (lb, d)))


def _read(p, schema, pattern, label, **kw):
    return _outcome(p | label >> ReadInputs(JOB, schema, [str(pattern)], schema.key, **kw),
                    label)


def _check(got, expect):
    outcomes = dict(got)
    for o in outcomes.values():  # every record is a row or a dead letter
        t = o["totals"]
        assert t["rows_read"] == t.get("rows", 0) + len(o["rejects"]), t
    expect(outcomes)


def _run(build, expect):
    with _pipeline() as p:
        assert_that(tuple(build(p)) | beam.Flatten(), lambda got: _check(got, expect))


def test_csv_blocks_give_the_rows_and_dead_letters_record_by_record_reading_gives(
        schema, dirty_csv, tmp_path):
    """Blocks of a few hundred bytes (cut inside quoted fields spanning lines, around empty
    lines, CRLF endings and bad UTF-8; under csv_blocks.SMALL_BLOCK_BYTES, so read record by
    record) and of 5 kB (parsed column-wise by Arrow where it can be exact) give the same
    rows, keys and dead letters as --csv_block_mb 0; so does a .gz file."""
    lines = open(dirty_csv, newline="").read().split("\n")
    body = lines[1:400]
    for i in range(5, 80, 2):  # keys spanning two lines: some block cuts fall inside them
        body[i] = '"' + body[i].replace("-", "-\n", 1).replace(",", '",', 1)
    body[40] = ""
    body[70] = body[70] + "\r"
    raw = ("\n".join([lines[0]] + body) + "\n").encode("utf-8")
    raw = raw.replace(body[90].encode("utf-8"), body[90].encode("utf-8")[:-2] + b"\xff\xfe", 1)
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.csv").write_bytes(raw)
    with gzip.open(src / "b.csv.gz", "wb") as f:
        f.write(raw)

    def expect(o):
        rows = o["rows"]
        assert rows["totals"]["rows_read"] == 2 * (len(body) - 1)
        # keys spanning lines that are no dirty row (2 files)
        assert sum("\n" in k for k, _, _ in rows["rows"]) > len(range(5, 80, 2))
        assert {"bad_encoding", "unparsable_number"} <= {r[2] for r in o["blocks"]["rejects"]}
        for blocks in (o["small_blocks"], o["blocks"]):
            assert blocks["totals"]["rows_read"] == rows["totals"]["rows_read"]
            assert collections.Counter(blocks["rows"]) == collections.Counter(rows["rows"])
            assert sorted(blocks["rejects"]) == sorted(rows["rejects"])

    _run(lambda p: [_read(p, schema, src / "*", "rows"),
                    _read(p, schema, src / "*", "small_blocks", block_bytes=300),
                    _read(p, schema, src / "*", "blocks", block_bytes=5000)], expect)


def test_a_file_of_another_delimiter_gives_the_rows_and_dead_letters_of_its_comma_copy(
        schema, dirty_csv, tmp_path):
    """batch_predict --delimiter ';' (a European spreadsheet's CSV): the rows, keys and dead
    letters of the same file written with commas, block_bytes given or not (blocks are
    parsed column-wise for commas only)."""
    import csv
    with open(dirty_csv, newline="") as f:
        records = list(csv.reader(f))
    semi = tmp_path / "semi.csv"
    with open(semi, "w", newline="") as f:
        csv.writer(f, delimiter=";").writerows(records)

    def expect(o):
        commas = o["commas"]
        assert commas["totals"]["rows_read"] == len(records) - 1 and commas["rejects"]
        for name in ("semi", "semi_blocks"):
            assert collections.Counter(o[name]["rows"]) == collections.Counter(commas["rows"])
            assert [r[2] for r in sorted(o[name]["rejects"])] == \
                [r[2] for r in sorted(commas["rejects"])]

    _run(lambda p: [_read(p, schema, dirty_csv, "commas"),
                    _read(p, schema, semi, "semi", delimiter=";"),
                    _read(p, schema, semi, "semi_blocks", delimiter=";", block_bytes=5000)],
         expect)


def test_a_stray_quote_costs_that_row_alone_in_blocks_and_rows_alike(schema, tmp_path):
    path = tmp_path / "clean.csv"
    write_csv(str(path), 300, seed=21, dirty_fraction=0.0)
    lines = open(path).read().split("\n")
    fields = lines[5].split(",")
    fields[1] = '"' + fields[1]  # an opening quote that never closes
    lines[5] = ",".join(fields)
    bad = tmp_path / "quote.csv"
    bad.write_text("\n".join(lines))

    def expect(o):
        for mode in ("rows", "blocks"):
            assert o[mode]["totals"]["rows_read"] == 300 and len(o[mode]["rows"]) == 299
            assert len(o[mode]["rejects"]) == 1
        assert sorted(k for k, _, _ in o["rows"]["rows"]) == sorted(
            k for k, _, _ in o["blocks"]["rows"])

    _run(lambda p: [_read(p, schema, bad, "rows"),
                    _read(p, schema, bad, "blocks", block_bytes=2 << 20)], expect)


def test_one_row_files_give_the_rows_one_file_gives(schema, dirty_csv, tmp_path):
    """400 one-row files (each a small block, read record by record) against the same rows
    in one file: the same rows, values and dead letters."""
    lines = open(dirty_csv).read().splitlines()
    header, rows = lines[0], lines[1:401]
    many = tmp_path / "many"
    many.mkdir()
    for i, row in enumerate(rows):
        (many / f"part-{i:04d}.csv").write_text(f"{header}\n{row}\n")
    (tmp_path / "one.csv").write_text("\n".join([header] + rows) + "\n")

    def expect(o):
        one, many_ = o["one"], o["many"]
        assert one["totals"]["rows_read"] == many_["totals"]["rows_read"] == 400
        assert one["rejects"], "the sample should hold some dirty rows"
        assert sorted(r[2] for r in one["rejects"]) == sorted(r[2] for r in many_["rejects"])
        assert collections.Counter(one["rows"]) == collections.Counter(many_["rows"])

    _run(lambda p: [_read(p, schema, tmp_path / "one.csv", "one", block_bytes=2 << 20),
                    _read(p, schema, many / "*.csv", "many", block_bytes=2 << 20)], expect)


def test_json_lines_objects_instances_and_bad_lines(schema, tmp_path):
    good = {"pickup_datetime": "2025-06-02 08:15:00", "pickup_longitude": -73.95,
            "pickup_latitude": 40.75, "dropoff_longitude": -73.9, "dropoff_latitude": 40.8,
            "passenger_count": 1, "payment_type": "Cash", "company": "Sun Taxi"}
    lines = [json.dumps(dict(good, key="a1", tip="x")),          # 1: keyed object
             json.dumps({**good}),                                # 2: no key -> file:line
             json.dumps({"instances": [good, dict(good, key="i2"), 7]}),  # 3: 2 rows + 1 bad
             "{not json",                                          # 4
             json.dumps(dict(good, pickup_latitude="north")),      # 5
             json.dumps({"instances": []})]                        # 6
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")

    def expect(o):
        got = o["json"]
        rows = {k: (json.loads(v), json.loads(x)) for k, v, x in got["rows"]}
        assert set(rows) == {"a1", "in.jsonl:2", "in.jsonl:3#0", "i2"}
        assert rows["a1"][1] == {"tip": "x"} and rows["i2"][1] == {}
        # the same values whether a row comes alone or in "instances"
        assert rows["in.jsonl:2"][0] == rows["in.jsonl:3#0"][0]
        assert got["totals"]["rows_read"] == 8
        assert collections.Counter(r[2] for r in got["rejects"]) == {"invalid_json": 3,
                                                                     "unparsable_number": 1}
        assert sorted(str(r[1]) for r in got["rejects"]) == ["3#2", "4", "5", "6"]

    _run(lambda p: [_read(p, schema, src, "json", passthrough=("tip",))], expect)


def test_parse_inputs_types_csv_and_json_records_and_rejects_the_rest():
    schema = Schema(columns=(ColumnSpec("id", "string"), ColumnSpec("x", "float", "zscore"),
                             ColumnSpec("y", "float")), label="y", key="id", task="regression")
    json_records = [(1, json.dumps({"id": "e", "x": 7.0})), (2, "{not json")]
    with _pipeline() as p:
        out = (p | beam.Create([Chunk("in.csv", "csv", HEADER, [(2, "a,1.5,3"), (3, "b,oops,4")]),
                                Chunk("in.jsonl", "json", None, json_records)])
               | beam.ParDo(ParseInputs("test", schema, "id", [])).with_outputs("rejects", counting.COUNTS,
                                                                        main="rows"))
        keys = out.rows | beam.FlatMap(lambda b: list(b.keys))
        xs = out.rows | beam.FlatMap(lambda b: [float(v) for v in b.column("x")])
        reasons = out.rejects | beam.Map(lambda r: (r.source, r.reason))
        assert_that(keys, equal_to(["a", "e"]), label="keys")
        assert_that(xs, equal_to([1.5, 7.0]), label="values")
        assert_that(reasons, equal_to([("in.csv", "unparsable_number"),
                                       ("in.jsonl", "invalid_json")]), label="dead_letters")


def test_what_a_csv_header_lacks_is_said_in_one_line_before_any_row():
    """batch_predict's launch check (rows.csv_header_problem): the model's columns (one with
    a default too), then the passthrough and explicit key or label columns asked for."""
    from inference.inputs.rows import csv_header_problem
    schema = Schema(columns=(ColumnSpec("id", "string"), ColumnSpec("x", "float", "zscore",
                                                                   default="mean"),
                             ColumnSpec("town", "string", "vocabulary", default=""),
                             ColumnSpec("y", "float")), label="y", key="id", task="regression")
    assert csv_header_problem(schema, ["x", "town"]) == ""  # no key, no label: served
    assert csv_header_problem(schema, ["id", "X", "town", "y"]) == (
        "lacks column(s) the model reads 'x' (the header has 'X' for 'x': names must match "
        "exactly)")
    assert csv_header_problem(schema, ["x", "town"], ["tip"], ["id", None]) == (
        "lacks column(s) asked for 'tip', 'id'")
    both = csv_header_problem(schema, ["x;town;tip"], ["tip"])
    assert both.startswith("lacks column(s) the model reads or asked for 'x', 'town', 'tip'")
    assert both.endswith("is the file ';'-delimited? add --delimiter ';'")


def test_a_json_object_may_leave_a_key_out_but_not_misspell_it():
    """A key left out of an object (a feature of a tf.Example) reads as its column's
    default; one written in another case (`{"X": 2}` for `x`) is a `missing_column` dead
    letter naming it, not a default."""
    from inference.inputs.rows import ServingParser
    schema = Schema(columns=(ColumnSpec("x", "float", "zscore", default="mean"),
                             ColumnSpec("town", "string", "vocabulary", default=""),
                             ColumnSpec("y", "float")), label="y", task="regression")
    parser = ServingParser(schema)
    values, _ = parser.parse_object({"town": "a"})
    assert values[1] == "a" and values[0] != values[0]  # x's default: the mean, NaN here
    assert parser.parse_object({"x": 2, "town": "a", "Y": 3})[0][:2] == (2.0, "a")
    with pytest.raises(Reject) as e:
        parser.parse_object({"X": 2, "town": "a"})
    assert e.value.reason == "missing_column"
    assert e.value.detail == ("the object lacks key(s) ['x'] (it has 'X' for 'x': names must "
                              "match exactly)")
    import tensorflow as tf

    def example(**feats):
        return tf.train.Example(features=tf.train.Features(feature={
            k: tf.train.Feature(bytes_list=tf.train.BytesList(value=[str(v).encode()]))
            for k, v in feats.items()})).SerializeToString()
    assert parser.parse_example(example(town="a"))[0][1] == "a"  # x left out: its default
    with pytest.raises(Reject) as e:
        parser.parse_example(example(X=2, town="a"))
    assert e.value.reason == "missing_column" and e.value.detail == (
        "the tf.Example lacks feature(s) ['x'] (it has 'X' for 'x': names must match exactly)")


def test_format_predictions_keeps_keys_and_labels_and_dead_letters_model_rejections():
    batch = RowBatch(names=("id", "y"), columns=[["a", "b", "c"], np.array([1.0, 2.0, 3.0])],
                     keys=["a", "b", "c"], extras=None, path="in.csv",
                     sources=[(2, "a,1"), (3, "b,2"), (4, "c,3")])
    result = PredictionBlock(None, {"prediction": np.array([10.0, 30.0])}, "v1", index=[0, 2],
                             rejections=[(1, Reject("model_rejected", "bad input"))])
    with _pipeline() as p:
        out = (p | beam.Create([PredictionResult(batch, result, "v1")])
               | beam.ParDo(FormatPredictions("test", "y")).with_outputs("rejects", counting.COUNTS,
                                                                 main="blocks"))
        rows = out.blocks | beam.FlatMap(
            lambda b: [(k, float(p), lab, b.version) for k, p, lab in
                       zip(b.keys, b.outputs["prediction"], b.labels)])
        reasons = out.rejects | beam.Map(lambda r: (r.line, r.reason))
        assert_that(rows, equal_to([("a", 10.0, 1.0, "v1"), ("c", 30.0, 3.0, "v1")]),
                    label="predictions")
        assert_that(reasons, equal_to([(3, "model_rejected")]), label="dead_letters")
        assert_that(out[counting.COUNTS], equal_to([("rows_predicted", 2)]), label="tally")


def test_batch_metrics_name_the_rows_whose_label_lies_outside_the_train_range():
    """A label past anything training saw is out of reach of a model bounded by its train
    labels (ISLR's College: one row, 95% of the squared error over the whole file)."""
    def block(preds, labels):
        return PredictionBlock([f"k{i}" for i in range(len(preds))],
                               {"predictions": np.array(preds, np.float32)}, "1", labels=labels)
    blocks = [block([10, 20, 30], [10, 20, 300]), block([15], [18])]
    for label_range in ((0.0, 100.0), None):
        with _pipeline() as p:
            got = (p | beam.Create(blocks)
                   | beam.CombineGlobally(EvalMetrics("regression", label_range)))

            def check(out, label_range=label_range):
                (m,) = out
                assert m["examples"] == 4
                assert m["rmse"] == pytest.approx(np.sqrt((270 ** 2 + 3 ** 2) / 4))
                if label_range is None:
                    assert "labels_outside_train_range" not in m
                    return
                outside = m["labels_outside_train_range"]
                assert outside["examples"] == 1 and outside["train_range"] == [0.0, 100.0]
                assert outside["share_of_squared_error"] == pytest.approx(270 ** 2 / (270 ** 2 + 9))
                assert outside["rmse_of_the_others"] == pytest.approx(np.sqrt(9 / 3))
            assert_that(got, check)
