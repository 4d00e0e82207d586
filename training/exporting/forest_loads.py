"""The forests of an export load one after another under TF Serving.

A TF1 SavedModel loader (TF Serving's) runs the export's init op, which `tf.saved_model.save`
writes as a no-op depending on every resource initializer: the session runs them in
parallel. With several forests (training/models/forests.py), TF-DF 1.3.0's
`SimpleMLLoadModelFromPathWithHandle` kernels (the ones TF Serving 2.19.1 links) loading at
once gave other predictions on 7 of 12 loads of one 5-forest export, up to 0.012 on a fare
of ~10, and the same on every load with one inter-op thread (docs/serving.md). TF 2.21 with
ydf-tf did not show it, and `tf.saved_model.load` runs initializers one by one anyway.

chain() gives each forest's initializer call in the graph a control dependency on the one
before, so those loads run one at a time in any session; nothing else in the init op changes.
"""
from __future__ import annotations

from typing import List

FOREST_LOAD_OP = "SimpleMLLoadModelFromPathWithHandle"
CALL_OPS = ("StatefulPartitionedCall", "PartitionedCall")


def _loading_functions(graph_def) -> set:
    """Names of the library functions that load a forest, directly or through a call."""
    library = {f.signature.name: f for f in graph_def.library.function}
    loads: set = set()
    changed = True
    while changed:  # a function calling one that loads loads too
        changed = False
        for name, f in library.items():
            if name in loads:
                continue
            if any(n.op == FOREST_LOAD_OP or (n.op in CALL_OPS and n.attr["f"].func.name in loads)
                   for n in f.node_def):
                loads.add(name)
                changed = True
    return loads


def forest_load_calls(graph_def) -> List[str]:
    """The graph's nodes that load a forest (initializer calls), by name."""
    loads = _loading_functions(graph_def)
    return sorted(n.name for n in graph_def.node
                  if n.op == FOREST_LOAD_OP
                  or (n.op in CALL_OPS and n.attr["f"].func.name in loads))


def chain(graph_def) -> int:
    """Each forest load after the one before it (a control input), in place: how many loads
    were chained (0 or 1 forest: none)."""
    calls = forest_load_calls(graph_def)
    nodes = {n.name: n for n in graph_def.node}
    for before, after in zip(calls, calls[1:]):
        control = "^" + before
        if control not in nodes[after].input:
            nodes[after].input.append(control)
    return max(len(calls) - 1, 0)


def unchained(graph_def) -> List[str]:
    """The forest loads that may run beside another one: each but the first should depend
    on the one before (chain())."""
    calls = forest_load_calls(graph_def)
    nodes = {n.name: n for n in graph_def.node}
    return [after for before, after in zip(calls, calls[1:])
            if "^" + before not in nodes[after].input]
