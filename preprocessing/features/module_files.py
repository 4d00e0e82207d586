"""User module files (local or gs://): TFX's `--module_file` convention, one loader for every
hook the project takes (preprocess's `preprocessing_fn`, the trainer's `build_model`)."""
from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile


def load_module_function(path: str, name: str):
    """The callable `name` from the Python file at `path` (copied locally first if remote).
    Raises FileNotFoundError or AttributeError with a message naming the file."""
    from apache_beam.io.filesystems import FileSystems

    local = path
    if "://" in path:
        tmp = tempfile.mkdtemp(prefix="module_file_")
        local = os.path.join(tmp, os.path.basename(path))
        with FileSystems.open(path) as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst)
    if not os.path.isfile(local):
        raise FileNotFoundError(f"module file {path} does not exist")
    spec = importlib.util.spec_from_file_location(
        "user_module_" + os.path.splitext(os.path.basename(local))[0], local)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise AttributeError(f"module file {path} has no callable {name}")
    return fn
