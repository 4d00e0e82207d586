"""The export: the SavedModel with the transform inside (export.py), TF Serving's configuration
(serving_config.py), weight quantisation (quantize.py), and the eval rows the model exported
may learn: those outside the golden set (golden_rows.py).
"""
