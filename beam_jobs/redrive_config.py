"""The redrive job's config: the values `build_pipeline` reads, derived at launch from the
published batch_predict output it redrives (its summary, files and model) and the flags. No
flag bag: a flag's default is its field's in beam_jobs/shared/args.py."""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

from beam_jobs.shared.args import RedriveArgs
from preprocessing.contract.schema import Schema


@dataclasses.dataclass(frozen=True)
class RedriveConfig:
    """Everything build_pipeline reads, as derived values and no flag bag: `launch()` makes
    one from the command line and the published output (with I/O); a test can construct one
    directly."""
    output: str
    rejects: str                        # the published dead letters
    fixed: Optional[str]                # --rejects: fixed ones that replace them
    model_dir: str
    model_path: str
    schema: Schema
    staging: str
    key: Optional[str]
    passthrough: Tuple[str, ...]
    label: Optional[str]
    prediction_files: Tuple[str, ...]   # the published predictions-*.jsonl
    csv_files: Tuple[str, ...]          # and .csv, when the run wrote them
    previous: dict                      # the published summary
    headers: Dict[str, Tuple[str, ...]] = dataclasses.field(default_factory=dict)  # per CSV source
    delimiter: str = ","                # the CSV sources' field delimiter, as the run read them
    rows_per_chunk: int = RedriveArgs.max_batch_size  # rows per parsed batch and model call
