"""A step's outputs, typed: its main output's element type, and the tagged outputs the jobs
share (`rejects`: DeadLetters, `counts`: Counts), so that every record in flight has a named
type in the graph (tests/beam_jobs/test_element_types.py walks it)."""
from __future__ import annotations

import apache_beam as beam

from preprocessing.accounting.counting import COUNTS, Count
from preprocessing.accounting.rejects import REJECTS, DeadLetter

SHARED = {REJECTS: DeadLetter, COUNTS: Count}


def typed_outputs(pardo: beam.ParDo, main_type, *tags: str, main=None, **tag_types):
    """`pardo.with_outputs(*tags, main=main)`, each output with its element type declared:
    `main_type` for the main one, a shared tag's own type, `tag_types` for the others."""
    types = {t: tag_types.get(t, SHARED.get(t)) for t in tags}
    missing = [t for t, hint in types.items() if hint is None]
    if missing:
        raise TypeError(f"no element type declared for output(s) {missing}")
    return pardo.with_output_types(main_type, **types).with_outputs(*tags, main=main)
