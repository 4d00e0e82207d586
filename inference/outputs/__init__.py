"""Where predictions go: the model's outputs for a batch (predictions.py: `PredictionBlock`),
the output columns and the BigQuery sink, and the BigQuery client for the emulator.
"""
