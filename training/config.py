"""Typed, validated training configuration, from flags, with Vertex AI's environment honoured."""
from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from preprocessing import quiet
from preprocessing.reference.slices import parse_slice_by
from training.exporting.serving_config import check_base_path, check_model_name, serving_base_path

DISTRIBUTIONS = ("auto", "single", "mirrored", "multi_worker", "parameter_server")
NETWORKS = ("wide_deep", "dnn")
MODELS = ("auto", "blend", "boosted_trees") + NETWORKS
TUNING_METRICS = ("rmse", "mae", "accuracy")  # metrics.json's eval figures a study can use
BACKBONES = ("small_cnn", "mobilenet_v2", "resnet50", "efficientnet_b0")
GROWING_STRATEGIES = ("BEST_FIRST_GLOBAL", "LOCAL")    # YDF's names
SPLIT_AXES = ("auto", "SPARSE_OBLIQUE", "AXIS_ALIGNED")   # auto: see training/models/trees.py
CATEGORICAL_ALGORITHMS = ("CART", "RANDOM")
CATEGORY_ENCODINGS = ("auto", "categories", "target")   # auto: see training/models/trees.py
MAX_CHOICE_FOLDS = 10


class ConfigError(ValueError):
    pass


@dataclass
class TrainConfig:
    data_dir: str
    job_dir: str
    epochs: Optional[int] = None             # None: from the data (training/defaults.py)
    train_steps: Optional[int] = None       # total steps; overrides epochs when set
    steps_per_epoch: Optional[int] = None   # default: train rows / batch size
    batch_size: Optional[int] = None        # global batch size; None: from the data
    learning_rate: float = 3e-3
    lr_schedule: Optional[str] = None       # constant or cosine (decays to 0); None: auto
    model: str = "auto"                      # auto: wide_deep, boosted_trees or their blend
    num_trees: int = 300                     # boosted_trees (docs/training.md)
    max_depth: int = 6
    shrinkage: float = 0.05
    min_examples: int = 5
    subsample: float = 1.0
    growing_strategy: str = "BEST_FIRST_GLOBAL"
    max_num_nodes: int = 31                  # per tree, with BEST_FIRST_GLOBAL
    split_axis: str = "auto"                 # both grown, chosen on held-out rows
    categorical_algorithm: str = "CART"
    category_encoding: str = "auto"          # many-valued categories: chosen on held-out rows
    tree_threads: int = 0                    # 0: one under TREES_ONE_THREAD_ROWS, else all
    label_key: Optional[str] = None          # a transformed feature as the label (TFX _xf)
    model_module: Optional[str] = None       # a file with build_model(feature_info, config)
    hidden_units: List[int] = field(default_factory=lambda: [128, 64, 32])
    embedding_dim: int = 8
    dropout: float = 0.0
    hide_missing: float = 0.1                # network: present imputed values hidden (rate)
    shuffle_buffer: int = 50_000
    cache: bool = False
    augment: bool = False                    # image data: random flips/rotations/contrast
    jit_compile: bool = False                # XLA-compile the training step (measured: README)
    mixed_precision: bool = False            # GPU: float16 compute, float32 variables
    backbone: str = "small_cnn"              # image data: see model.build_cnn
    eval_steps: Optional[int] = None         # default: the whole eval split
    early_stopping_patience: Optional[int] = None  # None: 10 for tabular data, 0 (off) images
    choice_folds: Optional[int] = None       # None: 4 under 10,000 train rows, one process
    checkpoint_steps: int = 200              # BackupAndRestore frequency
    keep_checkpoints: int = 3                # per-epoch weight checkpoints kept (the last N)
    distribution: str = "auto"
    seed: int = 42
    deterministic: Optional[bool] = None     # None: on under 10,000 train rows, one process
    model_dir: Optional[str] = None          # export base (default job_dir/export)
    checkpoint_dir: Optional[str] = None     # default job_dir/checkpoints
    tensorboard_dir: Optional[str] = None    # default job_dir/logs
    serving_model_name: str = "model"        # TF Serving's name (job_dir/serving/models.config)
    serving_base_path: Optional[str] = None  # the export base as the server sees it
    hypertune_metric: Optional[str] = None   # None: rmse (regression) or accuracy
    slice_by: Tuple[str, ...] = ()           # raw columns: eval metrics by slice (golden set)
    verbose: int = 0

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
        for name in ("embedding_dim", "checkpoint_steps", "shuffle_buffer", "keep_checkpoints",
                     "num_trees", "max_depth", "min_examples", "max_num_nodes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name} must be >= 1")
        for name in ("epochs", "batch_size"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ConfigError(f"--{name} must be >= 1")
        for name in ("train_steps", "steps_per_epoch", "eval_steps"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ConfigError(f"--{name} must be >= 1")
        if not self.hidden_units or any(u < 1 for u in self.hidden_units):
            raise ConfigError("--hidden_units must be positive integers")
        if not 0 <= self.dropout < 1:
            raise ConfigError("--dropout must be in [0, 1)")
        if not 0 <= self.hide_missing < 1:
            raise ConfigError("--hide_missing must be in [0, 1)")
        if self.learning_rate <= 0:
            raise ConfigError("--learning_rate must be > 0")
        if not 0 < self.shrinkage <= 1:
            raise ConfigError("--shrinkage must be in (0, 1]")
        if self.tree_threads < 0:
            raise ConfigError("--tree_threads must be >= 0 (0: automatic)")
        if not 0 < self.subsample <= 1:
            raise ConfigError("--subsample must be in (0, 1]")
        for name, allowed in (("growing_strategy", GROWING_STRATEGIES),
                              ("split_axis", SPLIT_AXES),
                              ("categorical_algorithm", CATEGORICAL_ALGORITHMS),
                              ("category_encoding", CATEGORY_ENCODINGS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"--{name} must be one of {allowed}")
        if self.model not in MODELS:
            raise ConfigError(f"--model must be one of {MODELS}")
        if self.lr_schedule not in (None, "constant", "cosine"):
            raise ConfigError("--lr_schedule must be constant or cosine")
        if self.backbone not in BACKBONES:
            raise ConfigError(f"--backbone must be one of {BACKBONES}")
        try:
            check_model_name(self.serving_model_name)
        except ValueError as e:
            raise ConfigError(f"--serving_model_name: {e}") from None
        try:  # what models.config will hold, checked before training, not after the export
            check_base_path(self.serving_base_path or serving_base_path(self.model_dir))
        except ValueError as e:
            raise ConfigError(f"--serving_base_path (or --model_dir): {e}") from None
        if self.hypertune_metric not in (None,) + TUNING_METRICS:
            raise ConfigError(f"--hypertune_metric must be one of {TUNING_METRICS}")
        if self.choice_folds is not None:
            if not 1 <= self.choice_folds <= MAX_CHOICE_FOLDS:
                raise ConfigError(f"--choice_folds must be in [1, {MAX_CHOICE_FOLDS}]")
            if self.choice_folds > 1 and self.early_stopping_patience:
                raise ConfigError("--choice_folds above 1 trains every fold's network on the "
                                  "same schedule: it needs --early_stopping_patience 0")
        if self.distribution not in DISTRIBUTIONS:
            raise ConfigError(f"--distribution must be one of {DISTRIBUTIONS}")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        a = parser.add_argument
        a("--data_dir", required=True, help="The preprocess job's output directory.")
        a("--job_dir", required=True, help="Where checkpoints, logs, metrics and the export go "
          "(a Vertex AI tuning trial: JOB_DIR/trial_<CLOUD_ML_TRIAL_ID>).")
        a("--epochs", type=int, help="Default: 10, or more for small data so that training "
          "takes at least 1000 optimizer steps (training/defaults.py).")
        a("--train_steps", type=int, help="Total training steps (overrides --epochs).")
        a("--steps_per_epoch", type=int, help="Default: train rows / batch size.")
        a("--batch_size", type=int, help="Global batch size. Default: train rows / 50 as a "
          "power of two within [32, 512].")
        a("--learning_rate", type=float, default=3e-3)
        a("--lr_schedule", choices=("constant", "cosine"),
          help="cosine: decay the learning rate to 0 over the training steps. Default: cosine "
               "when small data needed extra epochs, else constant.")
        a("--model", choices=MODELS, default="auto",
          help="Tables: auto (default) trains wide_deep and boosted_trees and keeps the "
               "network, the trees or their average (blend), by a validation slice of the "
               "train split (never the eval split); wide_deep / dnn: the network; "
               "boosted_trees: gradient boosted trees (YDF) in the same export. Images "
               "always train the CNN. blend: the average of wide_deep and boosted_trees, "
               "without a choice.")
        _add_tree_arguments(a)
        a("--label_key", help="Train on this transformed feature instead of the schema's raw "
          "label (TFX's <name>_xf convention): float -> regression, int -> classification.")
        a("--model_module", help="A Python file (local or gs://) defining build_model("
          "feature_info, config) -> tf_keras.Model; replaces --model (see "
          "training/examples/custom_model.py).")
        _add_network_arguments(a)
        a("--eval_steps", type=int, help="Default: the whole eval split.")
        a("--early_stopping_patience", type=int,
          help="Epochs without a better holdout loss before training stops (the best weights "
               "are kept). Default: 10 for tabular data, whose validation data is a hashed "
               "1-in-10 slice of the train split; off for images. 0 turns it off.")
        a("--choice_folds", type=int,
          help="--model auto: the folds of the train split the candidates are scored on, "
               "each held out in turn from a network and trees trained on the rest (every "
               "row scored once); 1: one hashed 1-in-10 slice. Default: 4 for a train split "
               "under 10,000 rows on one process (each family then trains 4 more times: "
               "3 folds and the refit on all rows), else 1.")
        a("--checkpoint_steps", type=int, default=200, help="Backup (resume) frequency in steps.")
        a("--keep_checkpoints", type=int, default=3,
          help="Per-epoch weight checkpoints to keep (older ones are deleted).")
        a("--distribution", choices=DISTRIBUTIONS, default="auto",
          help="auto: from TF_CONFIG (ps -> parameter_server, several workers -> "
               "multi_worker), else mirrored with several GPUs, else single.")
        a("--serving_model_name", default="model",
          help="The model's name in TF Serving's models.config, written to job_dir/serving/ "
               "with batching_parameters.txt (see templates/serving/).")
        a("--serving_base_path", help="The export base as TF Serving sees it in models.config "
          "(e.g. /models/model in a container). Default: --model_dir, absolute.")
        a("--hypertune_metric", choices=TUNING_METRICS,
          help="The figure reported with the cloudml-hypertune convention (a Vertex AI tuning "
               "trial, python -m training.tune): per epoch on the validation slice, then on "
               "the eval split. Default: rmse (regression) or accuracy (classification).")
        a("--slice_by", action="append", metavar="COL[,COL...]",
          help="Repeatable. The exported model's metrics by slice of these raw columns "
               "(a number by the train split's quintiles, a string by its values), on the "
               "golden set (a sample of the eval split's rows): metrics.json `eval_slices` "
               "and report.html.")
        a("--seed", type=int, default=42)
        a("--deterministic", action=argparse.BooleanOptionalAction, default=None,
          help="TensorFlow's deterministic ops: the same data, flags and seed give the same "
               "network. Default: on for a train split under 10,000 rows on one process.")
        a("--verbose", type=int, default=0, choices=[0, 1, 2],
          help="Keras' own lines per epoch (0: only the trainer's progress lines).")
        quiet.add_verbosity_flag(parser)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "TrainConfig":
        kw = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
        try:
            kw["hidden_units"] = [int(u) for u in str(args.hidden_units).split(",") if u.strip()]
        except ValueError:
            raise ConfigError(f"--hidden_units must be comma-separated integers, got "
                              f"{args.hidden_units!r}") from None
        kw["slice_by"] = parse_slice_by(getattr(args, "slice_by", None) or ())
        return cls(**kw)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _add_tree_arguments(a) -> None:
    """The boosted trees' flags (`a`: a parser's add_argument), in --help's order."""
    a("--num_trees", type=int, default=300, help="boosted_trees: the trees grown (at "
      "most, from 10,000 train rows: YDF then stops when the loss on its own 10%% "
      "validation rows stops improving).")
    a("--max_depth", type=int, default=6, help="boosted_trees: the deepest a tree grows.")
    a("--shrinkage", type=float, default=0.05, help="boosted_trees: the learning rate.")
    a("--min_examples", type=int, default=5, help="boosted_trees: rows a leaf holds at least.")
    a("--subsample", type=float, default=1.0,
      help="boosted_trees: the share of rows each tree is grown on.")
    a("--growing_strategy", choices=GROWING_STRATEGIES, default="BEST_FIRST_GLOBAL",
      help="boosted_trees: BEST_FIRST_GLOBAL grows the best leaf of the whole tree first "
           "(up to --max_num_nodes); LOCAL grows every leaf to --max_depth.")
    a("--max_num_nodes", type=int, default=31,
      help="boosted_trees: nodes per tree with BEST_FIRST_GLOBAL.")
    a("--split_axis", choices=SPLIT_AXES, default="auto",
      help="boosted_trees: SPARSE_OBLIQUE splits on random sparse sums of numbers "
           "(min-max normalised); AXIS_ALIGNED on one number at a time. auto (default): "
           "with --model auto or blend, both are grown on the same rows and "
           "SPARSE_OBLIQUE is kept unless AXIS_ALIGNED is lower by 3 standard errors on "
           "the rows held out from them; alone, SPARSE_OBLIQUE.")
    a("--categorical_algorithm", choices=CATEGORICAL_ALGORITHMS, default="CART",
      help="boosted_trees: how a category split is searched (YDF's CART or RANDOM).")
    a("--category_encoding", choices=CATEGORY_ENCODINGS, default="auto",
      help="boosted_trees: a categorical feature of over 30 values as categories to split "
           "on, or as its cross-fitted mean label (target). auto (default): under 10,000 "
           "train rows with --model auto or blend, both are grown on the same rows and "
           "categories kept unless target is lower by 2 standard errors on the rows held "
           "out from them; else categories.")
    a("--tree_threads", type=int, default=0,
      help="boosted_trees: YDF's training threads. 0 (default): one under 200,000 train "
           "rows (where more measured slower: benchmarks/tree_threads.py), else one per core.")


def _add_network_arguments(a) -> None:
    """The network's and its input pipeline's flags, in --help's order."""
    a("--hidden_units", default="128,64,32", help="Comma-separated layer sizes.")
    a("--embedding_dim", type=int, default=8)
    a("--dropout", type=float, default=0.0)
    a("--hide_missing", type=float, default=0.1,
      help="The network, tables: each present value of a column with missing values is "
           "hidden (stored as missing: imputed mean, flag set) with this probability "
           "while training, so missing does not come to mean what it meant for the rows "
           "that had it (small entities, say). 0 turns it off; serving is unchanged.")
    a("--shuffle_buffer", type=int, default=50_000)
    a("--cache", action="store_true", help="Cache the parsed training data in memory "
      "(after the first epoch input costs ~nothing; use when the train split fits in RAM).")
    a("--augment", action="store_true", help="Image data: random flips, rotations, contrast.")
    a("--jit_compile", action="store_true", help="Compile the training step with XLA "
      "(off by default: see the README's measured figures for your model and hardware).")
    a("--mixed_precision", action="store_true", help="GPU: compute in float16 with float32 "
      "variables and outputs (Keras' mixed_float16 policy); ignored, with a warning, "
      "without a GPU, where float16 is slower.")
    a("--backbone", choices=BACKBONES, default="small_cnn",
      help="Image data: the small CNN, or a Keras application built without downloaded "
           "weights (trained from scratch).")
