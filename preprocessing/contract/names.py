"""The names TensorFlow sees for the user's columns: derived here, in one place.

Users' headers hold spaces, parentheses, unicode, leading digits or nothing at all
(`bill depth (mm)`, `2nd reading`, an unnamed pandas index). TensorFlow refuses most of them
as scope, signature and Keras input names. The raw schema, dead letters and outputs keep the
user's names; tf.transform's inputs and outputs, the model's inputs and the `predict_raw`
signature use the name derived here, which is stable (a function of the schema's names
and the column's position) and identity for names that are already valid.
"""
from __future__ import annotations

import keyword
import re
import unicodedata
from typing import Dict, Sequence

# A name every TensorFlow API takes as it is: Keras inputs, root scopes, signature args
# (which are Python parameters: a keyword such as `class` is not one).
VALID = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# Names a signature argument may not take though Python allows them: `self` is taken by the
# method TensorFlow builds a concrete function through (Ecdat's Hmda has a `self` column:
# its export failed, "got multiple values for argument 'self'").
RESERVED = frozenset({"self"})


def tf_name(name: str, position: int) -> str:
    """The TensorFlow name of the column `name` at 0-based `position` of the schema."""
    out = name
    if not VALID.fullmatch(name):
        ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
        out = re.sub(r"[^A-Za-z0-9]+", "_", ascii_name).strip("_")
        if not out:
            return f"column_{position + 1}"
        out = out if out[0].isalpha() else "c_" + out
    return out + "_" if keyword.iskeyword(out) or out in RESERVED else out


def tf_names(names: Sequence[str]) -> Dict[str, str]:
    """{user's name: TensorFlow name} for a schema's columns. A name TensorFlow takes as it
    is keeps it; a derived name that another column already has gets its position (`BL.AA`,
    then `BL..AA` as the 2nd column, medicaldata's opt: `BL_AA`, `BL_AA_2`), so no header
    is refused for it."""
    out = {n: n for n in names if tf_name(n, 0) == n}  # valid names keep theirs, first
    taken = set(out)
    for i, name in enumerate(names):
        if name in out:
            continue
        derived = candidate = tf_name(name, i)
        while candidate in taken:
            candidate = f"{derived}_{i + 1}" if candidate == derived else candidate + "_"
        taken.add(candidate)
        out[name] = candidate
    return {n: out[n] for n in names}


def output_names(columns: Sequence[tuple], taken: Sequence[str]) -> Dict[tuple, str]:
    """{(column's TensorFlow name, suffix): the transformed feature's name} for the outputs a
    column makes beside its own (`fare_bucket`, `fare_missing`, `pickup_hour`): `columns` is
    ((TensorFlow name, (suffix, ...)), ...) in schema order. A name `taken` by a column, a
    derived feature or a cross, or by an earlier output, gets `_` appended until it is free:
    openintro's hfi has `pf_ss_women` (with missing values) beside `pf_ss_women_missing`, and
    the user's column keeps its name."""
    used, out = set(taken), {}
    for name, suffixes in columns:
        for suffix in suffixes:
            candidate = f"{name}_{suffix}"
            while candidate in used:
                candidate += "_"
            used.add(candidate)
            out[(name, suffix)] = candidate
    return out
