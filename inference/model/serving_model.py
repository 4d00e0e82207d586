"""The model a worker process serves: one loaded export version (`_Version`), and the
process's one `_Loaded` per model that looks for newer versions and swaps them in between
batches, gated (inference/model/gate.py) when the job asks for it."""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Optional

from inference.model.gate import Gate, Verdict
from inference.model.versions import (
    is_export,
    list_versions,
    load_raw_schema,
    model_version,
    resolve_model_dir,
)
from preprocessing.files import saved_models

SIGNATURE = "predict_raw"


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


class _Version:
    """One loaded export: its signature, input columns and version."""

    def __init__(self, path: str):

        self.path = path
        self.version = model_version(path)
        self.module = saved_models.load(path)
        LOADS[path] = LOADS.get(path, 0) + 1
        self.fn = self.module.signatures[SIGNATURE]
        self.inputs = {name: spec.dtype for name, spec in
                       self.fn.structured_input_signature[1].items()}
        # Signature inputs carry TensorFlow names; rows carry the user's column names.
        self.schema = load_raw_schema(path)
        by_tf = {tf_name: raw for raw, tf_name in self.schema.tf_names.items()}
        self.columns = {name: by_tf.get(name, name) for name in self.inputs}
        logging.info("Loaded model version %s from %s", self.version, path)


class _Loaded:
    """The model a worker process serves: one per process and model (`shared_model`), so
    DoFn instances and bundles that come and go (the DirectRunner makes them per bundle)
    neither reload it nor restart its refresh clock.

    With a watched base directory it looks for a newer complete version at most every
    `refresh_secs` seconds of wall time (0: before every batch), loads each new version once
    and swaps it in between batches. A batch takes one snapshot (`current`) and is predicted
    wholly by that version, so a switch never loses or repeats a row, and every prediction
    names the version that made it.
    """

    def __init__(self, path: str, watch_base: Optional[str] = None,
                 refresh_secs: Optional[float] = None, gate: Optional[tuple] = None):
        self._current = _Version(path)
        self.watch_base = watch_base
        self.refresh_secs = refresh_secs
        # (golden set or None, max metric regression): a newer version must pass it first.
        self.gate = Gate(*gate) if gate is not None else None
        self._refused: set = set()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    @property
    def current(self) -> _Version:
        return self._current

    def maybe_refresh(self) -> None:
        if not self.watch_base or self.refresh_secs is None or self.refresh_secs < 0:
            return
        now = time.monotonic()
        if now - self._checked < self.refresh_secs:
            return
        with self._lock:
            if now - self._checked < self.refresh_secs:
                return
            self._checked = now
            try:
                newest = resolve_model_dir(self.watch_base)
            except Exception as e:  # a listing hiccup must not stop serving
                logging.warning("Cannot list %s: %s", self.watch_base, _short(e))
                return
            if (newest != self._current.path and newest not in self._refused
                    and _is_newer(newest, self._current.path)):
                self._swap_to(newest)

    def _swap_to(self, path: str) -> None:
        """Loads `path` and, if the gate lets it, serves it; a refused version is never
        tried again by this process."""
        current = self._current
        try:
            candidate = _Version(path)
            verdict = self.gate.check(candidate, current) if self.gate else None
        except Exception as e:  # a version that cannot be loaded is refused, not fatal
            verdict = load_refused(e, path, current.version)
        if verdict is not None:
            GATE_EVENTS.append(verdict.record)
            if not verdict.accepted:
                self._refused.add(path)
                logging.warning("Model version %s refused, still serving %s: %s",
                                model_version(path), current.version, gate_line(verdict.record))
                return
        logging.info("New model version %s found; switching from %s%s", candidate.version,
                     current.version, f" ({gate_line(verdict.record)})" if verdict else "")
        self._current = candidate  # one assignment: readers see old or new


def load_refused(error: Exception, path: str, current_version: str) -> Verdict:
    """The verdict on a version that could not be loaded (or checked): refused, not fatal."""
    return Verdict(False, {"event": "version_refused", "reason": "load_error",
                           "detail": _short(error), "current_version": current_version,
                           "candidate_version": model_version(path)})


def gate_line(record: dict) -> str:
    """A gate record as one log line."""
    if "candidate_metric" in record and record["candidate_metric"] is not None:
        cur = record.get("current_metric")
        line = (f"{record['reason']}: golden-set {record['metric']} {record['candidate_metric']:.4g}"
                f" vs {'n/a' if cur is None else format(cur, '.4g')} (tolerance "
                f"{record['max_metric_regression']:g}, {record['golden_rows']} rows)")
        if record.get("slices_regressed"):
            line += (f"; worse by slice (tolerance {record['max_slice_regression']:g}): "
                     f"{record['detail']}")
        return line
    return record["reason"] + (f": {record['detail']}" if record.get("detail") else "")


# Gate records of this process (accepted and refused swaps), drained by the step after
# RunInference into the monitoring output; bounded in case nothing drains them.
GATE_EVENTS: collections.deque = collections.deque(maxlen=1000)


_SHARED: dict = {}
_SHARED_LOCK = threading.Lock()
LOADS: dict = {}  # version path -> times loaded in this process (tests and the soak read it)


def shared_model(path: str, watch_base: Optional[str] = None,
                 refresh_secs: Optional[float] = None, gate: Optional[tuple] = None) -> _Loaded:
    """The process's one `_Loaded` for this model and refresh policy."""
    key = (path, watch_base, refresh_secs, gate)
    with _SHARED_LOCK:
        model = _SHARED.get(key)
        if model is None:
            model = _SHARED[key] = _Loaded(path, watch_base, refresh_secs, gate)
        return model


def _is_newer(candidate: str, current: str) -> bool:
    a, b = model_version(candidate), model_version(current)
    return a.isdigit() and (not b.isdigit() or int(a) > int(b))


CHAIN_VERSIONS = 5  # the versions a launch replays the gate over (the newest ones)


def choose_version(model_dir: str, gate: Optional[tuple]) -> tuple:
    """The version a job launched on `model_dir` serves: (path, gate record or None).

    The gate compares a version with the one that served before it, never with a refused
    one: over the newest CHAIN_VERSIONS complete versions, oldest first, the oldest serves
    and each newer one takes over only if the gate accepts it against the version serving
    then. So a NaN version followed by a worse one leaves the last good version serving (the
    worse one was compared with it, not with the NaN one). Every job derives the same answer
    from the versions themselves; nothing is written to the model directory. The record
    returned is the newest version's check (accepted: it serves; refused: what serves)."""
    newest = resolve_model_dir(model_dir)
    if gate is None or is_export(model_dir.rstrip("/")):
        return newest, None
    found = list_versions(model_dir)[-CHAIN_VERSIONS:]
    if len(found) < 2:
        return newest, None
    checker = Gate(*gate)
    serving, serving_path, record = None, found[0], None
    for path in found[1:]:
        try:
            serving = serving or _Version(serving_path)
            candidate = _Version(path)
            verdict = checker.check(candidate, serving)
        except Exception as e:
            candidate, verdict = None, load_refused(e, path, model_version(serving_path))
        record = verdict.record
        if verdict.accepted:
            serving, serving_path = candidate, path
        elif path != found[-1]:
            logging.warning("Model version %s was refused against %s: %s", model_version(path),
                            model_version(serving_path), gate_line(record))
    if serving_path != newest:
        logging.warning("Model version %s refused, using %s: %s", model_version(newest),
                        model_version(serving_path), gate_line(record))
    return serving_path, record
