"""Thin Beam jobs composing the PTransforms of preprocessing/, inference/ and training/, with what their command lines share (options, local runner, errors, the finalize step)."""
import os

# Quiet TensorFlow's C++ start-up notices (CUDA probing on CPU machines) in every job process;
# TensorFlow errors still surface as Python exceptions. Set it yourself to see them.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
