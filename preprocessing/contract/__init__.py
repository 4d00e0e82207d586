"""The data contract: the value grammar (values.py), the schema and its spec files, the names
TensorFlow sees for the user's columns, and the deterministic split.
"""
