"""Export folders and their versions: a model dir is an export, or a base of numeric
versions of which the newest complete one is used (a version is complete once its SavedModel
and raw schema are both there)."""
from __future__ import annotations

import logging
import os

from apache_beam.io.filesystems import FileSystems

from preprocessing.contract.schema import RAW_SCHEMA_ASSET, RAW_SCHEMA_FILE, Schema
from preprocessing.files.filesys import is_remote_path


def is_export(path: str) -> bool:
    return FileSystems.exists(FileSystems.join(path, "saved_model.pb"))


def resolve_model_dir(model_dir: str) -> str:
    """An export dir as is; a base dir -> its newest numeric version (TF Serving's rule)."""
    model_dir = model_dir.rstrip("/")
    if is_export(model_dir):
        return model_dir
    versions = list_versions(model_dir)
    if not versions:
        raise FileNotFoundError(f"{model_dir} has no SavedModel and no numeric version "
                                f"directories holding one")
    return versions[-1]


def is_complete(version_dir: str) -> bool:
    """Whether an export is whole: the export writes the raw schema asset last (after the
    graph and the variables), so a version being written, or one cut short, lacks it."""
    return all(FileSystems.exists(FileSystems.join(version_dir, name))
               for name in ("saved_model.pb", "variables/variables.index", RAW_SCHEMA_ASSET))


def list_versions(base: str):
    """Numeric version dirs under `base` that hold a complete SavedModel, oldest first;
    incomplete ones are skipped with a warning (a newer half-written export is not used)."""
    found = []
    for version_dir in _candidate_dirs(base):
        name = version_dir.rstrip("/").split("/")[-1]
        if not (name.isascii() and name.isdigit()):  # '²'.isdigit() is True too
            logging.warning("ignoring %s under the model folder: a version is a folder named "
                            "by digits (0-9) only", version_dir)
            continue
        if not is_complete(version_dir):
            logging.warning("skipping model version %s: incomplete (no variables or no %s)",
                            version_dir, RAW_SCHEMA_ASSET)
            continue
        found.append((int(name), version_dir))
    return [d for _, d in sorted(found)]


def _candidate_dirs(base: str) -> list:
    """Folders under `base` holding a saved_model.pb. Locally a symlinked version is
    followed, as TF Serving does (Beam's local match does not follow links), and one whose
    target is gone is reported."""
    if is_remote_path(base):
        try:
            matches = FileSystems.match([FileSystems.join(base, "*", "saved_model.pb")])
        except Exception:
            return []
        return [m.path[: -len("/saved_model.pb")] for m in matches[0].metadata_list]
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    for e in entries:
        if e.is_symlink() and not os.path.exists(e.path):
            logging.warning("ignoring %s under the model folder: a symlink to %s, which does "
                            "not exist", e.path, os.readlink(e.path))
    return sorted(e.path for e in entries
                  if os.path.isfile(os.path.join(e.path, "saved_model.pb")))


def model_version(path: str) -> str:
    return path.rstrip("/").split("/")[-1]


def load_raw_schema(export_dir: str) -> Schema:
    with FileSystems.open(FileSystems.join(export_dir, RAW_SCHEMA_ASSET)) as f:
        return Schema.loads(f.read().decode("utf-8"), RAW_SCHEMA_FILE)
