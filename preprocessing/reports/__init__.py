"""Each run's `report.html`: one self-contained page (inline CSS, figures as inline PNGs made
with matplotlib), readable on a phone, built from what the run already wrote.
"""
