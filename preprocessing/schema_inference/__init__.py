"""A schema inferred from the data when no spec file is given: the input's CSV as Arrow tables
(csv_tables.py), column statistics (column_stats.py) over the whole input (profile.py) and the
rules that turn them into a schema (label.py, infer.py).
"""
