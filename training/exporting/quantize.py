"""Weight quantisation of a frozen GraphDef: the weights of matrix multiplications,
convolutions and embedding lookups are stored as float16, or as int8 with one float32 scale
per output channel (symmetric), and turned back into float32 where they are read.

Only those weights: the tf.transform part of a serving graph holds float constants too
(quantile boundaries, means and variances), and rounding them would move values across
bucket edges or shift every scaled feature, which the model never saw in training. The
computation itself stays float32: TensorFlow's CPU kernels have no int8 matmul for these
graphs outside TFLite, which cannot run the transform's parse and table ops; the gain is the
file's size, the runtime folds the casts back into constants when it optimises the graph.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

MODES = ("frozen", "float16", "int8")
# op -> indices of its inputs that are weights
_WEIGHT_INPUTS = {"MatMul": (1,), "BatchMatMulV2": (1,), "Conv2D": (1,),
                  "DepthwiseConv2dNative": (1,), "GatherV2": (0,), "Gather": (0,)}
MIN_ELEMENTS = 256  # smaller constants are not worth a cast (and are rarely weights)


def _source(name: str) -> str:
    return name.lstrip("^").split(":")[0]


def weight_constants(graph_def) -> List[str]:
    """Float32 Const nodes that reach a weight input (through Identity nodes only)."""
    from tensorflow.python.framework import tensor_util
    nodes = {n.name: n for n in graph_def.node}
    found = set()
    for fn_nodes in [graph_def.node] + [f.node_def for f in graph_def.library.function]:
        for n in fn_nodes:
            for i in _WEIGHT_INPUTS.get(n.op, ()):
                if i >= len(n.input):
                    continue
                src = nodes.get(_source(n.input[i]))
                while src is not None and src.op == "Identity":
                    src = nodes.get(_source(src.input[0]))
                if src is None or src.op != "Const" or src.attr["dtype"].type != 1:  # DT_FLOAT
                    continue
                if tensor_util.MakeNdarray(src.attr["value"].tensor).size >= MIN_ELEMENTS:
                    found.add(src.name)
    return sorted(found)


def int8_per_channel(w: np.ndarray, clip: float = 1.0) -> Tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 with one scale per index of the last axis (a layer's output channel,
    an embedding's dimension); `clip` < 1 saturates the largest weights for a finer step."""
    w = np.asarray(w, np.float32)
    axes = tuple(range(w.ndim - 1))
    peak = (np.max(np.abs(w), axis=axes) if axes else np.abs(w)) * float(clip)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale


def quantize(graph_def, mode: str, clips: Dict[str, float] = None):
    """A copy of `graph_def` with its weight constants stored in `mode`'s type (int8: each
    constant's range clipped by its `clips` ratio, default 1); returns
    (graph_def, {constant: elements})."""
    import tensorflow as tf
    from tensorflow.python.framework import tensor_util
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    if mode == "frozen":
        return out, {}
    targets = set(weight_constants(graph_def))
    done: Dict[str, int] = {}
    keep = [n for n in out.node if n.name not in targets]
    replaced = []
    for n in out.node:
        if n.name not in targets:
            continue
        w = tensor_util.MakeNdarray(n.attr["value"].tensor)
        done[n.name] = int(w.size)
        replaced.extend(_dequantized(n.name, w, mode, n.device, (clips or {}).get(n.name, 1.0)))
    del out.node[:]
    out.node.extend(keep + replaced)
    return out, done


def _const(name: str, value: np.ndarray, device: str):
    import tensorflow as tf
    n = tf.compat.v1.NodeDef(name=name, op="Const", device=device)
    n.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
    n.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
    return n


def _dequantized(name: str, w: np.ndarray, mode: str, device: str, clip: float) -> list:
    """Nodes computing float32 `w` under the constant's own name, from its stored form."""
    import tensorflow as tf
    cast = tf.compat.v1.NodeDef(name=name if mode == "float16" else name + "/dequantize",
                                op="Cast", device=device)
    cast.input.append(name + "/stored")
    cast.attr["DstT"].type = tf.float32.as_datatype_enum
    if mode == "float16":
        stored = w.astype(np.float16)
        cast.attr["SrcT"].type = tf.float16.as_datatype_enum
        return [_const(name + "/stored", stored, device), cast]
    q, scale = int8_per_channel(w, clip)
    cast.attr["SrcT"].type = tf.int8.as_datatype_enum
    mul = tf.compat.v1.NodeDef(name=name, op="Mul", device=device)
    mul.input.extend([name + "/dequantize", name + "/scale"])
    mul.attr["T"].type = tf.float32.as_datatype_enum
    return [_const(name + "/stored", q, device), _const(name + "/scale", scale, device),
            cast, mul]
