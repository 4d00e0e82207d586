"""File I/O over Beam's FileSystems: bounded opening and matching (filesys.py), the records of a
file (records.py), CSV byte blocks, reading input files in parallel, writing TFRecords, and
loading an export.
"""
