"""Typed, validated training configuration, from flags, with Vertex AI's environment honoured."""
from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

from preprocessing import flags, quiet
from preprocessing.flags import above, at_least, flag, within
from preprocessing.reference.slices import parse_slice_by
from training.exporting.serving_config import check_base_path, check_model_name, serving_base_path

DISTRIBUTIONS = ("auto", "single", "mirrored", "multi_worker", "parameter_server")
NETWORKS = ("wide_deep", "dnn")
MODELS = ("auto", "blend", "boosted_trees") + NETWORKS
TUNING_METRICS = ("rmse", "mae", "accuracy")  # metrics.json's eval figures a study can use
BACKBONES = ("small_cnn", "mobilenet_v2", "resnet50", "efficientnet_b0")
GROWING_STRATEGIES = ("BEST_FIRST_GLOBAL", "LOCAL")    # YDF's names
SPLIT_AXES = ("auto", "SPARSE_OBLIQUE", "AXIS_ALIGNED")   # auto: see training/models/trees.py
CATEGORICAL_ALGORITHMS = ("auto", "CART", "RANDOM")   # auto: see training/models/trees.py
CATEGORY_ENCODINGS = ("auto", "categories", "target", "frequent")   # auto: see training/models/trees.py
MAX_CHOICE_FOLDS = 10


class ConfigError(ValueError):
    pass


def int_list(text: str) -> List[int]:
    """--hidden_units: comma-separated integers."""
    try:
        return [int(u) for u in str(text).split(",") if u.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated integers, got {text!r}") from None


POSITIVE = at_least(1)


@dataclass
class TrainConfig:
    """training.task's flags, each declared once (preprocessing/flags.py): a field with its
    default, help, choices and range, in --help's order."""
    data_dir: str = flag(help="The preprocess job's output directory.", required=True)
    job_dir: str = flag(help="Where checkpoints, logs, metrics and the export go (a Vertex AI "
                             "tuning trial: JOB_DIR/trial_<CLOUD_ML_TRIAL_ID>).", required=True)
    epochs: Optional[int] = flag(help="Default: 10, or more for small data so that training "
                                      "takes at least 1000 optimizer steps "
                                      "(training/defaults.py).", type=int, check=POSITIVE)
    train_steps: Optional[int] = flag(help="Total training steps (overrides --epochs).",
                                      type=int, check=POSITIVE)
    steps_per_epoch: Optional[int] = flag(help="Default: train rows / batch size.", type=int,
                                          check=POSITIVE)
    batch_size: Optional[int] = flag(help="Global batch size. Default: train rows / 50 as a "
                                          "power of two within [32, 512].", type=int,
                                     check=POSITIVE)
    learning_rate: float = flag(3e-3, check=above(0))
    lr_schedule: Optional[str] = flag(
        help="cosine: decay the learning rate to 0 over the training steps. Default: cosine "
             "when small data needed extra epochs, else constant.",
        choices=("constant", "cosine"))
    model: str = flag(
        "auto", "Tables: auto (default) trains wide_deep and boosted_trees and keeps the "
                "network, the trees or their average (blend), by a validation slice of the "
                "train split (never the eval split); wide_deep / dnn: the network; "
                "boosted_trees: gradient boosted trees (YDF) in the same export. Images always "
                "train the CNN. blend: the average of wide_deep and boosted_trees, without a "
                "choice.", choices=MODELS)
    # The boosted trees (docs/training.md).
    num_trees: Optional[int] = flag(
        help="boosted_trees: the most trees grown. Default: 300 (from 10,000 train rows "
             "YDF stops when the loss on its own 10%% validation rows stops improving); where "
             "--model auto chooses their count on cross-fitted folds (--choice_folds above "
             "1) and the kept trees' best count comes within 50 rounds of 300, their folds "
             "are grown again to at most 1000.", type=int,
        check=POSITIVE)
    num_forests: Optional[int] = flag(
        help="boosted_trees: forests grown on the same rows with the seeds --seed, --seed+1, "
             "... and averaged in the export. Default: 5 where --model auto chooses the trees "
             "on cross-fitted folds (--choice_folds above 1) and the kept trees depend on "
             "their seed (oblique splits, RANDOM category splits, --subsample under 1 or "
             "mean labels), else 1.", type=int, check=within(1, 50))
    max_depth: int = flag(6, "boosted_trees: the deepest a tree grows.", check=POSITIVE)
    shrinkage: float = flag(0.05, "boosted_trees: the learning rate.",
                            check=(lambda v: 0 < v <= 1, "in (0, 1]"))
    min_examples: Optional[int] = flag(
        help="boosted_trees: rows a leaf holds at least. Default: 5; where --model auto "
             "chooses the trees' shape on cross-fitted folds under 10,000 train rows, trees "
             "with leaves of 20 rows (scikit-learn's min_samples_leaf) are grown too and kept "
             "if lower by 2 standard errors on the rows held out from them (3 on the other "
             "split axis).", type=int, check=POSITIVE)
    subsample: float = flag(1.0, "boosted_trees: the share of rows each tree is grown on.",
                            check=(lambda v: 0 < v <= 1, "in (0, 1]"))
    growing_strategy: str = flag(
        "BEST_FIRST_GLOBAL", "boosted_trees: BEST_FIRST_GLOBAL grows the best leaf of the "
        "whole tree first (up to --max_num_nodes); LOCAL grows every leaf to --max_depth.",
        choices=GROWING_STRATEGIES)
    max_num_nodes: int = flag(31, "boosted_trees: nodes per tree with BEST_FIRST_GLOBAL.",
                              check=POSITIVE)
    split_axis: str = flag(
        "auto", "boosted_trees: SPARSE_OBLIQUE splits on random sparse sums of numbers "
                "(min-max normalised); AXIS_ALIGNED on one number at a time. auto (default): "
                "with --model auto or blend, both are grown on the same rows and "
                "SPARSE_OBLIQUE is kept unless AXIS_ALIGNED is lower by 3 standard errors on "
                "the rows held out from them; alone, SPARSE_OBLIQUE. Past 20 classes, "
                "AXIS_ALIGNED alone (a tree per class per round).", choices=SPLIT_AXES)
    categorical_algorithm: str = flag(
        "auto", "boosted_trees: how a category split is searched (YDF's CART or RANDOM). "
                "auto (default): where --category_encoding auto grows both encodings and the "
                "label has over two classes, trees with RANDOM category splits are grown too "
                "and kept if lower by 2 standard errors on the rows held out from them; else "
                "CART.",
        choices=CATEGORICAL_ALGORITHMS)
    category_encoding: str = flag(
        "auto", "boosted_trees: a categorical feature of over 30 values as categories to "
                "split on, as its cross-fitted mean label (target), or as categories whose "
                "values seen under 10 times in the trees' rows are one value (frequent). auto "
                "(default): under 10,000 train rows with --model auto or blend, all three are "
                "grown on the same rows and frequent kept unless another is lower by 2 "
                "standard errors on the rows held out from them; else categories.",
        choices=CATEGORY_ENCODINGS)
    tree_threads: int = flag(
        0, "boosted_trees: YDF's training threads. 0 (default): one under 200,000 train rows "
           "(where more measured slower: benchmarks/tree_threads.py), else one per core.",
        check=(lambda v: v >= 0, ">= 0 (0: automatic)"))
    trees_max_rows: int = flag(
        1_000_000, "boosted_trees: train rows the trees hold at most. Past this (or past what "
                   "half the available memory holds) they read a seeded uniform sample, and "
                   "--model auto keeps the trees grown on it instead of growing them again on "
                   "all rows (one growth on 4M rows took 28-41 minutes on 2 cores: "
                   "docs/performance.md).",
        check=POSITIVE)
    label_key: Optional[str] = flag(
        help="Train on this transformed feature instead of the schema's raw label (TFX's "
             "<name>_xf convention): float -> regression, int -> classification.")
    model_module: Optional[str] = flag(
        help="A Python file (local or gs://) defining build_model(feature_info, config) -> "
             "tf_keras.Model; replaces --model (see training/examples/custom_model.py).")
    # The network and its input pipeline.
    hidden_units: List[int] = flag(help="Comma-separated layer sizes.", type=int_list,
                                   default_factory=lambda: [128, 64, 32],
                                   check=(lambda v: bool(v) and all(u >= 1 for u in v),
                                          "positive integers"))
    embedding_dim: int = flag(8, check=POSITIVE)
    dropout: float = flag(0.0, check=(lambda v: 0 <= v < 1, "in [0, 1)"))
    hide_missing: float = flag(
        0.1, "The network, tables: each present value of a column with missing values is "
             "hidden (stored as missing: imputed mean, flag set) with this probability while "
             "training, so missing does not come to mean what it meant for the rows that had "
             "it (small entities, say). 0 turns it off; serving is unchanged.",
        check=(lambda v: 0 <= v < 1, "in [0, 1)"))
    shuffle_buffer: int = flag(50_000, check=POSITIVE)
    cache: bool = flag(False, "Cache the parsed training data in memory (after the first epoch "
                              "input costs ~nothing; use when the train split fits in RAM).",
                       action="store_true")
    augment: bool = flag(False, "Image data: random flips, rotations, contrast.",
                         action="store_true")
    jit_compile: bool = flag(False, "Compile the training step with XLA (off by default: see "
                                    "the README's measured figures for your model and "
                                    "hardware).", action="store_true")
    mixed_precision: bool = flag(False, "GPU: compute in float16 with float32 variables and "
                                        "outputs (Keras' mixed_float16 policy); ignored, with a "
                                        "warning, without a GPU, where float16 is slower.",
                                 action="store_true")
    backbone: str = flag("small_cnn", "Image data: the small CNN, or a Keras application built "
                                      "without downloaded weights (trained from scratch).",
                         choices=BACKBONES)
    eval_steps: Optional[int] = flag(help="Default: the whole eval split.", type=int,
                                     check=POSITIVE)
    early_stopping_patience: Optional[int] = flag(
        help="Epochs without a better holdout loss before training stops (the best weights "
             "are kept). Default: 10 for tabular data, whose validation data is a hashed "
             "1-in-10 slice of the train split; off for images. 0 turns it off.", type=int)
    choice_folds: Optional[int] = flag(
        help="--model auto: the folds of the train split the candidates are scored on, each "
             "held out in turn from a network and trees trained on the rest (every row scored "
             "once); 1: one hashed 1-in-10 slice. Default: 4 for a train split under 10,000 "
             "rows on one process (each family then trains 4 more times: 3 folds and the "
             "refit on all rows), else 1.", type=int, check=within(1, MAX_CHOICE_FOLDS))
    checkpoint_steps: int = flag(200, "Backup (resume) frequency in steps.", check=POSITIVE)
    keep_checkpoints: int = flag(3, "Per-epoch weight checkpoints to keep (older ones are "
                                    "deleted).", check=POSITIVE)
    distribution: str = flag("auto", "auto: from TF_CONFIG (ps -> parameter_server, several "
                                     "workers -> multi_worker), else mirrored with several "
                                     "GPUs, else single.", choices=DISTRIBUTIONS)
    serving_model_name: str = flag("model", "The model's name in TF Serving's models.config, "
                                            "written to job_dir/serving/ with "
                                            "batching_parameters.txt (see templates/serving/).")
    serving_base_path: Optional[str] = flag(
        help="The export base as TF Serving sees it in models.config (e.g. /models/model in a "
             "container). Default: --model_dir, absolute.")
    hypertune_metric: Optional[str] = flag(
        help="The figure reported with the cloudml-hypertune convention (a Vertex AI tuning "
             "trial, python -m training.tune): per epoch on the validation slice, then on the "
             "eval split. Default: rmse (regression) or accuracy (classification).",
        choices=TUNING_METRICS)
    slice_by: Tuple[str, ...] = flag(
        (), "Repeatable. The exported model's metrics by slice of these raw columns (a number "
            "by the train split's quintiles, a string by its values), on the golden set (a "
            "sample of the eval split's rows): metrics.json `eval_slices` and report.html.",
        action="append", metavar="COL[,COL...]")
    importance_rows: int = flag(
        5000, "Eval rows the permutation importance in metrics.json and report.html is "
              "measured on (the first in file order); 0: none (a tuning trial saves the time).",
        check=at_least(0))
    seed: int = flag(42)
    deterministic: Optional[bool] = flag(
        help="TensorFlow's deterministic ops: the same data, flags and seed give the same "
             "network. Default: on for a train split under 10,000 rows on one process.",
        action=argparse.BooleanOptionalAction)
    refit_on_eval: Optional[bool] = flag(
        help="Train the model --model auto kept a last time on the train and eval splits "
             "together before export, less the golden set's rows (the gate judges a new "
             "version on them) unless it holds under 240 (then the export says it learned "
             "them and the gate compares no metric on them); its eval figures are those of "
             "the same model trained on the "
             "train split alone. Default: on where the choice was made on cross-fitted folds "
             "(a train split under 10,000 rows on one process) and --slice_by is not given.",
        action=argparse.BooleanOptionalAction)
    verbose: int = flag(0, "Keras' own lines per epoch (0: only the trainer's progress lines).",
                        choices=(0, 1, 2))
    verbosity: str = quiet.verbosity_flag()
    # Not flags: Vertex AI sets them (AIP_*), else they follow --job_dir.
    model_dir: Optional[str] = None          # export base (default job_dir/export)
    checkpoint_dir: Optional[str] = None     # default job_dir/checkpoints
    tensorboard_dir: Optional[str] = None    # default job_dir/logs

    def __post_init__(self):
        # A Vertex AI tuning trial (it sets CLOUD_ML_TRIAL_ID) writes in a folder of its own.
        trial = os.environ.get("CLOUD_ML_TRIAL_ID", "")
        if trial.isalnum() and self.job_dir and \
                os.path.basename(self.job_dir.rstrip("/")) != f"trial_{trial}":
            self.job_dir = os.path.join(self.job_dir, f"trial_{trial}")
        # Vertex AI custom training sets these; they win over the defaults under job_dir.
        self.model_dir = self.model_dir or os.environ.get("AIP_MODEL_DIR") or \
            os.path.join(self.job_dir, "export")
        self.checkpoint_dir = self.checkpoint_dir or os.environ.get("AIP_CHECKPOINT_DIR") or \
            os.path.join(self.job_dir, "checkpoints")
        self.tensorboard_dir = self.tensorboard_dir or \
            os.environ.get("AIP_TENSORBOARD_LOG_DIR") or os.path.join(self.job_dir, "logs")
        self.validate()

    def validate(self):
        if not self.data_dir or not self.job_dir:
            raise ConfigError("--data_dir and --job_dir are required")
        said = flags.problem(self)
        if said:
            raise ConfigError(said)
        try:
            check_model_name(self.serving_model_name)
        except ValueError as e:
            raise ConfigError(f"--serving_model_name: {e}") from None
        try:  # what models.config will hold, checked before training, not after the export
            check_base_path(self.serving_base_path or serving_base_path(self.model_dir))
        except ValueError as e:
            raise ConfigError(f"--serving_base_path (or --model_dir): {e}") from None
        if self.refit_on_eval and self.slice_by:
            raise ConfigError("--refit_on_eval trains the exported model on the eval rows "
                              "that --slice_by measures it on: give one of them")
        if self.choice_folds is not None and self.choice_folds > 1 \
                and self.early_stopping_patience:
            raise ConfigError("--choice_folds above 1 trains every fold's network on the "
                              "same schedule: it needs --early_stopping_patience 0")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        flags.add_arguments(parser, cls)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "TrainConfig":
        kw = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
        kw["slice_by"] = parse_slice_by(getattr(args, "slice_by", None) or ())
        return cls(**kw)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
