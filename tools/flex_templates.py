"""Dataflow Flex Template metadata, generated from each job's own option definitions.

    python -m tools.flex_templates            # rewrites templates/<job>/metadata.json
    python -m tools.flex_templates --check    # exits 1 if a committed file is stale

Generating the metadata from the argparse definitions keeps the template's parameters exactly
the job's options (names, help, which are required), with path regexes for gs:// locations.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = ("preprocess", "batch_predict", "stream_predict")
STREAMING_JOBS = ("stream_predict",)
GCS_PATH = r"^gs:\/\/[^\n\r]+$"
# Options whose values are Cloud Storage locations on Dataflow (a regex checks them at launch).
PATH_OPTIONS = {"input", "output", "model_dir", "schema_spec", "module_file", "tft_temp_dir",
                "golden_set"}


def job_module(job: str):
    return importlib.import_module(f"beam_jobs.{job}")


def job_actions(job: str):
    """The argparse actions of a job's own options (shared ones included), in order."""
    from beam_jobs.shared.args import JOB_ARGS
    from preprocessing import flags
    mod = job_module(job)
    parser = argparse.ArgumentParser(add_help=False)
    flags.add_arguments(parser, JOB_ARGS[job])
    return [a for a in parser._actions if a.option_strings], set(mod.REQUIRED_OPTIONS)


def metadata(job: str) -> dict:
    mod = job_module(job)
    actions, required = job_actions(job)
    params = []
    for a in actions:
        name = a.dest
        p = {"name": name, "label": name.replace("_", " ").capitalize(),
             "helpText": (a.help or name).replace("%%", "%"), "isOptional": name not in required}
        if name in PATH_OPTIONS:
            p["regexes"] = [GCS_PATH]
        if a.choices:
            p["regexes"] = ["^(" + "|".join(str(c) for c in a.choices) + ")$"]
        params.append(p)
    doc = (mod.__doc__ or job).strip().splitlines()[0]
    meta = {"name": job, "description": doc, "parameters": params}
    if job in STREAMING_JOBS:
        meta["streaming"] = True  # the launcher starts a streaming job
    return meta


def path_for(job: str) -> str:
    return os.path.join(ROOT, "templates", job, "metadata.json")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    stale = []
    for job in JOBS:
        text = json.dumps(metadata(job), indent=2) + "\n"
        path = path_for(job)
        if args.check:
            if not os.path.exists(path) or open(path).read() != text:
                stale.append(path)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        print(f"wrote {path}")
    if stale:
        print("stale (run python -m tools.flex_templates): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
