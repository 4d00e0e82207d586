"""Thin Beam jobs composing the PTransforms of preprocessing/, inference/ and training/, and
what their command lines share: options, the local runner, one-line errors, the finalize
step."""
from preprocessing.entry import started

started()  # before anything imports Beam or TensorFlow (preprocessing/entry.py)

