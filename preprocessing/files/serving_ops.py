"""Which ops an export runs, and whether TF Serving's stock model server has them.

A network export runs core TensorFlow ops only. A boosted-trees or blend export also runs
three inference ops of TensorFlow Decision Forests, registered in this process by `ydf-tf`
(preprocessing/files/saved_models.py). TF Serving's model server links those ops since 2.11:
at tensorflow/serving's 2.19.1 tag, `tensorflow_serving/model_servers/BUILD` depends on
`@org_tensorflow_decision_forests//tensorflow_decision_forests/tensorflow/ops/inference:
kernel_and_op`, and `tensorflow_serving/workspace.bzl` pins decision-forests 1.3.0.
TFDF_OP_DEFS are that version's op definitions (`tensorflow/ops/inference/op.cc`), dumped
from the `tensorflow_decision_forests==1.3.0` wheel's op registry (descriptions dropped) by
`tools/tfdf_serving_check.py --dump_op_defs`. An export serves on the stock image when
every op it runs is a core op, or one of these with the very same definition.
"""
from __future__ import annotations

import os
from importlib import metadata
from typing import Dict, List, Set

TF_SERVING_VERSION = "2.19.1"     # the image templates/serving/ runs
TF_SERVING_MIN_VERSION = "2.11"   # the first release linking TF-DF's inference ops
TFDF_VERSION = "1.3.0"            # decision-forests as that image's workspace.bzl pins it
OP_PACKAGE = "ydf-tf"             # registers the same ops in a Python process

TFDF_OP_DEFS: Dict[str, str] = {
    "SimpleMLCreateModelResource": """
        name: "SimpleMLCreateModelResource"
        output_arg { name: "model_handle" type: DT_RESOURCE }
        attr { name: "container" type: "string" default_value { s: "" } }
        attr { name: "shared_name" type: "string" default_value { s: "" } }
        is_stateful: true""",
    "SimpleMLLoadModelFromPathWithHandle": """
        name: "SimpleMLLoadModelFromPathWithHandle"
        input_arg { name: "model_handle" type: DT_RESOURCE }
        input_arg { name: "path" type: DT_STRING }
        attr { name: "output_types" type: "list(string)" default_value { list { } } }
        attr { name: "file_prefix" type: "string" default_value { s: "" } }
        attr { name: "allow_slow_inference" type: "bool" default_value { b: true } }
        is_stateful: true""",
    "SimpleMLInferenceOpWithHandle": """
        name: "SimpleMLInferenceOpWithHandle"
        input_arg { name: "numerical_features" type: DT_FLOAT }
        input_arg { name: "boolean_features" type: DT_FLOAT }
        input_arg { name: "categorical_int_features" type: DT_INT32 }
        input_arg { name: "categorical_set_int_features_values" type: DT_INT32 }
        input_arg { name: "categorical_set_int_features_row_splits_dim_1" type: DT_INT64 }
        input_arg { name: "categorical_set_int_features_row_splits_dim_2" type: DT_INT64 }
        input_arg { name: "model_handle" type: DT_RESOURCE }
        output_arg { name: "dense_predictions" type: DT_FLOAT }
        output_arg { name: "dense_col_representation" type: DT_STRING }
        attr { name: "dense_output_dim" type: "int" has_minimum: true minimum: 1 }
        is_stateful: true""",
}


class MissingOpsError(RuntimeError):
    """An export runs ops this process has not registered (one line: what to install)."""


def meta_graph(export_dir: str):
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2
    proto = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    if len(proto.meta_graphs) != 1:
        raise ValueError(f"{export_dir}: {len(proto.meta_graphs)} meta graphs, expected 1")
    return proto.meta_graphs[0]


def nodes(export_dir: str) -> list:
    """Every node of the export's graph and of every function in its library."""
    graph = meta_graph(export_dir).graph_def
    return list(graph.node) + [n for f in graph.library.function for n in f.node_def]


def op_types(export_dir: str) -> Set[str]:
    """Every op type a node runs (a node calling a library function by name is not an op)."""
    functions = {f.signature.name for f in meta_graph(export_dir).graph_def.library.function}
    return {n.op for n in nodes(export_dir)} - functions


def normalized(op_def) -> str:
    """An OpDef as text without its documentation (what must match for a server to run it)."""
    from tensorflow.core.framework import op_def_pb2
    d = op_def_pb2.OpDef()
    d.CopyFrom(op_def)
    d.ClearField("summary")
    d.ClearField("description")
    d.ClearField("deprecation")
    for part in list(d.input_arg) + list(d.output_arg) + list(d.attr):
        part.ClearField("description")
    return str(d)


def pinned_op_def(name: str):
    from google.protobuf import text_format
    from tensorflow.core.framework import op_def_pb2
    return text_format.Parse(TFDF_OP_DEFS[name], op_def_pb2.OpDef())


def is_core_op(name: str) -> bool:
    """An op of TensorFlow itself (its generated `tf.raw_ops`; ops a package registers, as
    ydf-tf does, are not there)."""
    import tensorflow as tf
    return hasattr(tf.raw_ops, name)


def custom_ops(export_dir: str) -> List[str]:
    """The ops an export runs that TensorFlow itself does not define."""
    return sorted(op for op in op_types(export_dir) if not is_core_op(op))


def serving_problems(export_dir: str) -> List[str]:
    """Why TF Serving's stock model server could not run this export (empty: it can): an op
    neither core nor TF-DF's, or a TF-DF op whose definition, as saved in the export or as
    registered here, differs from decision-forests TFDF_VERSION's."""
    from tensorflow.python.framework import op_def_registry
    saved = {d.name: d for d in meta_graph(export_dir).meta_info_def.stripped_op_list.op}
    problems = []
    for op in custom_ops(export_dir):
        if op not in TFDF_OP_DEFS:
            problems.append(f"{op}: not a TensorFlow op nor one of TF-DF's inference ops")
            continue
        want = normalized(pinned_op_def(op))
        if op not in saved:
            problems.append(f"{op}: run by the graph but missing from its stripped_op_list")
        elif normalized(saved[op]) != want:
            problems.append(f"{op}: the export's op definition differs from TF-DF "
                            f"{TFDF_VERSION}'s")
        registered = op_def_registry.get(op)
        if registered is not None and normalized(registered) != want:
            problems.append(f"{op}: {OP_PACKAGE}'s op definition differs from TF-DF "
                            f"{TFDF_VERSION}'s")
    return problems


def op_package_version() -> str:
    try:
        return metadata.version(OP_PACKAGE)
    except metadata.PackageNotFoundError:
        return "not installed"


def needs(export_dir: str) -> dict:
    """What loading this export needs, for its model.json and README."""
    ops = custom_ops(export_dir)
    if not ops:
        return {"custom_ops": [], "tf_serving": "any TensorFlow Serving release"}
    return {"custom_ops": ops,
            "op_package": f"{OP_PACKAGE}=={op_package_version()}",
            "import_before_loading": "ydf_tf",
            "tf_serving": f">= {TF_SERVING_MIN_VERSION}",
            "op_definitions_of": f"decision-forests {TFDF_VERSION} (TF Serving "
                                 f"{TF_SERVING_VERSION}'s)"}


def missing_ops_message(path: str, error: Exception) -> str:
    """One line for an export whose ops this process lacks, naming what to install."""
    text = str(error)
    op = text.split("Op type not registered '", 1)[1].split("'", 1)[0] \
        if "Op type not registered '" in text else "an op"
    if op in TFDF_OP_DEFS:
        return (f"{path}: runs {op}, an inference op of TensorFlow Decision Forests: "
                f"pip install {OP_PACKAGE}=={op_package_version_pinned()} and `import ydf_tf` "
                f"before tf.saved_model.load (or serve it with TF Serving >= "
                f"{TF_SERVING_MIN_VERSION})")
    return f"{path}: runs {op}, which this TensorFlow does not register"


def op_package_version_pinned() -> str:
    """The version to install: the one installed here, else the one TensorFlow's matches."""
    version = op_package_version()
    if version != "not installed":
        return version
    import tensorflow as tf
    return f"{tf.__version__}.*"
