"""Train on the preprocess output and export a model that carries the transform.

    python -m training.task --data_dir out/prep --job_dir out/job --epochs 5

Distributed on one machine (real processes on localhost, each with its own TF_CONFIG):

    python -m tools.launch --workers 2 -- --data_dir out/prep --job_dir out/job

On Vertex AI / Kubernetes the platform sets TF_CONFIG (and AIP_MODEL_DIR etc.); see templates/.
"""
from __future__ import annotations

import argparse
import logging
import sys

from preprocessing.reference.evaluation import metrics_table
from training.config import ConfigError, TrainConfig


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.task", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    TrainConfig.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        cfg = TrainConfig.from_args(args)
    except ConfigError as e:
        parser.error(str(e))
    from training.data import EmptySplitError, LabelKeyError, MissingDataError
    from training.guards import TrainingError
    from training.trainer import train_and_evaluate
    try:
        metrics = train_and_evaluate(cfg)
    except (MissingDataError, EmptySplitError, LabelKeyError, TrainingError) as e:
        # Only the errors the trainer raises about the user's data and flags: any other is a
        # bug, and its traceback is what a report of it needs.
        print(f"training.task: error: {e}", file=sys.stderr)
        return 2
    if metrics.get("chief", True):
        print(f"training: export {metrics['export_dir']}; metrics {cfg.job_dir}/metrics.json; "
              f"eval\n{metrics_table(metrics['eval'])}\ntraining: report {cfg.job_dir}/report.html")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sys.exit(main())
