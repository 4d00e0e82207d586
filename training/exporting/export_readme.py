"""The README an export carries (`assets.extra/README.md`): what it is, what loading it
needs, its signatures and a call, for whoever finds the folder without this project."""
from __future__ import annotations

from preprocessing.contract.schema import Schema


def readme_text(notes: dict, schema: Schema) -> str:
    ops = notes.get("custom_ops") or []
    image = next((c.name for c in schema.columns if c.transform == "image"), None)
    if image:
        raw_inputs = "`image_bytes` (encoded JPEG/PNG bytes, a [batch] string tensor)"
    else:
        raw_inputs = ", ".join(f"`{schema.tf_name(c.name)}`" for c in schema.serving_columns())
        raw_inputs += " (one [batch] tensor per raw column)"
    if schema.task == "regression":
        outputs = "`predictions` [batch]"
        api = "`regress`: TF Serving's Regress API, `inputs` (serialized tf.Examples) -> `outputs`"
    else:
        outputs = "`probabilities` [batch, classes], `class_ids` [batch], `classes` [batch]"
        api = ("`classify`: TF Serving's Classify API, `inputs` (serialized tf.Examples) -> "
               "`classes`, `scores`")
    lines = [
        f"# A {notes.get('family', 'network')} model ({schema.task})",
        "",
        "A TensorFlow SavedModel with its tf.transform preprocessing inside: every signature",
        "takes raw values.",
        "",
        "## Signatures",
        f"- `serving_default`: `examples` (serialized tf.Examples) -> {outputs}",
        f"- `predict_raw`: {raw_inputs} -> {outputs}",
        f"- {api}",
        "",
        "## Loading it",
    ]
    if ops:
        lines += [
            "It runs TensorFlow Decision Forests' inference ops beyond TensorFlow's own:",
            f"{', '.join(ops)}.",
            f"In Python: `pip install {notes['op_package']}`, then",
            "",
            "    import ydf_tf  # registers the ops; before loading",
            "    import tensorflow as tf",
            "    model = tf.saved_model.load(\"<this folder>\")",
            "",
            f"TF Serving {notes['tf_serving']} has these ops built in (the definitions of",
            f"{notes['op_definitions_of']}): its stock image serves this folder as a version.",
        ]
    else:
        lines += [
            "It runs TensorFlow's own ops only:",
            "",
            "    import tensorflow as tf",
            "    model = tf.saved_model.load(\"<this folder>\")",
            "",
            "Any TF Serving release serves it.",
        ]
    lines += [
        "",
        "Then, e.g. `model.signatures[\"serving_default\"](examples=tf.constant([...]))`.",
        "",
        "## Files",
        "- `assets.extra/raw_schema.json`: the raw columns and the task",
        "- `assets.extra/golden.tfrecord`: labelled raw eval rows (serialized tf.Examples)",
        "- `assets.extra/tf_serving_warmup_requests`: requests TF Serving replays at load",
        "- `assets.extra/model.json`: the family and what loading needs",
        "",
    ]
    return "\n".join(lines)
