"""File helpers every layer uses, over Beam's FileSystems (local paths and gs:// alike):
matching input patterns, opening (and decompressing) an input with bounded reads, small text
files, and copying a local tree to any filesystem."""
from __future__ import annotations

import bz2
import gzip
import json
import math
import os
import re
import shutil
import stat
import tempfile
from typing import List, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes, FileSystem
from apache_beam.io.filesystems import FileSystems

from preprocessing.files import encodings


def is_remote_path(path: str) -> bool:
    return "://" in path


def split_patterns(text: str) -> List[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


# Files a job writes under its output (and staging, failed-run folders): an input pattern
# that matches one of these would read a run's output back as input.
_OUTPUT_PROBES = ("x.csv", "x.csv.gz", "x.json", "x.jsonl", "x.tfrecord", "summary.json",
                  "metrics.json", "predictions-00000-of-00001.jsonl",
                  "predictions-00000-of-00001.csv", "rejects/rejects-00000-of-00001.jsonl",
                  "train/part-00000-of-00001.tfrecord.gz", "_staging-1-a/x.csv",
                  "_staging-1-a/rejects/rejects-00000-of-00001.jsonl",
                  "_FAILED_RUN/rejects/rejects-00000-of-00001.jsonl")


def pattern_reaching(patterns: Sequence[str], output: str) -> Optional[str]:
    """The first input pattern that matches files a job writes under `output` (by Beam's
    own glob rules: `*` stays within a folder, `**` crosses folders), or None."""

    def norm(path: str) -> str:
        return path if is_remote_path(path) else os.path.abspath(path)
    out = norm(output).rstrip("/")
    for pattern in patterns:
        rx = re.compile(FileSystem.translate_pattern(norm(pattern)))
        if any(rx.match(f"{out}/{name}") for name in _OUTPUT_PROBES):
            return pattern
    return None


def match_by_pattern(patterns: Sequence[str]) -> List[List[str]]:
    """The files each pattern matches (one listing per pattern)."""
    return [[m.path for m in result.metadata_list]
            for result in FileSystems.match(list(patterns))]


def match_files(patterns: Sequence[str]) -> List[str]:
    """All files matching the patterns, sorted; an empty list if none do."""
    return sorted({f for files in match_by_pattern(patterns) for f in files})


def megabytes(mb: float) -> int:
    """A size flag given in MB (fractions allowed), in bytes."""
    return int(mb * (1 << 20))


def total_size(patterns: Sequence[str]) -> Optional[int]:
    """Bytes in the files the patterns match (for progress ETAs), one listing per pattern
    (not one request per file); None when sizes cannot be read."""
    try:
        sizes = {m.path: m.size_in_bytes for r in FileSystems.match(list(patterns))
                 for m in r.metadata_list}
        return sum(sizes.values())
    except Exception:
        return None


class UnreadableInput(OSError):
    """An input that is not a regular file (a device, a pipe, a folder) or that this process
    may not read: reading it could block or never end, and a retry cannot help."""


def is_readable_input(path: str) -> bool:
    """False for a local path `open_input` refuses (UnreadableInput); remote paths: True."""
    try:
        open_input(path).close()
        return True
    except UnreadableInput:
        return False
    except Exception:  # the read itself reports other problems
        return True


def open_input(path: str):
    """A binary file object for an input file (any Beam filesystem), decompressed by its
    extension (.gz, .bz2) with Python's streaming readers: reads are bounded by what is asked
    (a decompression bomb never expands past it), and a cut or corrupt file raises (EOFError,
    OSError) instead of ending early as if complete. Raises UnreadableInput for a local path
    that is not a regular file (`/dev/zero` never ends, a FIFO blocks) or is not readable."""

    if not is_remote_path(path):
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):  # follows symlinks
                raise UnreadableInput(f"{path} is not a regular file")
        except (PermissionError, FileNotFoundError) as e:
            raise UnreadableInput(f"{path}: {e.strerror}") from None
    try:
        raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    except PermissionError as e:
        raise UnreadableInput(f"{path}: {e.strerror}") from None
    kind = CompressionTypes.detect_compression_type(path)
    if kind == CompressionTypes.GZIP:
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if kind == CompressionTypes.BZIP2:
        return bz2.BZ2File(raw, mode="rb")
    return raw


def head_bytes(path: str, max_bytes: int = 1 << 20) -> bytes:
    """The first ~max_bytes of a (possibly compressed) file, read by lines."""
    parts, size = [], 0
    with open_input(path) as f:
        try:
            while size < max_bytes:
                part = f.readline(max_bytes - size)  # by lines: a cut loses one only
                if not part:
                    break
                parts.append(part)
                size += len(part)
        except EOFError:  # a cut compressed file: its head is still its head (the job
            pass          # itself reports the cut)
    return b"".join(parts)


def read_head(path: str, max_bytes: int = 1 << 20, encoding: str = encodings.UTF8) -> str:
    """The first ~max_bytes of a (possibly compressed) text file in `encoding`, cut at a line
    end."""
    return decode_head(head_bytes(path, max_bytes), encoding, max_bytes)


def decode_head(data: bytes, encoding: str = encodings.UTF8, max_bytes: int = 1 << 20) -> str:
    """head_bytes' `data` as text, cut at a line end when it is `max_bytes` long."""
    text = encodings.to_utf8(data, encoding).decode("utf-8", errors="replace")
    if len(data) == max_bytes and "\n" in text:
        text = text[: text.rindex("\n") + 1]
    return text


def write_text(path: str, text: str) -> None:
    if not is_remote_path(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with FileSystems.create(path) as f:
        f.write(text.encode("utf-8"))


def read_text(path: str) -> str:
    with FileSystems.open(path) as f:
        return f.read().decode("utf-8")


def copy_local_tree(src_dir: str, dst_dir: str) -> None:
    """Copies a local directory to any Beam filesystem (gs:// included) file by file."""
    for root, _, files in os.walk(src_dir):
        rel = os.path.relpath(root, src_dir)
        for name in files:
            dst = FileSystems.join(dst_dir, *([] if rel == "." else rel.split(os.sep)), name)
            with open(os.path.join(root, name), "rb") as src, FileSystems.create(dst) as out:
                shutil.copyfileobj(src, out)


def local_tmp_dir(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix)


def json_safe(obj):
    """`obj` with every non-finite float (NaN, infinity; numpy's too) as None: strict JSON,
    which json.loads(parse_constant=...) and BigQuery accept."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, float) or type(obj).__module__ == "numpy" and hasattr(obj, "dtype") \
            and obj.dtype.kind == "f":
        v = float(obj)
        return v if math.isfinite(v) else None
    return obj


def dumps_json(obj, indent=2, sort_keys=True) -> str:
    """A JSON file's text: strict JSON (a non-finite number is null, see json_safe)."""
    return json.dumps(json_safe(obj), indent=indent, sort_keys=sort_keys, default=str,
                      allow_nan=False) + "\n"


def write_json_file(records, folder: str, name: str):
    """A PCollection of one dict -> `folder/name.json` (strict JSON, one file): the small
    reports a job stages for Finalize to attach to its summary."""
    return (records
            | f"{name}Json" >> beam.Map(dumps_json).with_output_types(str)
            | f"Write{name}" >> beam.io.WriteToText(FileSystems.join(folder, name),
                                                   file_name_suffix=".json",
                                                   shard_name_template=""))
