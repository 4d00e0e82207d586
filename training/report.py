"""What a finished training run leaves for people: metrics.json and its learning curves."""
from __future__ import annotations

import os

import tensorflow as tf

from preprocessing.files import filesys


def write_report(job_dir: str, metrics: dict) -> None:
    """metrics.json (strict JSON) and the learning curves beside it."""
    tf.io.gfile.makedirs(job_dir)
    with tf.io.gfile.GFile(os.path.join(job_dir, "metrics.json"), "w") as f:
        f.write(filesys.dumps_json(metrics, sort_keys=False))
    if metrics.get("history"):
        plot_curves(metrics["history"], os.path.join(job_dir, "curves.png"))


def plot_curves(history: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in history if not k.startswith("val_")]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.5), squeeze=False)
    for ax, k in zip(axes[0], keys):
        epochs = range(1, len(history[k]) + 1)
        ax.plot(epochs, history[k], marker="o", label="train")
        if f"val_{k}" in history:
            ax.plot(range(1, len(history[f"val_{k}"]) + 1), history[f"val_{k}"], marker="o",
                    label="eval")
        ax.set_title(k)
        ax.set_xlabel("epoch")
        ax.legend()
    fig.tight_layout()
    with tf.io.gfile.GFile(path, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    plt.close(fig)
