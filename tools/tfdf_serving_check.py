"""Does TF Serving's stock model server run these exports? Checked offline, as far as this
machine can (no model server runs here):

1. the op check (preprocessing/files/serving_ops.py): every op is TensorFlow's or one of TF-DF's
   inference ops with decision-forests 1.3.0's definition (the version TF Serving 2.19.1 pins);
2. a side environment (tools/tfdf_side/requirements.txt: Python 3.11, TensorFlow 2.12,
   tensorflow_decision_forests 1.3.0, no ydf-tf) loads each export as the model server does
   (TF1 SavedModel loader, `serve` tag, init op run): each forest is read from `assets/` by
   TF-DF 1.3.0's own kernel, with its file prefix; several forests load one after another
   (their loads chained in the init graph: training/exporting/forest_loads.py);
3. the golden set through `serving_default` there and here (TF 2.21 + ydf-tf): the largest
   difference of every numeric output;
4. every warmup record replayed there through its signature, as TF Serving's warmup does.

    python -m tools.tfdf_serving_check --export demo_output/job/export [--export ...]

The side environment is built once at --venv (~90 s and ~1.5 GB from PyPI). Exit status 1 if
any export fails a check.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SIDE_REQUIREMENTS = os.path.join(HERE, "tfdf_side", "requirements.txt")
SIDE_SCRIPT = os.path.join(HERE, "tfdf_side", "serve_like_tf_serving.py")
LOADED = re.compile(r"Loading model from path (\S+) with prefix (\S+)")
TREES = re.compile(r"Model loaded with (\d+) root\(s\), (\d+) node\(s\)")
SIDE_TIMEOUT_SECS = 600
TOLERANCE = 1e-5  # float32 arithmetic of two TensorFlow builds on the same graph


def ensure_side_env(venv: str, python: str) -> str:
    py = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, ".installed")
    if os.path.exists(marker):
        return py
    subprocess.run([python, "-m", "venv", venv], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "-r", SIDE_REQUIREMENTS], check=True)
    open(marker, "w").close()
    return py


def export_version(path: str) -> str:
    from training.optimize import source_version
    return source_version(path)


def forests(export_dir: str) -> list:
    """The file prefixes the export's init graph loads forests with."""
    from preprocessing.files.serving_ops import nodes
    return sorted({n.attr["file_prefix"].s.decode() for n in nodes(export_dir)
                   if n.op == "SimpleMLLoadModelFromPathWithHandle"})


def unchained_loads(export_dir: str) -> list:
    """Forest loads the init graph may run beside another one (training/exporting/
    forest_loads.py: TF-DF 1.3.0's kernels loading at once served other predictions)."""
    from preprocessing.files.serving_ops import meta_graph
    from training.exporting import forest_loads
    return forest_loads.unchained(meta_graph(export_dir).graph_def)


def here_outputs(export_dir: str) -> dict:
    import tensorflow as tf

    from preprocessing.files import saved_models
    from preprocessing.reference.golden import EXPORT_GOLDEN, read_examples
    rows = read_examples(os.path.join(export_dir, EXPORT_GOLDEN))
    out = saved_models.load(export_dir).signatures["serving_default"](
        examples=tf.constant(rows))
    return {k: v.numpy() for k, v in out.items() if v.dtype != tf.string}


def check_export(export: str, side_python: str) -> dict:
    from preprocessing.files import serving_ops
    result = {"export": export, "problems": serving_ops.serving_problems(export),
              "custom_ops": serving_ops.custom_ops(export), "forests": forests(export)}
    beside = unchained_loads(export)
    if beside:
        result["problems"].append(f"{len(beside)} forest load(s) not chained after the one "
                                  "before: TF-DF's kernels may load them at once")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "side.json")
        try:
            r = subprocess.run([side_python, SIDE_SCRIPT, "--export", export, "--out", out],
                               capture_output=True, text=True, timeout=SIDE_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            result["problems"].append(f"the side environment took over {SIDE_TIMEOUT_SECS} s")
            return result
        if r.returncode != 0:
            tail = r.stderr.strip().splitlines()[-1:] or ["(no output)"]
            result["problems"].append(f"the side environment could not serve it: {tail[0]}")
            return result
        with open(out) as f:
            side = json.load(f)
    loaded = sorted({p for _, p in LOADED.findall(r.stderr)})
    result["side"] = {"tensorflow": side["tensorflow"],
                      "tensorflow_decision_forests": side["tensorflow_decision_forests"],
                      "forests_loaded": loaded,
                      "trees": [f"{a} roots, {b} nodes" for a, b in TREES.findall(r.stderr)],
                      "signatures": side["signatures"]}
    if loaded != result["forests"]:
        result["problems"].append(f"forests loaded {loaded}, the graph's {result['forests']}")
    ours = here_outputs(export)
    diffs = {}
    for key, values in side["serving_default"].items():
        a, b = np.asarray(values, np.float64), np.asarray(ours[key], np.float64)
        diffs[key] = float(np.max(np.abs(a - b))) if a.shape == b.shape and a.size else None
        if diffs[key] is None or diffs[key] > TOLERANCE:
            result["problems"].append(f"serving_default's {key} differs: {diffs[key]}")
    result["golden_rows"] = side["golden_rows"]
    result["max_abs_difference"] = diffs
    result["warmup_replayed"] = len(side["warmup"])
    result["warmup"] = sorted({f"{w['kind']}:{w['signature']}" for w in side["warmup"]})
    if not side["warmup"]:
        result["problems"].append("no warmup records")
    return result


def dump_op_defs(side_python: str) -> None:
    """Prints TF-DF 1.3.0's registered op definitions (what serving_ops.TFDF_OP_DEFS holds)."""
    from preprocessing.files.serving_ops import TFDF_OP_DEFS
    code = ("import tensorflow_decision_forests\n"
            "from tensorflow.python.framework import op_def_registry\n"
            f"for n in {sorted(TFDF_OP_DEFS)!r}:\n"
            "    d = op_def_registry.get(n)\n"
            "    d.ClearField('summary'); d.ClearField('description')\n"
            "    for a in list(d.input_arg) + list(d.output_arg) + list(d.attr):\n"
            "        a.ClearField('description')\n"
            "    print(d)\n")
    subprocess.run([side_python, "-c", code], check=True, stderr=subprocess.DEVNULL)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.tfdf_serving_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--export", action="append", default=[],
                    help="An export (or a base of versions: its newest). Repeat for more.")
    ap.add_argument("--venv", default=".venv-tfdf", help="Where the side environment lives.")
    ap.add_argument("--python", default="python3.11", help="The Python that builds it.")
    ap.add_argument("--dump_op_defs", action="store_true",
                    help="Print TF-DF 1.3.0's op definitions and exit.")
    args = ap.parse_args(argv)
    if not args.export and not args.dump_op_defs:
        ap.error("give --export (or --dump_op_defs)")
    from training.optimize import OptimizeError
    try:
        exports = [export_version(path) for path in args.export]
        side_python = ensure_side_env(args.venv, args.python)
    except (OptimizeError, OSError, subprocess.CalledProcessError) as e:
        print(f"tfdf_serving_check: error: {e}", file=sys.stderr)
        return 2
    if args.dump_op_defs:
        dump_op_defs(side_python)
        return 0
    failed = 0
    for path in exports:
        result = check_export(path, side_python)
        failed += bool(result["problems"])
        print(json.dumps(result, indent=1))
    print(f"tfdf_serving_check: {len(exports) - failed} of {len(exports)} export(s) "
          "pass", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
