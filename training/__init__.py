"""Training: `train_and_evaluate(config)` and the `python -m training.task` entry point."""
from preprocessing.entry import started

started()  # before anything imports Beam or TensorFlow (preprocessing/entry.py)


def train_and_evaluate(config):
    """Trains, evaluates and exports (see training.trainer); imported lazily to keep TF out
    of `import training`."""
    from training.trainer import train_and_evaluate as _run
    return _run(config)
