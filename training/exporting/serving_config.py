"""TF Serving's configuration for the exports: `models.config` and `batching_parameters.txt`.

training.task writes both to `<job_dir>/serving/` after each export (text-format protobufs, read
by `tensorflow_model_server --model_config_file=... --enable_batching
--batching_parameters_file=...`; templates/serving/ runs the official image with them):
  models.config            ModelServerConfig: the model's name and base path (the export base,
                           whose numeric subdirectories are the versions) and a version policy
                           serving the latest two versions: the new one and the one before, for
                           A/B comparison (address `/versions/N`) and rollback.
  batching_parameters.txt  BatchingParameters: server-side request batching. The values come from
                           benchmarks/serving_batching.py on a 2-core machine (docs/performance.md).
"""
from __future__ import annotations

import dataclasses
import os
import re

SERVING_DIR = "serving"
MODELS_CONFIG = "models.config"
BATCHING_FILE = "batching_parameters.txt"
VERSIONS_SERVED = 2
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclasses.dataclass(frozen=True)
class Batching:
    max_batch_size: int
    batch_timeout_micros: int
    num_batch_threads: int
    max_enqueued_batches: int

    def __post_init__(self):
        for f in dataclasses.fields(self):
            minimum = 0 if f.name == "batch_timeout_micros" else 1
            if not isinstance(getattr(self, f.name), int) or getattr(self, f.name) < minimum:
                raise ValueError(f"batching {f.name} must be an integer >= {minimum}")


# Measured by benchmarks/serving_batching.py on 2 cores with make demo's model (2026-11-25,
# docs/performance.md): the largest batch whose p99 stays within 5 ms (1024 rows: 4.85 ms,
# 776k rows/s against 3.3k for single rows); no timeout (none measured better under 32
# clients, and a lone caller never waits); one batch thread per core; a queue of about one
# second of work at that rate, beyond which TF Serving refuses requests (UNAVAILABLE)
# instead of letting latency grow. Re-run it for another model or machine.
BATCHING = Batching(max_batch_size=1024, batch_timeout_micros=0, num_batch_threads=2,
                    max_enqueued_batches=758)


def check_model_name(name: str) -> str:
    if not _MODEL_NAME.fullmatch(name or ""):  # `$` would let a trailing newline pass
        raise ValueError(f"serving model name {name!r}: letters, digits, '_', '.', '-' "
                         "(it is the URL path /v1/models/<name>)")
    return name


def check_base_path(text: str) -> str:
    """A base path models.config can hold: no control character (a newline would end the
    quoted string and break the config the server reads)."""
    if any(ord(ch) < 0x20 or ord(ch) == 0x7f for ch in text):
        raise ValueError(f"serving base path {text!r} has a control character")
    return text


def _quoted(text: str) -> str:
    check_base_path(text)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def models_config_text(name: str, base_path: str, versions: int = VERSIONS_SERVED) -> str:
    check_model_name(name)
    return ("model_config_list {\n"
            "  config {\n"
            f"    name: {_quoted(name)}\n"
            f"    base_path: {_quoted(base_path)}\n"
            '    model_platform: "tensorflow"\n'
            f"    model_version_policy {{ latest {{ num_versions: {int(versions)} }} }}\n"
            "  }\n"
            "}\n")


def batching_text(b: Batching = BATCHING) -> str:
    return "".join(f"{f.name} {{ value: {getattr(b, f.name)} }}\n"
                   for f in dataclasses.fields(b))


def serving_base_path(model_dir: str) -> str:
    """The export base as TF Serving must see it: absolute for a local directory."""
    return model_dir if "://" in model_dir else os.path.abspath(model_dir)


def write_serving_config(out_dir: str, name: str, base_path: str,
                         batching: Batching = BATCHING) -> dict:
    """Writes both files into `out_dir`; returns their paths."""
    import tensorflow as tf  # here: the config check imports this module without TensorFlow
    tf.io.gfile.makedirs(out_dir)
    paths = {"models_config": os.path.join(out_dir, MODELS_CONFIG),
             "batching_parameters": os.path.join(out_dir, BATCHING_FILE)}
    for key, text in (("models_config", models_config_text(name, base_path)),
                      ("batching_parameters", batching_text(batching))):
        with tf.io.gfile.GFile(paths[key], "w") as f:
            f.write(text)
    return paths
