"""The study loop: Optuna proposes (ask), trial processes run, their metrics go back (tell).
The study lives in Optuna's file journal, so a tuner stopped at any moment continues where it
was: finished trials are kept, a trial that was running is started again in its own folder
(its trainer resumes from its backup), and the count of trials stays max_trials."""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from typing import Optional

from training.tuning import results as tune_results
from training.tuning import tune_report
from training.tuning.spec import SpecError, TuneSpec, flag_args, optuna_distributions
from training.tuning.trials import TrialProcess, trial_dir

log = logging.getLogger("training.tune")
POLL_SECONDS = 1.0


@dataclasses.dataclass
class Outcome:
    best: Optional[dict]
    stopped: Optional[str]
    records: list


def sampler(spec: TuneSpec, seed: int):
    import optuna
    if spec.algorithm == "grid":
        class Grid(optuna.samplers.GridSampler):
            # GridSampler stops the study once the grid is used up, which only works inside
            # study.optimize; here the tuner stops at max_trials (capped to the grid's size).
            def after_trial(self, study, trial, state, values):
                pass
        return Grid({p.name: p.grid_values() for p in spec.parameters}, seed=seed)
    if spec.algorithm == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # constant_liar: parallel trials are not proposed on top of one another
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True,
                                      n_startup_trials=max(3, min(10, spec.max_trials // 3)))


def pruner(spec: TuneSpec):
    import optuna
    if spec.early_stopping == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=2)
    return optuna.pruners.NopPruner()


class Study:
    def __init__(self, cfg, spec: TuneSpec):
        import optuna
        from optuna.storages.journal import JournalFileBackend, JournalStorage
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        self.cfg = cfg
        if spec.algorithm == "grid":
            size = math.prod(len(p.grid_values()) for p in spec.parameters)
            if size < spec.max_trials:
                log.info("the grid has %d points: max_trials %d -> %d", size, spec.max_trials,
                         size)
                spec = dataclasses.replace(spec, max_trials=size,
                                           parallel_trials=min(spec.parallel_trials, size))
        self.spec = spec
        storage = JournalStorage(JournalFileBackend(
            os.path.join(cfg.tuning_dir, "study.journal")))
        self.study = optuna.create_study(study_name="tune", storage=storage, load_if_exists=True,
                                         direction=spec.goal, pruner=pruner(spec),
                                         sampler=sampler(spec, cfg.seed))
        # A resumed study draws new proposals, not the first run's again.
        self.study.sampler = sampler(spec, cfg.seed + len(self.study.trials))
        identity = json.loads(json.dumps(spec.identity()))
        saved = self.study.user_attrs.get("spec")
        if saved is None:
            self.study.set_user_attr("spec", identity)
        elif saved != identity:
            raise SpecError(f"{cfg.tuning_dir} holds a study of another spec (parameters, "
                            "metric, algorithm or early stopping differ): run it with its own "
                            "spec, or give another --job_dir")
        self.distributions = optuna_distributions(spec)
        self.running: dict = {}    # trial number -> (optuna Trial, TrialProcess)
        self.reported: dict = {}   # trial number -> steps already reported to the pruner

    # ---- trials ---------------------------------------------------------------------------
    def _launch(self, trial, params: dict) -> None:
        try:
            proc = TrialProcess(trial.number, trial_dir(self.cfg.tuning_dir, trial.number),
                                self.cfg.data_dir, self.spec.metric,
                                list(self.cfg.trainer_args) + flag_args(params),
                                self.cfg.trial_timeout)
        except OSError as e:
            trial.set_user_attr("reason", f"could not start: {e}")
            self.study.tell(trial, state=self._states().FAIL)
            return
        self.running[trial.number] = (trial, proc)

    def _states(self):
        import optuna
        return optuna.trial.TrialState

    def resume(self) -> int:
        """Starts again the trials a stopped tuner left running."""
        import optuna
        left = self.study.get_trials(deepcopy=False, states=(self._states().RUNNING,))
        for ft in left:
            print(f"training.tune: trial {ft.number} was running when the tuner stopped: "
                  f"started again {ft.params}", flush=True)
            self.reported[ft.number] = set(ft.intermediate_values)
            self._launch(optuna.trial.Trial(self.study, ft._trial_id), ft.params)
        return len(left)

    def _start_new(self) -> None:
        trial = self.study.ask(self.distributions)
        self.reported[trial.number] = set()
        log.info("trial %d starts: %s", trial.number, trial.params)
        self._launch(trial, trial.params)

    def _prune(self, trial, proc: TrialProcess) -> bool:
        """Reports new per-epoch figures; True when the pruner stopped the trial."""
        if self.spec.early_stopping != "median":
            return False
        seen = self.reported[trial.number]
        for step, value in proc.measurements():
            if step not in seen:
                seen.add(step)
                trial.report(value, step)
        if seen and trial.should_prune():
            proc.stop()
            step = max(seen)
            trial.set_user_attr("reason", f"stopped at epoch {step}: its {self.spec.metric} "
                                "trailed the median of earlier trials at that epoch")
            self.study.tell(trial, state=self._states().PRUNED)
            return True
        return False

    def _reap(self) -> list:
        """Tells the study about each trial that ended; returns their numbers."""
        ended = []
        for number, (trial, proc) in list(self.running.items()):
            if self._prune(trial, proc):
                ended.append(number)
            elif proc.poll() is not None:
                value, reason = proc.outcome()
                if value is None:
                    trial.set_user_attr("reason", reason)
                    self.study.tell(trial, state=self._states().FAIL)
                else:
                    self.study.tell(trial, value)
                ended.append(number)
            else:
                continue
            del self.running[number]
        return ended

    def _records(self) -> list:
        records = tune_results.trial_records(self.study.get_trials(deepcopy=False))
        tune_results.write_trials(self.cfg.tuning_dir, records)
        return records

    # ---- the loop -------------------------------------------------------------------------
    def run(self) -> Outcome:
        spec, stopped = self.spec, None
        if self.resume():
            self._records()
        while True:
            ended = self._reap()
            if ended:
                records = self._records()
                for n in ended:
                    print("training.tune: " + tune_results.progress_line(
                        records[n], records, spec, len(self.running)), flush=True)
                tune_results.plot_trials(self.cfg.tuning_dir, records, spec)
                tune_report.write_report(self.cfg.tuning_dir, records, spec)
            trials = self.study.get_trials(deepcopy=False)
            failed = [t for t in trials if t.state == self._states().FAIL]
            if len(failed) >= spec.failure_limit and not stopped:
                stopped = (f"{len(failed)} trials failed (max_failed_trials "
                           f"{spec.failure_limit}); the last: "
                           f"{failed[-1].user_attrs.get('reason')}")
                log.error("training.tune: %s: no new trial starts", stopped)
            started = False
            while not stopped and len(self.running) < spec.parallel_trials and \
                    len(trials) < spec.max_trials:
                self._start_new()
                trials = self.study.get_trials(deepcopy=False)
                started = True
            if started:
                self._records()
            if not self.running:
                break
            time.sleep(POLL_SECONDS)
        records = self._records()
        if records:
            tune_results.plot_trials(self.cfg.tuning_dir, records, spec)
        if stopped:
            return Outcome(None, stopped, records)
        try:
            best = tune_results.finish(self.cfg.tuning_dir, self.cfg.job_dir, records, spec,
                                       self.cfg.max_metric_regression,
                                       self.cfg.trainer_slice_by,
                                       self.cfg.max_slice_regression)
        except RuntimeError as e:
            return Outcome(None, str(e), records)
        tune_report.write_report(self.cfg.tuning_dir, records, spec, best)
        return Outcome(best, None, records)
