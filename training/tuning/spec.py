"""The tuning spec: Vertex AI's study spec in a short YAML or JSON form, checked before any
trial runs (training.tune). Every parameter is a `training.task` flag; each bound and value
is checked by the flag's own parser and TrainConfig's rules, so a trial never starts with a
value its trainer refuses.

    metric: {name: accuracy, goal: maximize}   # default: rmse (regression) or accuracy
    max_trials: 20
    parallel_trials: 2
    max_failed_trials: 3                        # default: max(3, max_trials / 4)
    algorithm: bayesian                         # or random, grid
    early_stopping: median                      # optional
    parameters:
      learning_rate: {type: double, min: 0.0001, max: 0.1, scale: log}
      epochs: {type: integer, min: 5, max: 40}
      model: {type: categorical, values: [wide_deep, dnn, boosted_trees]}
      hidden_units: {type: categorical, values: ["64,32", "128,64,32"]}
      dropout: {type: discrete, values: [0.0, 0.1, 0.2]}
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
from typing import Optional, Tuple

from preprocessing.contract.spec_files import load_spec_file, one_line
from training.config import TUNING_METRICS, ConfigError, TrainConfig

TYPES = ("double", "integer", "categorical", "discrete")
SCALES = ("linear", "log")
ALGORITHMS = ("bayesian", "random", "grid")
GOALS = ("maximize", "minimize")
# Flags a trial may not be given: where it writes, and what it reports, are the tuner's.
RESERVED = ("data_dir", "job_dir", "model_dir", "checkpoint_dir", "tensorboard_dir",
            "hypertune_metric", "serving_base_path", "serving_model_name", "verbose")
# Flags that may be fixed for the study but never tuned: trials of another label predict
# another thing, and their figures cannot be compared (a trip_km trial "won" on its own RMSE
# and was published as the fare model).
NOT_TUNABLE = RESERVED + ("label_key",)
MAX_GRID = 10_000
MAX_COUNT = 2**31 - 1  # Vertex AI's trial counts are 32-bit integers


class SpecError(ValueError):
    """A spec that cannot run: one line saying what and where (control characters escaped)."""

    def __init__(self, message: str):
        message = one_line(message)
        super().__init__(message if len(message) <= 600 else message[:600] + "...")


@dataclasses.dataclass(frozen=True)
class Parameter:
    name: str
    type: str
    min: Optional[float] = None
    max: Optional[float] = None
    values: tuple = ()
    scale: str = "linear"

    def grid_values(self) -> list:
        if self.type == "integer":
            return list(range(int(self.min), int(self.max) + 1))
        return list(self.values)


@dataclasses.dataclass(frozen=True)
class TuneSpec:
    parameters: Tuple[Parameter, ...]
    metric: Optional[str] = None      # None: the task's (resolved at launch)
    goal: Optional[str] = None
    max_trials: int = 20
    parallel_trials: int = 1
    max_failed_trials: Optional[int] = None
    algorithm: str = "bayesian"
    early_stopping: Optional[str] = None

    @property
    def failure_limit(self) -> int:
        return self.max_failed_trials if self.max_failed_trials is not None else \
            max(3, self.max_trials // 4)

    def with_metric(self, task: str) -> "TuneSpec":
        """The spec with its metric and goal filled in for a model of `task`."""
        metric = self.metric or ("rmse" if task == "regression" else "accuracy")
        if (metric == "accuracy") != (task == "classification"):
            raise SpecError(f"metric {metric} is not a figure of a {task} model")
        return dataclasses.replace(self, metric=metric, goal=self.goal or natural_goal(metric))

    def identity(self) -> dict:
        """What a resumed study must share with the one on disk (counts may change)."""
        return {"parameters": [dataclasses.asdict(p) for p in self.parameters],
                "metric": self.metric, "goal": self.goal, "algorithm": self.algorithm,
                "early_stopping": self.early_stopping}


def natural_goal(metric: str) -> str:
    return "maximize" if metric == "accuracy" else "minimize"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise SpecError(message)


def trainer_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="training.task", add_help=False)
    TrainConfig.add_arguments(p)
    return p


def trainer_flags() -> set:
    return {a.dest for a in trainer_parser()._actions} - set(RESERVED)


def check_trainer_args(args: list) -> None:
    """A trial's flags, as training.task would take them (SpecError otherwise)."""
    try:
        TrainConfig.from_args(trainer_parser().parse_args(
            ["--data_dir", "d", "--job_dir", "j"] + [str(a) for a in args]))
    except ConfigError as e:
        raise SpecError(str(e)) from None


def flag_args(params: dict) -> list:
    return [x for k, v in params.items() for x in (f"--{k}", str(v))]


def _number(where: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SpecError(f"{where} must be a finite number, got {v!r}")
    return float(v)


def _keys(where: str, d, allowed: tuple) -> dict:
    if not isinstance(d, dict):
        raise SpecError(f"{where} must be a mapping, got {type(d).__name__}")
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {', '.join(map(str, unknown))} "
                        f"(known: {', '.join(allowed)})")
    return d


def _parameter(name: str, d, fixed: list) -> Parameter:
    where = f"parameters.{name}"
    d = _keys(where, d, ("type", "min", "max", "values", "scale"))
    kind = d.get("type")
    if kind not in TYPES:
        raise SpecError(f"{where}.type must be one of {', '.join(TYPES)}, got {kind!r}")
    scale = d.get("scale", "linear")
    if scale not in SCALES:
        raise SpecError(f"{where}.scale must be one of {', '.join(SCALES)}, got {scale!r}")
    if kind in ("double", "integer"):
        if "values" in d or "min" not in d or "max" not in d:
            raise SpecError(f"{where}: a {kind} parameter takes min and max (not values)")
        lo, hi = _number(where + ".min", d["min"]), _number(where + ".max", d["max"])
        if kind == "integer" and (lo != int(lo) or hi != int(hi)):
            raise SpecError(f"{where}: an integer parameter's min and max are integers")
        if lo > hi or (kind == "double" and lo == hi):
            raise SpecError(f"{where}: min {d['min']} must be below max {d['max']}")
        if scale == "log" and lo <= 0:
            raise SpecError(f"{where}: a log scale needs min > 0, got {d['min']}")
        p = Parameter(name, kind, lo, hi, scale=scale)
        probes = [int(lo), int(hi)] if kind == "integer" else [lo, hi]
    else:
        if "min" in d or "max" in d or not isinstance(d.get("values"), list) or not d["values"]:
            raise SpecError(f"{where}: a {kind} parameter takes a non-empty list of values")
        values = d["values"]
        if kind == "discrete":
            values = sorted(_number(f"{where}.values", v) for v in values)
            if scale == "log" and values[0] <= 0:
                raise SpecError(f"{where}: a log scale needs values > 0")
        else:
            if scale != "linear":
                raise SpecError(f"{where}: a categorical parameter has no scale")
            values = [str(v) for v in values]
        if len(set(values)) != len(values):
            raise SpecError(f"{where}: values repeat")
        p = Parameter(name, kind, values=tuple(values), scale=scale)
        probes = list(values)
    for v in probes:  # each bound and value, as the trainer would parse it
        try:
            check_trainer_args(fixed + [f"--{name}", str(v)])
        except SpecError as e:
            raise SpecError(f"{where}: {v!r} is refused by training.task: {e}") from None
    return p


def parse_spec(data, fixed: list = ()) -> TuneSpec:
    """A TuneSpec from the spec's parsed YAML/JSON; `fixed`: the trainer flags every trial
    gets (none may be a tuned parameter)."""
    fixed = [str(a) for a in fixed]
    data = _keys("the spec", data, ("metric", "max_trials", "parallel_trials",
                                    "max_failed_trials", "algorithm", "early_stopping",
                                    "parameters"))
    metric = _keys("metric", data.get("metric") or {}, ("name", "goal"))
    name, goal = metric.get("name"), metric.get("goal")
    if name is not None and name not in TUNING_METRICS:
        raise SpecError(f"metric.name must be one of {', '.join(TUNING_METRICS)}, got {name!r}")
    if goal is not None and goal not in GOALS:
        raise SpecError(f"metric.goal must be maximize or minimize, got {goal!r}")
    if name and goal and goal != natural_goal(name):
        raise SpecError(f"metric {name} is better when it is lower: its goal is "
                        f"{natural_goal(name)}, not {goal}" if name != "accuracy" else
                        "metric accuracy is better when higher: its goal is maximize")
    counts = {}
    for key, low in (("max_trials", 1), ("parallel_trials", 1), ("max_failed_trials", 1)):
        v = data.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or
                              not low <= v <= MAX_COUNT):
            raise SpecError(f"{key} must be an integer from {low} to {MAX_COUNT:,} (what "
                            f"Vertex AI takes), got {str(v)[:40]!r}")
        counts[key] = v
    algorithm = data.get("algorithm", "bayesian")
    if algorithm not in ALGORITHMS:
        raise SpecError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    stopping = data.get("early_stopping")
    if stopping not in (None, "none", "median"):
        raise SpecError(f"early_stopping must be median or none, got {stopping!r}")
    params = data.get("parameters")
    if not isinstance(params, dict) or not params:
        raise SpecError("parameters: at least one parameter is needed")
    given = {a[2:].split("=")[0] for a in fixed if a.startswith("--")}
    for flag in sorted(given & set(RESERVED)):
        raise SpecError(f"--{flag} is set by the tuner for each trial; it cannot be given "
                        "to every trial")
    try:
        check_trainer_args(fixed)
    except SpecError as e:
        raise SpecError(f"the trainer flags given to every trial: {e}") from None
    known = trainer_flags()
    for p in params:
        if p in NOT_TUNABLE:
            raise SpecError(f"parameters.{p}: --{p} " + (
                "is set by the tuner, not tuned" if p in RESERVED else
                "changes what the model predicts: trials could not be compared; give it "
                "as a flag every trial gets"))
        if p not in known:
            raise SpecError(f"parameters.{p}: training.task has no flag --{p}")
        if p in given:
            raise SpecError(f"parameters.{p}: --{p} is both tuned and given as a fixed flag")
    parameters = tuple(_parameter(str(k), v, fixed) for k, v in params.items())
    if algorithm == "grid":
        for p in parameters:
            if p.type == "double":
                raise SpecError(f"parameters.{p.name}: grid search takes integer, discrete or "
                                "categorical parameters, not double")
        size = math.prod(len(p.grid_values()) for p in parameters)
        if size > MAX_GRID:
            raise SpecError(f"the grid has {size:,} points; at most {MAX_GRID:,}")
    max_trials = counts["max_trials"] or 20
    return TuneSpec(parameters=parameters, metric=name, goal=goal or (natural_goal(name) if name
                                                                        else None),
                    max_trials=max_trials,
                    parallel_trials=min(counts["parallel_trials"] or 1, max_trials),
                    max_failed_trials=counts["max_failed_trials"], algorithm=algorithm,
                    early_stopping=None if stopping == "none" else stopping)


def load_spec(path: str, fixed: list = ()) -> TuneSpec:
    """Reads a YAML or JSON spec (JSON is YAML) as every spec is read (bounded in bytes and
    depth, no aliases, regular files only) and checks it."""
    try:
        data = load_spec_file(path, yaml_always=True)
    except ValueError as e:
        raise SpecError(str(e)) from None
    try:
        return parse_spec(data, fixed)
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None


def optuna_distributions(spec: TuneSpec) -> dict:
    import optuna.distributions as d
    out = {}
    for p in spec.parameters:
        if p.type == "double":
            out[p.name] = d.FloatDistribution(p.min, p.max, log=p.scale == "log")
        elif p.type == "integer":
            out[p.name] = d.IntDistribution(int(p.min), int(p.max), log=p.scale == "log")
        else:
            out[p.name] = d.CategoricalDistribution(list(p.values))
    return out


def spec_json(spec: TuneSpec) -> str:
    return json.dumps(spec.identity(), sort_keys=True)
