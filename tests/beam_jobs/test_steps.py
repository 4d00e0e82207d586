"""The jobs' main PTransforms and DoFns alone, under Beam's TestPipeline + assert_that (as
Beam's own examples test theirs), and a job built by `build_pipeline` from a config the test
constructs itself, with no launch-time I/O."""
import json
import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.ml.inference.base import PredictionResult
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_jobs import preprocess
from beam_jobs import preprocess_steps as pp
from beam_jobs.args import BatchPredictArgs, PreprocessArgs
from beam_jobs.shared.local_runner import LocalRunner
from inference.batch import EvalMetrics, FormatPredictions, ParseInputs
from inference.model.model_handler import RowBatch
from inference.outputs.predictions import PredictionBlock
from preprocessing.accounting import counting
from preprocessing.accounting.rejects import Reject
from preprocessing.contract.schema import ColumnSpec, Schema
from preprocessing.features.transform import make_preprocessing_fn
from preprocessing.files.reading import Chunk

SCHEMA = Schema(columns=(ColumnSpec("id", "string"), ColumnSpec("x", "float", "zscore"),
                         ColumnSpec("y", "float")),
                label="y", key="id", task="regression")
HEADER = ("id", "x", "y")
RECORDS = [(2, "a,1.5,3"), (3, "b,oops,4"), (4, "c,2.5,5"), (5, "d,,6")]


def _pipeline():
    return BeamTestPipeline(runner=LocalRunner())


def test_parse_and_split_gives_every_row_one_split_or_one_dead_letter():
    with _pipeline() as p:
        out = (p | beam.Create([Chunk("in.csv", "csv", HEADER, RECORDS)])
               | beam.ParDo(pp.ParseAndSplit(SCHEMA, (1.0, 0.0, 0.0))).with_outputs(
                   "rejects", counting.COUNTS, "train", "eval", "test"))
        # tf.transform's raw RecordBatch: one list per value, strings as bytes
        ids = out.train | beam.FlatMap(lambda rb: [v[0].decode() for v in
                                                   rb.column("id").to_pylist()])
        xs = out.train | beam.FlatMap(lambda rb: [v[0] for v in rb.column("x").to_pylist()])
        reasons = out.rejects | beam.Map(lambda r: (json.loads(r)["line"],
                                                    json.loads(r)["reason"]))
        assert_that(ids, equal_to(["a", "c"]), label="train_ids")
        assert_that(xs, equal_to([1.5, 2.5]), label="train_values")
        assert_that(reasons, equal_to([(3, "unparsable_number"), (5, "missing_value")]),
                    label="dead_letters")
        assert_that(out.eval, equal_to([]), label="no_eval")


def test_many_small_chunks_become_few_batches_with_every_row():
    """One-row files: their rows are gathered into batches (tf.transform pays per batch),
    none lost or doubled, the bad ones dead-lettered."""
    from preprocessing.files.csv_blocks import CsvBlock
    chunks = [Chunk(f"f{i}.csv", "csv", HEADER,
                    CsvBlock(2, f"r{i},{'oops' if i % 50 == 0 else i},{i}\n".encode()))
              for i in range(600)]
    with _pipeline() as p:
        out = (p | beam.Create(chunks, reshuffle=False)
               | beam.ParDo(pp.ParseAndSplit(SCHEMA, (0.5, 0.5, 0.0))).with_outputs(
                   "rejects", counting.COUNTS, "train", "eval", "test"))
        batches = (out.train, out.eval) | beam.Flatten()
        ids = batches | beam.FlatMap(lambda rb: [v[0].decode() for v in
                                                 rb.column("id").to_pylist()])
        sizes = batches | beam.Map(lambda rb: rb.num_rows)
        assert_that(ids, equal_to([f"r{i}" for i in range(600) if i % 50]), label="ids")
        assert_that(sizes | "NBatches" >> beam.combiners.Count.Globally(),
                    lambda n: _check(n[0] <= 8, f"{n[0]} batches"), label="few_batches")
        assert_that(out.rejects | "NRejects" >> beam.combiners.Count.Globally(), equal_to([12]),
                    label="rejects")


def test_a_number_key_is_split_by_its_text_in_rows_and_blocks_alike():
    """An int key column (declared in a spec) is hashed as its text, whether the rows come
    record by record or in CSV blocks (the column-wise parser)."""
    from preprocessing.contract.split import boundaries, split_index
    from preprocessing.files.csv_blocks import CsvBlock
    schema = Schema(columns=(ColumnSpec("id", "int"), ColumnSpec("x", "float", "zscore"),
                             ColumnSpec("y", "float")), label="y", key="id", task="regression")
    lines = [f"{i},{i % 7}.5,{i % 3}" for i in range(400)]
    rows = Chunk("in.csv", "csv", HEADER, [(i + 2, line) for i, line in enumerate(lines)])
    block = Chunk("in.csv", "csv", HEADER, CsvBlock(2, ("\n".join(lines) + "\n").encode()))
    fractions = (0.5, 0.5, 0.0)
    expected = {n: sorted(i for i in range(400)
                          if split_index(str(i), boundaries(fractions)) == s)
                for s, n in enumerate(("train", "eval"))}
    assert len(expected["eval"]) > 100
    for name, chunk in (("rows", rows), ("blocks", block)):
        with _pipeline() as p:
            out = (p | name >> beam.Create([chunk])
                   | beam.ParDo(pp.ParseAndSplit(schema, fractions)).with_outputs(
                       "rejects", counting.COUNTS, "train", "eval", "test"))
            for split in ("train", "eval"):
                ids = out[split] | f"{split}Ids" >> beam.FlatMap(
                    lambda rb: [v[0] for v in rb.column("id").to_pylist()])
                assert_that(ids, equal_to(expected[split]), label=f"{name}_{split}")


def _check(ok, what):
    assert ok, what


def test_parse_inputs_types_csv_and_json_records_and_rejects_the_rest():
    schema = Schema(columns=SCHEMA.columns[:2] + (ColumnSpec("y", "float"),), label="y",
                    key="id", task="regression")
    json_records = [(1, json.dumps({"id": "e", "x": 7.0})), (2, "{not json")]
    with _pipeline() as p:
        out = (p | beam.Create([Chunk("in.csv", "csv", HEADER, RECORDS[:2]),
                                Chunk("in.jsonl", "json", None, json_records)])
               | beam.ParDo(ParseInputs("test", schema, "id", [])).with_outputs("rejects", counting.COUNTS,
                                                                        main="rows"))
        keys = out.rows | beam.FlatMap(lambda b: list(b.keys))
        xs = out.rows | beam.FlatMap(lambda b: [float(v) for v in b.column("x")])
        reasons = out.rejects | beam.Map(lambda r: (json.loads(r)["source"],
                                                    json.loads(r)["reason"]))
        assert_that(keys, equal_to(["a", "e"]), label="keys")
        assert_that(xs, equal_to([1.5, 7.0]), label="values")
        assert_that(reasons, equal_to([("in.csv", "unparsable_number"),
                                       ("in.jsonl", "invalid_json")]), label="dead_letters")


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
        reasons = out.rejects | beam.Map(lambda r: (json.loads(r)["line"],
                                                    json.loads(r)["reason"]))
        assert_that(rows, equal_to([("a", 10.0, 1.0, "v1"), ("c", 30.0, 3.0, "v1")]),
                    label="predictions")
        assert_that(reasons, equal_to([(3, "model_rejected")]), label="dead_letters")
        assert_that(out[counting.COUNTS], equal_to([("rows_predicted", 2)]), label="tally")


@pytest.mark.slow
def test_preprocess_builds_from_a_config_the_test_constructs(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("id,x,y\n" + "".join(f"r{i},{i * 0.5},{i % 7}\n" for i in range(200))
                   + "bad,oops,1\n")
    out = str(tmp_path / "out")
    args = PreprocessArgs(input=str(src), output=out)  # every other flag at its default
    cfg = preprocess.PreprocessConfig(
        args=args, schema=SCHEMA, preprocessing_fn=make_preprocessing_fn(SCHEMA),
        patterns=(str(src),), staging=os.path.join(out, "_staging-0-test"),
        tft_temp_dir=str(tmp_path / "tft"))
    p = _pipeline()
    preprocess.build_pipeline(p, cfg)
    p.run().wait_until_finish()
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["rows_read"] == 201
    assert sum(summary["splits"].values()) == 200
    assert summary["rejected"]["by_reason"] == {"unparsable_number": 1}
    assert os.path.exists(os.path.join(out, "_SUCCESS"))
    assert not os.path.exists(cfg.staging)


def test_batch_predict_builds_from_a_config_the_test_constructs(trained, taxi_csv, tmp_path):
    from beam_jobs import batch_predict
    from inference.model import versions
    _, _, metrics = trained
    model_path = versions.resolve_model_dir(metrics["export_dir"])
    schema = versions.load_raw_schema(model_path)
    out = str(tmp_path / "pred")
    args = BatchPredictArgs(input=taxi_csv[0], output=out, model_dir=model_path,
                              rows_per_chunk=500)
    cfg = batch_predict.BatchPredictConfig(
        args=args, schema=schema, model_path=model_path,
        version=versions.model_version(model_path), patterns=(taxi_csv[0],),
        staging=os.path.join(out, "_staging-0-test"), key=schema.key)
    p = _pipeline()
    batch_predict.build_pipeline(p, cfg)
    p.run().wait_until_finish()
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["reconciled"] and summary["rows_read"] == 3000
    assert summary["rows_predicted"] + summary["rejected"]["total"] == 3000
    assert summary["rows_predicted"] > 2800
    assert os.path.exists(os.path.join(out, "_SUCCESS"))


@pytest.mark.slow
def test_a_job_runs_on_the_pipeline_a_test_hands_it(tmp_path):
    """run(argv, test_pipeline=...) as Beam's examples are tested: the job's graph goes on
    the given pipeline, which the job runs and whose summary it returns."""
    src = tmp_path / "in.csv"
    src.write_text("id,x,y\n" + "".join(f"r{i},{i * 0.5},{i % 7}\n" for i in range(120)))
    spec = tmp_path / "spec.json"
    spec.write_text(SCHEMA.dumps())
    p = _pipeline()
    summary = preprocess.run(["--input", str(src), "--output", str(tmp_path / "out"),
                              "--schema_spec", str(spec)], save_main_session=False,
                             test_pipeline=p)
    labels = {t.full_label for t in p.transforms_stack[0].parts}
    assert "ReadCsv" in labels and "Finalize" in labels
    assert summary["rows_read"] == 120 and sum(summary["splits"].values()) == 120


def test_folders_that_are_not_versions_are_ignored_with_a_warning(tmp_path, caplog):
    from inference.model import versions
    from preprocessing.contract.schema import RAW_SCHEMA_ASSET
    for name in ("7", "12", "\u00b2", "tmp"):
        for rel in ("saved_model.pb", "variables/variables.index", RAW_SCHEMA_ASSET):
            (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / rel).write_text("x")
    with caplog.at_level("WARNING"):
        found = versions.list_versions(str(tmp_path))
    assert [os.path.basename(v) for v in found] == ["7", "12"]
    assert "\u00b2" in caplog.text and "digits" in caplog.text


def test_a_symlinked_newest_version_is_followed_and_a_dangling_one_reported(tmp_path, caplog):
    from inference.model import versions
    from preprocessing.contract.schema import RAW_SCHEMA_ASSET
    for name in ("base/3", "elsewhere/v9"):
        for rel in ("saved_model.pb", "variables/variables.index", RAW_SCHEMA_ASSET):
            (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / rel).write_text("x")
    os.symlink(tmp_path / "elsewhere" / "v9", tmp_path / "base" / "9")
    os.symlink(tmp_path / "gone", tmp_path / "base" / "12")
    with caplog.at_level("WARNING"):
        newest = versions.resolve_model_dir(str(tmp_path / "base"))
    assert newest == str(tmp_path / "base" / "9")
    assert "base/12" in caplog.text and "does not exist" in caplog.text


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
