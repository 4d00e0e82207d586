"""Accounting of what a job reads: why a record is rejected (`Reject`, the one dead-letter
record every job writes) and counting inside the graph (tallies, progress lines).
"""
