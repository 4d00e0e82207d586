"""Schema, parsing and the tf.transform code shared by preprocessing, training and serving."""
import os

SPEC_DIR = os.path.join(os.path.dirname(__file__), "specs")
TAXI_SPEC = os.path.join(SPEC_DIR, "taxi.yaml")
