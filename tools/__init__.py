"""Tools beside the production code (not shipped to Dataflow workers): data generators, the
offline Dataflow check, Flex Template metadata, local cluster launch and manifest rendering."""
from preprocessing.entry import started

started()  # before anything imports Beam or TensorFlow (preprocessing/entry.py)

