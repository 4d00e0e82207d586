"""The names TensorFlow sees for the user's columns: derived here, in one place.

Users' headers hold spaces, parentheses, unicode, leading digits or nothing at all
(`bill depth (mm)`, `2nd reading`, an unnamed pandas index). TensorFlow refuses most of them
as scope, signature and Keras input names. The raw schema, dead letters and outputs keep the
user's names; tf.transform's inputs and outputs, the model's inputs and the `predict_raw`
signature use the name derived here, which is stable (a function of the column's name and
position only) and identity for names that are already valid.
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
    """{user's name: TensorFlow name} for a schema's columns; ValueError naming both columns
    when two names derive the same TensorFlow name (renaming one is the user's choice)."""
    out: Dict[str, str] = {}
    taken: Dict[str, str] = {}
    for i, name in enumerate(names):
        derived = tf_name(name, i)
        if derived in taken:
            raise ValueError(f"columns {taken[derived]!r} and {name!r} both map to the "
                             f"TensorFlow name {derived!r}: rename one of them")
        taken[derived] = name
        out[name] = derived
    return out
