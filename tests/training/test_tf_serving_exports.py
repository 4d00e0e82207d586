"""Every family goes where a TensorFlow model goes (issue 60): its ops are ones TF Serving's
stock model server has, it carries warmup records every served signature answers, it names
what loading needs, `training.optimize` takes it, and a process without the ops is told in
one line what to install. (tools/tfdf_serving_check.py serves the exports with TF-DF 1.3.0's
own ops in a side environment; docs/serving.md has its figures.)"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from preprocessing.files import saved_models, serving_ops
from preprocessing.reference.golden import EXPORT_GOLDEN, read_examples
from training import optimize
from training.exporting.export import MODEL_ASSET, README_ASSET
from training.exporting.warmup import (
    WARMUP_ASSET,
    WARMUP_REQUEST_BYTES,
    WARMUP_ROWS,
    read_warmup,
    request_sizes,
    signature_methods,
    warmup_rows,
)

FAMILIES = ("trained", "trained_trees", "trained_blend")
TFDF_OPS = sorted(serving_ops.TFDF_OP_DEFS)


def _export(request, fixture: str) -> str:
    return request.getfixturevalue(fixture)[2]["export_dir"]  # (.., .., metrics)


@pytest.mark.slow
@pytest.mark.parametrize("fixture", FAMILIES)
def test_every_family_runs_only_ops_the_stock_model_server_has(request, fixture):
    export = _export(request, fixture)
    assert serving_ops.serving_problems(export) == []
    custom = serving_ops.custom_ops(export)
    notes = json.load(open(os.path.join(export, MODEL_ASSET)))
    readme = open(os.path.join(export, README_ASSET)).read()
    if fixture == "trained":
        assert custom == [] and notes["custom_ops"] == []
        assert "import ydf_tf" not in readme
        return
    assert custom == TFDF_OPS and notes["custom_ops"] == TFDF_OPS
    from importlib import metadata
    assert notes["op_package"] == f"ydf-tf=={metadata.version('ydf-tf')}"
    assert notes["tf_serving"] == f">= {serving_ops.TF_SERVING_MIN_VERSION}"
    assert f"pip install {notes['op_package']}" in readme and "import ydf_tf" in readme


def test_the_pinned_definitions_are_the_ones_ydf_tf_registers():
    from tensorflow.python.framework import op_def_registry
    saved_models.register_custom_ops()
    for name in TFDF_OPS:
        assert serving_ops.normalized(op_def_registry.get(name)) == \
            serving_ops.normalized(serving_ops.pinned_op_def(name))
    assert not any(serving_ops.is_core_op(n) for n in TFDF_OPS)
    assert serving_ops.is_core_op("MatMul") and serving_ops.is_core_op("StatefulPartitionedCall")


def _rewrite(export: str, edit) -> None:
    from tensorflow.core.protobuf import saved_model_pb2
    path = os.path.join(export, "saved_model.pb")
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(open(path, "rb").read())
    edit(proto.meta_graphs[0])
    open(path, "wb").write(proto.SerializeToString())


@pytest.mark.slow
def test_an_unknown_op_or_a_changed_definition_fails_the_check(trained_trees, tmp_path):
    source = trained_trees[2]["export_dir"]
    changed = str(tmp_path / "changed")
    shutil.copytree(source, changed)

    def change_definition(graph):
        op = next(o for o in graph.meta_info_def.stripped_op_list.op
                  if o.name == "SimpleMLInferenceOpWithHandle")
        op.attr[0].minimum = 2
    _rewrite(changed, change_definition)
    assert serving_ops.serving_problems(changed) == [
        "SimpleMLInferenceOpWithHandle: the export's op definition differs from TF-DF 1.3.0's"]

    unknown = str(tmp_path / "unknown")
    shutil.copytree(source, unknown)

    def add_unknown_op(graph):
        graph.graph_def.library.function[0].node_def[0].op = "MyCustomOp"
    _rewrite(unknown, add_unknown_op)
    assert "MyCustomOp: not a TensorFlow op nor one of TF-DF's inference ops" in \
        serving_ops.serving_problems(unknown)


def test_warmup_requests_stay_within_their_byte_budget():
    small, big = b"x" * 1000, b"y" * (WARMUP_REQUEST_BYTES + 1)
    assert warmup_rows([big, small, small]) == [small, small]  # a row too large passed over
    assert len(warmup_rows([small] * 1000)) == WARMUP_ROWS
    assert len(warmup_rows([b"z" * (WARMUP_REQUEST_BYTES // 3)] * 10)) == 3
    assert warmup_rows([big]) == [] and request_sizes([]) == []
    assert request_sizes([small]) == [1] and request_sizes([small] * 5) == [1, 5]


def _run_request(loaded, log):
    kind = log.WhichOneof("log_type")
    request = getattr(log, kind).request
    fn = loaded.signatures[request.model_spec.signature_name]
    if kind == "predict_log":
        out = fn(**{k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()})
    else:
        out = fn(inputs=tf.constant([e.SerializeToString()
                                     for e in request.input.example_list.examples]))
    return kind, request.model_spec.signature_name, {k: v.numpy() for k, v in out.items()}


@pytest.mark.slow
@pytest.mark.parametrize("fixture", FAMILIES + ("trained_images",))
def test_warmup_records_ask_every_served_signature_and_each_runs(request, fixture):
    """Regression tables (Regress API) and an image classifier (Classify API, image bytes)."""
    export = _export(request, fixture)
    logs = read_warmup(os.path.join(export, WARMUP_ASSET))
    assert json.load(open(os.path.join(export, MODEL_ASSET)))["warmup_requests"] == len(logs)
    loaded = saved_models.load(export)
    methods = signature_methods(export)
    sizes, asked = set(), set()
    for log in logs:
        kind, name, out = _run_request(loaded, log)
        asked.add(name)
        want = {"serving_default": "predict_log", "predict_raw": "predict_log",
                "regress": "regress_log", "classify": "classify_log"}[name]
        assert kind == want
        # The outputs TF Serving answers with: the signature's, one row per row asked.
        assert set(out) == set(loaded.signatures[name].structured_outputs)
        rows = {len(v) for v in out.values()}
        assert len(rows) == 1
        sizes.add(rows.pop())
    assert asked == set(methods) - {"__saved_model_init_op"}
    golden = read_examples(os.path.join(export, EXPORT_GOLDEN))
    assert sizes == set(request_sizes(warmup_rows(golden)))
    assert max(sizes) == min(len(golden), WARMUP_ROWS)  # golden rows are under the budget


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ("trained_trees", "trained_blend"))
def test_optimize_frozen_writes_a_gated_version_of_a_forest(request, fixture, tmp_path):
    source = _export(request, fixture)
    base = tmp_path / "models"
    shutil.copytree(source, base / "1")
    report = optimize.optimize(str(base), "frozen")
    version = report["version"]
    assert sorted(os.listdir(base)) == sorted(["1", os.path.basename(version)])
    assert report["max_abs_difference"] < 1e-4 and report["metric_after"] == pytest.approx(
        report["source_metric"], rel=1e-4)
    # The forest comes along in the new version's assets; the source can go.
    shutil.rmtree(base / "1")
    loaded = saved_models.load(version)
    assert not loaded.signatures["predict_raw"].variables
    assert serving_ops.serving_problems(version) == []
    # Warmup records and what loading needs travel with it, and still run.
    for log in read_warmup(os.path.join(version, WARMUP_ASSET)):
        _run_request(loaded, log)
    assert json.load(open(os.path.join(version, MODEL_ASSET)))["custom_ops"] == TFDF_OPS
    if fixture == "trained_blend":  # the network's weights quantise; the forest stays
        r = optimize.optimize(str(base), "int8")
        assert r["quantized_constants"] > 0


@pytest.mark.slow
def test_quantising_a_trees_export_is_refused_in_one_line(trained_trees, tmp_path, capsys):
    base = tmp_path / "models"
    shutil.copytree(trained_trees[2]["export_dir"], base / "1")
    code = optimize.main(["--model_dir", str(base), "--mode", "int8"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "boosted_trees export" in err and "--mode frozen applies" in err
    assert os.listdir(base) == ["1"]


@pytest.mark.slow
def test_a_process_without_the_ops_is_told_what_to_install(trained_trees):
    code = ("import sys; sys.modules['ydf_tf'] = None\n"  # as if ydf-tf were not installed
            "from preprocessing.files import saved_models\n"
            "from preprocessing.files.serving_ops import MissingOpsError\n"
            "try:\n"
            f"    saved_models.load({trained_trees[2]['export_dir']!r})\n"
            "except MissingOpsError as e:\n"
            "    print('MISSING', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    line = [x for x in r.stdout.splitlines() if x.startswith("MISSING")]
    assert r.returncode == 0 and len(line) == 1, r.stderr[-2000:]
    from importlib import metadata
    assert f"pip install ydf-tf=={metadata.version('ydf-tf')}" in line[0]
    assert "import ydf_tf" in line[0] and "SimpleML" in line[0]


def _readme_snippet() -> str:
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
    section = readme.split("### Use the export in your own code", 1)[1]
    return section.split("```python", 1)[1].split("```", 1)[0]


@pytest.mark.slow
def test_the_readmes_own_code_section_runs_in_a_fresh_process(trained_blend, tmp_path):
    """Pasted as is into a fresh Python of the project's venv, with the export where it says."""
    export = trained_blend[2]["export_dir"]
    snippet = _readme_snippet()
    assert "import ydf_tf" in snippet
    job = tmp_path / "demo_output" / "job" / "export"
    shutil.copytree(export, job / "1")
    r = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    printed = [float(x) for x in r.stdout.split()]
    loaded = saved_models.load(export)
    rows = read_examples(os.path.join(export, EXPORT_GOLDEN))[:3]
    want = loaded.signatures["serving_default"](examples=tf.constant(rows))["predictions"]
    np.testing.assert_allclose(printed, want.numpy(), rtol=1e-5)
