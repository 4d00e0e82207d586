"""An export optimised for inference, written as a new version beside the one it comes from.

    python -m training.optimize --model_dir out/job/export --mode int8 [--tolerance 0.01]

Every family: a boosted-trees or blend export's forest (TF-DF's ops, reading its files in
`assets/`) is kept as it is and its model resource carried over; only float weights are
frozen or quantised (a boosted_trees export has none to quantise: --mode frozen only).
`--mode frozen`: the variables of `predict_raw` (the transform and the model, the path the
batch and streaming jobs call) become constants and the graph is frozen with its functions
inlined, so the runtime sees one graph to fold and prune (training-only nodes, variable reads
and identities go); `float16` / `int8` also store the weights quantised (training/exporting/quantize.py).
The transform stays inside (its lookup tables and their vocabulary assets come along), and
every signature is rebuilt over the one frozen function: `serving_default` (tf.Examples),
`predict_raw`, `classify` or `regress` (TF Serving's method names), so the weights are stored
once. The new version is scored on the source's golden set (a sample of the eval split) and
is refused, with nothing written, if its metric moves by more than `--tolerance` (RMSE
relative, accuracy absolute) from the source's; predictions are also compared row by row.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import sys
import tempfile

import numpy as np

from preprocessing import flags, quiet
from preprocessing.contract.schema import RAW_SCHEMA_ASSET, Schema
from preprocessing.files import saved_models
from preprocessing.flags import flag
from preprocessing.reference.evaluation import EvalSums
from preprocessing.reference.golden import (
    EXPORT_CALIBRATION,
    EXPORT_GOLDEN,
    GoldenSetError,
    example_labels,
    read_examples,
    serve_examples,
)
from training.exporting.export import (
    finish_saved_model,
    model_family,
    next_version_dir,
    serving_api_signatures,
)
from training.exporting.quantize import MODES, quantize, weight_constants
from training.exporting.requests import CLASSIFY_METHOD, REGRESS_METHOD, predict_raw_parsing
from training.guards import TrainingError, check_writable

log = logging.getLogger("training.optimize")
DEFAULT_TOLERANCE = 0.01
CLIP_RATIOS = (1.0, 0.98, 0.95, 0.9, 0.8)  # int8 ranges tried on the calibration set


class OptimizeError(RuntimeError):
    pass


def source_version(model_dir: str) -> str:
    """`model_dir` itself if it is an export, else its newest complete numeric version."""
    import tensorflow as tf
    if tf.io.gfile.exists(os.path.join(model_dir, RAW_SCHEMA_ASSET)):
        return model_dir
    versions = sorted((int(v.strip("/")) for v in tf.io.gfile.listdir(model_dir)
                       if v.strip("/").isdigit()
                       and tf.io.gfile.exists(os.path.join(model_dir, v.strip("/"),
                                                           RAW_SCHEMA_ASSET))),
                      reverse=True) if tf.io.gfile.isdir(model_dir) else []
    if not versions:
        raise OptimizeError(f"{model_dir}: no complete export (no {RAW_SCHEMA_ASSET})")
    return os.path.join(model_dir, str(versions[0]))


def freeze(signature):
    """(graph_def, {argument: tensor name}, [(tensor name, resource handle)], {output: name})
    of a signature with its variables as constants."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2_as_graph
    frozen, graph_def = convert_variables_to_constants_v2_as_graph(
        signature, lower_control_flow=False, aggressive_inlining=True)
    for fn in graph_def.library.function:  # Grappler's marks, which SavedModel loading refuses
        for key in [k for k in fn.attr if k.startswith("_Grappler")]:
            del fn.attr[key]
    n_args = len(signature.graph.inputs) - len(signature.captured_inputs)
    captured = {t.name: c for t, c in zip(signature.graph.inputs[n_args:],
                                          signature.captured_inputs)}
    args = {t.name.split(":")[0]: t.name for t in signature.graph.inputs[:n_args]}
    resources = [(t.name, captured[t.name]) for t in frozen.inputs if t.name in captured]
    keys = sorted(signature.structured_outputs)  # the flattening order of a dict
    outputs = {k: t.name for k, t in zip(keys, frozen.outputs)}
    return graph_def, args, resources, outputs


def _resource_owners(loaded, handles) -> list:
    """The tracked objects (tables) owning the resource handles the frozen graph reads."""
    import tensorflow as tf
    from tensorflow.python.trackable.resource import CapturableResource
    owners = {id(o.resource_handle): o for o in tf.train.TrackableView(loaded).descendants()
              if isinstance(o, CapturableResource)}
    missing = [h for h in handles if id(h) not in owners]
    if missing:
        raise OptimizeError(f"{len(missing)} resources of the graph have no tracked owner")
    return [owners[id(h)] for h in handles]


def build_module(loaded, graph_def, args, resources, outputs, schema: Schema,
                 class_names: list):
    import tensorflow as tf

    class OptimizedModule(tf.Module):
        pass

    m = OptimizedModule()
    m.tables = _resource_owners(loaded, [h for _, h in resources])
    m.class_names = tf.constant(class_names)
    fed = [name for name, _ in resources]
    tables = m.tables
    spec = loaded.signatures["predict_raw"].structured_input_signature[1]

    def run(features):
        feed = {args[k]: features[k] for k in args}
        feed.update({name: tf.identity(t.resource_handle) for name, t in zip(fed, tables)})
        names = sorted(outputs)
        values = tf.graph_util.import_graph_def(graph_def, input_map=feed,
                                                return_elements=[outputs[k] for k in names],
                                                name="frozen")
        return dict(zip(names, values))

    m.predict_raw = tf.function(run, input_signature=[dict(spec)])
    example, tf_names = predict_raw_parsing(schema)

    def serve_examples(examples):
        parsed = tf.io.parse_example(examples, example)
        return m.predict_raw({tf_names[k]: v for k, v in parsed.items()})

    m._serve_examples = serve_examples
    m.serve_examples = tf.function(serve_examples, input_signature=[
        tf.TensorSpec([None], tf.string, name="examples")])
    return m


def _class_names(loaded, one_example: list, task: str) -> list:
    """The label vocabulary, in the model's order: the Classify signature's `classes` row."""
    import tensorflow as tf
    if task != "classification":
        return [""]
    if "classify" not in loaded.signatures or not one_example:
        raise OptimizeError("a classification export without a classify signature (exported "
                            "before TF Serving's Classify API was added): export it again")
    row = loaded.signatures["classify"](inputs=tf.constant(one_example))["classes"][0]
    return [c.decode("utf-8") for c in row.numpy()]


def _score(fn, examples: list, labels: list, task: str) -> tuple:
    out = serve_examples(fn, examples)
    metric = "rmse" if task == "regression" else "accuracy"
    return EvalSums().add_outputs(task, out, labels).metrics(task).get(metric), out


def optimize(model_dir: str, mode: str, tolerance: float = DEFAULT_TOLERANCE) -> dict:
    """Writes the optimised version under the source's base; returns a report. Raises
    OptimizeError (nothing written) when the metric moves beyond `tolerance`."""
    import tensorflow as tf
    source = source_version(model_dir)
    try:  # the new version goes beside the source: refused before any work, not after
        check_writable(os.path.dirname(source.rstrip("/")), "--model_dir")
    except TrainingError as e:
        raise OptimizeError(str(e)) from None
    with tf.io.gfile.GFile(os.path.join(source, RAW_SCHEMA_ASSET)) as f:
        schema = Schema.loads(f.read())
    golden_path = os.path.join(source, EXPORT_GOLDEN)
    if not tf.io.gfile.exists(golden_path):
        raise OptimizeError(f"{golden_path} is missing: no rows to check the new version on")
    family = model_family(source)
    if family == "boosted_trees" and mode != "frozen":
        raise OptimizeError(f"--mode {mode}: {source} is a boosted_trees export, whose only "
                            "weights are its forest's (kept as they are): nothing to quantise; "
                            "--mode frozen applies")
    examples = read_examples(golden_path)
    labels = example_labels(examples, schema)
    loaded = saved_models.load(source)
    if "predict_raw" not in loaded.signatures:
        raise OptimizeError(f"{source}: no predict_raw signature")
    frozen, args, resources, outputs = freeze(loaded.signatures["predict_raw"])
    class_names = _class_names(loaded, examples[:1], schema.task)

    def module_for(graph_def):
        return build_module(loaded, graph_def, args, resources, outputs, schema, class_names)

    calibration, clips = None, {}
    if mode == "int8":
        calibration, clips = calibrate(frozen, module_for, os.path.join(source,
                                                                        EXPORT_CALIBRATION))
    graph_def, quantized = quantize(frozen, mode, clips)
    module = module_for(graph_def)
    api = serving_api_signatures(module, schema.task == "classification")
    base = os.path.dirname(source.rstrip("/"))
    tmp = tempfile.mkdtemp(prefix="optimize_")
    try:
        staged = os.path.join(tmp, "version")
        tf.saved_model.save(module, staged, signatures={
            "serving_default": module.serve_examples, "predict_raw": module.predict_raw, **api})
        finish_saved_model(staged, {"classify": CLASSIFY_METHOD, "regress": REGRESS_METHOD})
        before, ref = _score(loaded.signatures["serving_default"], examples, labels, schema.task)
        after, got = _score(saved_models.load(staged).signatures["serving_default"],
                            examples, labels, schema.task)
        report = {"source": source, "mode": mode, "rows": len(examples),
                  "metric": "rmse" if schema.task == "regression" else "accuracy",
                  "source_metric": before, "metric_after": after,
                  "quantized_constants": len(quantized),
                  "quantized_weights": int(sum(quantized.values())),
                  "max_abs_difference": _max_difference(ref, got),
                  "calibration": calibration, "tolerance": tolerance}
        moved = _moved(before, after, schema.task)
        if moved is None or moved > tolerance:
            raise OptimizeError(f"{mode}: the golden-set {report['metric']} moved from "
                                f"{before} to {after}, beyond the tolerance {tolerance}")
        assets = os.path.join(source, "assets.extra")
        target = os.path.join(staged, "assets.extra")
        tf.io.gfile.makedirs(target)
        for name in tf.io.gfile.listdir(assets):
            if name.rstrip("/") != os.path.basename(RAW_SCHEMA_ASSET):
                tf.io.gfile.copy(os.path.join(assets, name), os.path.join(target, name),
                                 overwrite=True)
        # The raw schema last: a version is complete once it exists.
        tf.io.gfile.copy(os.path.join(source, RAW_SCHEMA_ASSET),
                         os.path.join(staged, RAW_SCHEMA_ASSET), overwrite=True)
        version = next_version_dir(base)
        if "://" in version:
            _copy_tree(staged, version)
        else:
            shutil.copytree(staged, version + ".partial")
            os.rename(version + ".partial", version)
        report["version"] = version
        return report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def calibrate(frozen, module_for, path: str) -> tuple:
    """int8 ranges chosen on the calibration set (train rows): for each weight constant in
    turn, the clip ratio of CLIP_RATIOS whose quantised model's outputs stay closest (mean
    squared difference) to the float model's. Returns (report, {constant: ratio})."""
    import tensorflow as tf
    if not tf.io.gfile.exists(path):
        log.warning("%s is missing (preprocessed before calibration sets were kept): int8 "
                    "uses each channel's full range", path)
        return {"rows": 0, "note": "no calibration set: full ranges"}, {}
    rows = tf.constant(read_examples(path))
    if rows.shape[0] == 0:
        return {"rows": 0, "note": "empty calibration set: full ranges"}, {}

    def main_output(graph_def):
        out = module_for(graph_def).serve_examples(rows)
        return np.asarray(out["predictions" if "predictions" in out else "probabilities"],
                          np.float64)

    def error(clips):
        return float(np.mean((main_output(quantize(frozen, "int8", clips)[0]) - ref) ** 2))

    ref = main_output(frozen)
    clips, full = {}, error({})
    current = full
    for name in weight_constants(frozen):
        for ratio in CLIP_RATIOS[1:]:
            tried = error({**clips, name: ratio})
            if tried < current:
                current, clips[name] = tried, ratio
    return {"rows": int(rows.shape[0]), "clips": clips, "mse_full_range": full,
            "mse_calibrated": current}, clips


def _moved(before, after, task: str):
    if before is None or after is None or not np.isfinite(after):
        return None
    if task == "regression":
        return abs(after - before) / max(abs(before), 1e-12)
    return abs(after - before)


def _max_difference(ref: dict, got: dict) -> float:
    key = "predictions" if "predictions" in ref else "probabilities"
    return float(np.max(np.abs(np.asarray(ref[key], np.float64) - got[key]))) if len(
        ref[key]) else 0.0


def _copy_tree(src: str, dst: str) -> None:
    import tensorflow as tf
    files = [(root, name) for root, _, names in os.walk(src) for name in names]
    # The raw schema last: readers take a version as complete once it exists.
    files.sort(key=lambda rn: (rn[1] == os.path.basename(RAW_SCHEMA_ASSET), rn[1]))
    for root, name in files:
        rel = os.path.relpath(os.path.join(root, name), src)
        tf.io.gfile.makedirs(os.path.dirname(os.path.join(dst, rel)))
        tf.io.gfile.copy(os.path.join(root, name), os.path.join(dst, rel), overwrite=True)


@dataclasses.dataclass(frozen=True)
class OptimizeArgs:
    """training.optimize's flags, each declared once (preprocessing/flags.py)."""
    model_dir: str = flag(help="An export, or a base of versions (its newest is optimised).",
                          required=True)
    mode: str = flag("frozen", choices=MODES)
    tolerance: float = flag(DEFAULT_TOLERANCE, "How far the golden-set metric may move: RMSE "
                                               "relative (0.01 = 1%%), accuracy absolute (0.01 "
                                               "= 1 point).",
                            check=(lambda v: 0 <= v < 1, "in [0, 1)"))
    verbosity: str = quiet.verbosity_flag()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.optimize", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add_arguments(ap, OptimizeArgs)
    args = flags.from_mapping(OptimizeArgs, vars(ap.parse_args(argv)))
    said = flags.problem(args)
    if said:
        ap.error(said)
    try:
        report = optimize(args.model_dir, args.mode, args.tolerance)
    except (OptimizeError, GoldenSetError, FileNotFoundError) as e:
        print(f"training.optimize: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sys.exit(main())
