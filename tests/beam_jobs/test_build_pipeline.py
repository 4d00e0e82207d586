"""A job built by `build_pipeline` from a config the test constructs itself, with no
launch-time I/O, and a job run on the pipeline a test hands it (as Beam's own examples are
tested). The jobs' PTransforms and DoFns alone are tested beside their modules
(test_preprocess_steps.py, tests/inference/test_batch.py, ...)."""
import json
import os

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_jobs import preprocess
from beam_jobs.preprocess_config import PreprocessSink, PreprocessSource
from beam_jobs.shared.local_runner import LocalRunner
from preprocessing.contract.schema import ColumnSpec, Schema
from preprocessing.features.transform import make_preprocessing_fn

SCHEMA = Schema(columns=(ColumnSpec("id", "string"), ColumnSpec("x", "float", "zscore"),
                         ColumnSpec("y", "float")),
                label="y", key="id", task="regression")


def _pipeline():
    return BeamTestPipeline(runner=LocalRunner())


def _agree(summary, figure, counts, label: str):
    """One bool: whether figure(the run's summary) equals the sum of `counts`, taken from the
    job's typed outputs."""
    summed = counts | f"Sum{label}" >> beam.CombineGlobally(sum)
    return summary | f"Figure{label}" >> beam.Map(
        lambda s, n: figure(s) == n, beam.pvalue.AsSingleton(summed))


def _element_types(p, prefix: str) -> set:
    """The element types of the main outputs of `p`'s steps whose labels start `prefix`."""
    from apache_beam.pipeline import PipelineVisitor
    found = set()

    class Visit(PipelineVisitor):
        def visit_transform(self, node):
            if node.full_label.startswith(prefix) and None in node.outputs:
                found.add(str(node.outputs[None].element_type))
    p.visit(Visit())
    return found


@pytest.mark.slow
def test_preprocess_builds_from_a_config_the_test_constructs(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("id,x,y\n" + "".join(f"r{i},{i * 0.5},{i % 7}\n" for i in range(200))
                   + "bad,oops,1\n")
    out = str(tmp_path / "out")
    cfg = preprocess.PreprocessConfig(  # every value not given is its flag's default
        schema=SCHEMA, preprocessing_fn=make_preprocessing_fn(SCHEMA),
        tft_temp_dir=str(tmp_path / "tft"),
        source=PreprocessSource(str(src), (str(src),)),
        sink=PreprocessSink(out, os.path.join(out, "_staging-0-test")))
    p = _pipeline()
    outputs = preprocess.build_pipeline(p, cfg)
    assert isinstance(outputs, preprocess.PreprocessOutputs) and outputs.test is None  # 90/10
    assert_that(outputs.dead_letters | beam.Map(lambda d: d.reason),
                equal_to(["unparsable_number"]), label="DeadLetterReasons")
    assert_that(_agree(outputs.summary, lambda s: s["splits"]["train"], outputs.train | "Rows" >> beam.Map(
        lambda b: b[0].num_rows), "Train"), equal_to([True]), label="TrainRowsAgree")
    # The transformed batches are typed: Beam codes them in Arrow's format, not pickled.
    assert _element_types(p, "Count_") == {"Tuple[<class 'pyarrow.lib.RecordBatch'>, "
                                           "Dict[<class 'str'>, <class 'pyarrow.lib.Array'>]]"}
    p.run().wait_until_finish()
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["rows_read"] == 201
    assert sum(summary["splits"].values()) == 200
    assert summary["rejected"]["by_reason"] == {"unparsable_number": 1}
    assert os.path.exists(os.path.join(out, "_SUCCESS"))
    assert not os.path.exists(cfg.sink.staging)


def test_batch_predict_builds_from_a_config_the_test_constructs(trained, taxi_csv, tmp_path):
    from beam_jobs import batch_predict
    from beam_jobs.batch_predict_config import Model, Sink, Source
    from inference.model import versions
    _, _, metrics = trained
    model_path = versions.resolve_model_dir(metrics["export_dir"])
    schema = versions.load_raw_schema(model_path)
    out = str(tmp_path / "pred")
    cfg = batch_predict.BatchPredictConfig(  # every value not given is its flag's default
        schema=schema,
        source=Source(taxi_csv[0], (taxi_csv[0],), rows_per_chunk=500, key=schema.key),
        model=Model(model_path, model_path, versions.model_version(model_path)),
        sink=Sink(out, os.path.join(out, "_staging-0-test"), "2026-11-29"))
    p = _pipeline()
    outputs = batch_predict.build_pipeline(p, cfg)
    assert isinstance(outputs, batch_predict.BatchPredictOutputs)
    assert_that(_agree(outputs.summary, lambda s: s["rows_predicted"], outputs.predictions
                       | "Rows" >> beam.Map(lambda block: len(block.records())), "Predicted"),
                equal_to([True]), label="PredictionsAgree")
    assert_that(_agree(outputs.summary, lambda s: s["rejected"]["total"], outputs.dead_letters
                       | "One" >> beam.Map(lambda d: 1), "Rejected"),
                equal_to([True]), label="DeadLettersAgree")
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
