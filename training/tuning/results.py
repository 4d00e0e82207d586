"""What a study leaves in JOB_DIR/tuning: trials.jsonl (one line per trial), the progress line,
trials.png, and best.json with the best trial's export published under JOB_DIR/export once
the gate's rule (preprocessing/reference/golden_score.py) lets it replace the version there."""
from __future__ import annotations

import json
import logging
import os
import shutil
import types
from typing import Optional, Sequence

from preprocessing.contract.schema import RAW_SCHEMA_ASSET, Schema
from preprocessing.files import saved_models
from preprocessing.reference.golden import GoldenSetError
from preprocessing.reference.golden_score import golden_slice_keys, judge, own_golden_set, read_golden
from preprocessing.reference.slices import SliceError
from preprocessing.reference.statistics import load_train_statistics
from training.exporting.export import next_version_dir
from training.exporting.serving_config import SERVING_DIR, serving_base_path, write_serving_config
from training.tuning.trials import trial_dir

log = logging.getLogger("training.tune")

STATES = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running",
          "WAITING": "waiting"}


def trial_records(trials) -> list:
    """One dict per trial (optuna FrozenTrials), in trial order."""
    out = []
    for t in sorted(trials, key=lambda t: t.number):
        out.append({
            "trial": t.number, "parameters": t.params, "state": STATES.get(t.state.name, t.state.name),
            "metric": t.value if t.state.name == "COMPLETE" else None,
            "reason": t.user_attrs.get("reason"),
            "started": t.datetime_start.isoformat() if t.datetime_start else None,
            "ended": t.datetime_complete.isoformat() if t.datetime_complete else None,
            "seconds": round((t.datetime_complete - t.datetime_start).total_seconds(), 1)
            if t.datetime_complete and t.datetime_start else None,
        })
    return out


def write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_trials(tuning_dir: str, records: list) -> str:
    path = os.path.join(tuning_dir, "trials.jsonl")
    write_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    return path


def best_record(records: list, goal: str) -> Optional[dict]:
    done = [r for r in records if r["state"] == "complete"]
    if not done:
        return None
    sign = -1 if goal == "maximize" else 1
    return min(done, key=lambda r: (sign * r["metric"], r["trial"]))


def progress_line(record: dict, records: list, spec, running: int) -> str:
    """One line per finished trial: its result, the best so far and an ETA."""
    finished = [r for r in records if r["state"] in ("complete", "pruned", "failed")]
    best = best_record(records, spec.goal)
    what = (f"{spec.metric} {record['metric']:.6g}" if record["state"] == "complete"
            else record["state"] + (f" ({record['reason']})" if record.get("reason") else ""))
    took = [r["seconds"] for r in finished if r["seconds"]]
    left = spec.max_trials - len(finished)
    eta = (sum(took) / len(took)) * left / max(1, spec.parallel_trials) if took else 0
    failed = sum(r["state"] == "failed" for r in records)
    return (f"trial {record['trial']} {what} in {record['seconds'] or 0:.0f} s | best "
            + (f"{best['metric']:.6g} (trial {best['trial']})" if best else "none yet")
            + f" | {len(finished)}/{spec.max_trials} done, {failed} failed, {running} running,"
            f" ETA {eta / 60:.1f} min")


def plot_trials(tuning_dir: str, records: list, spec) -> str:
    import matplotlib.pyplot as plt
    fig = trials_figure(records, spec)
    path = os.path.join(tuning_dir, "trials.png")
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return path


def trials_figure(records: list, spec):
    """Each complete trial's metric in trial order, the best so far, and the pruned and
    failed trials marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    done = [r for r in records if r["state"] == "complete"]
    ax.scatter([r["trial"] for r in done], [r["metric"] for r in done], label="complete")
    best, xs, ys = None, [], []
    for r in done:
        if best is None or (r["metric"] > best if spec.goal == "maximize" else r["metric"] < best):
            best = r["metric"]
        xs.append(r["trial"])
        ys.append(best)
    ax.step(xs, ys, where="post", color="C1", label="best so far")
    for state, marker in (("pruned", "v"), ("failed", "x")):
        rows = [r for r in records if r["state"] == state]
        if rows and done:
            ax.scatter([r["trial"] for r in rows], [ys[0]] * len(rows), marker=marker,
                       color="gray", label=f"{state} (no metric)")
    ax.set_xlabel("trial")
    ax.set_ylabel(f"{spec.metric} (eval split; {spec.goal})")
    ax.legend()
    ax.set_title(f"{len(done)} complete of {len(records)} trials")
    return fig


def newest_export(export_base: str) -> Optional[str]:
    """The newest complete version (raw schema written last) under an export base."""
    if not os.path.isdir(export_base):
        return None
    versions = sorted((int(v) for v in os.listdir(export_base) if v.isdigit()), reverse=True)
    for v in versions:
        path = os.path.join(export_base, str(v))
        if os.path.exists(os.path.join(path, RAW_SCHEMA_ASSET)):
            return path
    return None


def _loaded(path: str):
    return types.SimpleNamespace(path=path, module=saved_models.load(path))


def gate_check(candidate: str, current: Optional[str], tolerance: float,
               slice_by: Sequence[str] = (), slice_tolerance: Optional[float] = None) -> dict:
    """The gate's verdict on `candidate` replacing `current`, on the current version's golden
    set (else the candidate's), by the rule the prediction jobs swap versions with
    (golden_score.judge): overall, and with `slice_by` and `slice_tolerance` by slice."""
    with open(os.path.join(candidate, RAW_SCHEMA_ASSET)) as f:
        schema = Schema.loads(f.read())
    record = {"candidate": candidate, "current": current, "max_metric_regression": tolerance}
    if current is None:
        return dict(record, accepted=True, reason="no_current_version")
    golden = own_golden_set(current, candidate)
    if golden is None:
        return dict(record, accepted=True, reason="no_golden_set")
    try:
        rows = read_golden(golden, schema)
        keys = golden_slice_keys(slice_by, rows, schema, load_train_statistics(current)) \
            if slice_by and slice_tolerance is not None else None
    except GoldenSetError as e:
        return dict(record, accepted=False, reason="bad_golden_set", detail=str(e))
    except SliceError as e:
        return dict(record, accepted=False, reason="bad_slice_by", detail=str(e))
    accepted, found = judge(_loaded(candidate), _loaded(current), rows, schema.task,
                            tolerance, keys, slice_tolerance)
    return dict(record, accepted=accepted, golden_set=golden, **found)


PUBLISHED_FROM = os.path.join("assets.extra", "tuning_trial.json")  # in a published version


def publish(export: str, export_base: str, origin: Optional[dict] = None) -> str:
    """Copies a version under the export base as its newest version (whole, with `origin`,
    the study and trial it came from, then renamed)."""
    version = next_version_dir(export_base)
    os.makedirs(export_base, exist_ok=True)
    shutil.copytree(export, version + ".partial")
    if origin is not None:
        os.makedirs(os.path.join(version + ".partial", "assets.extra"), exist_ok=True)
        with open(os.path.join(version + ".partial", PUBLISHED_FROM), "w") as f:
            json.dump(origin, f)
    os.rename(version + ".partial", version)
    return version


def published_before(export_base: str, origin: dict) -> Optional[str]:
    """The version under `export_base` that a publish of `origin` made, if any: a study
    finished again (best.json lost in a stop after the publish) never publishes it twice."""
    if not os.path.isdir(export_base):
        return None
    for v in sorted((v for v in os.listdir(export_base) if v.isdigit()), key=int):
        try:
            with open(os.path.join(export_base, v, PUBLISHED_FROM)) as f:
                if json.load(f) == origin:
                    return os.path.join(export_base, v)
        except (OSError, ValueError):
            continue
    return None


def trial_metrics(tuning_dir: str, number: int) -> dict:
    try:
        with open(os.path.join(trial_dir(tuning_dir, number), "metrics.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def finish(tuning_dir: str, job_dir: str, records: list, spec, tolerance: float,
           slice_by: Sequence[str] = (), slice_tolerance: Optional[float] = None) -> dict:
    """best.json: the best trial (on the eval split), its test-split figure, and whether its
    export was published under JOB_DIR/export (gated). Idempotent: a study finished again
    publishes nothing twice."""
    best = best_record(records, spec.goal)
    if best is None:
        raise RuntimeError("no trial completed: nothing to export")
    path = os.path.join(tuning_dir, "best.json")
    if os.path.exists(path):
        with open(path) as f:
            before = json.load(f)
        if before.get("trial") == best["trial"] and before.get("published") and \
                os.path.isdir(before["published"]):
            return before
    m = trial_metrics(tuning_dir, best["trial"])
    export = m.get("export_dir")
    if not export or not os.path.isdir(export):
        raise RuntimeError(f"trial {best['trial']}'s export is missing ({export})")
    export_base = os.path.join(job_dir, "export")
    origin = {"study": os.path.realpath(tuning_dir), "trial": best["trial"]}
    already = published_before(export_base, origin)
    verdict = gate_check(export, newest_export(export_base), tolerance, slice_by,
                         slice_tolerance) if already is None \
        else {"candidate": export, "accepted": True, "reason": "published_before",
              "current": already}
    out = {"trial": best["trial"], "parameters": best["parameters"],
           "metric": {"name": spec.metric, "goal": spec.goal, "eval": best["metric"],
                      "test": (m.get("test") or {}).get(spec.metric)},
           "family": (m.get("model") or {}).get("family"), "export": export, "gate": verdict,
           "published": already or (publish(export, export_base, origin)
                                    if verdict["accepted"] else None)}
    if out["published"]:
        write_serving_config(os.path.join(job_dir, SERVING_DIR), "model",
                             serving_base_path(export_base))
    write_atomic(path, json.dumps(out, indent=2, sort_keys=True))
    return out
