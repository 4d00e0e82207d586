"""preprocess as a user runs it (`python -m`, one process): a quiet terminal, and a
report.html with the numbers of its summary.json and statistics.json, as Chromium renders it."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from preprocessing.reference.evaluation import figure_text
from tests.helpers import CHROMIUM_MISSING, ROOT, chromium_path, library_lines, render_page

pytestmark = pytest.mark.slow  # a whole job, run as a user runs it


@pytest.fixture(scope="module")
def preprocess_cli(tmp_path_factory):
    from tools.datagen import write_csv
    root = tmp_path_factory.mktemp("prep_cli")
    csv_path = str(root / "taxi.csv")
    write_csv(csv_path, 600, seed=5, dirty_fraction=0.05)
    out = str(root / "out")
    r = subprocess.run([sys.executable, "-m", "beam_jobs.preprocess", "--input", csv_path,
                        "--output", out, "--label_column", "fare_amount"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(out, "statistics.json")) as f:
        stats = json.load(f)
    return out, r, summary, stats


def _figures(summary, stats):
    out = [figure_text(summary["rows_read"])] + [figure_text(n) for n in
                                                   summary["splits"].values()]
    out += [figure_text(n) for n in summary["rejected"]["by_reason"].values()]
    out += [figure_text(f["mean"]) for f in stats["features"].values() if "mean" in f]
    return out


def test_a_one_process_run_prints_only_its_own_lines(preprocess_cli):
    out, r, summary, _ = preprocess_cli
    assert library_lines(r.stdout + r.stderr) == []
    assert r.stderr.strip().splitlines()[-1] == \
        f"preprocess: report {os.path.join(out, 'report.html')}"


def test_the_report_has_the_summary_and_statistics_figures(preprocess_cli):
    out, _, summary, stats = preprocess_cli
    page = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    for text in _figures(summary, stats):
        assert f">{text}<" in page, text
    for c in summary["inferred_columns"]:  # each column's decision and its reason
        assert f"<td>{c['column']}</td><td>{c['role']}</td>" in page
    reason = next(iter(summary["rejected"]["by_reason"]))
    assert re.search(rf"<td>{reason}</td><td class=\"n\">[\d,]+</td><td>line \d+: ", page)


def test_chromium_renders_the_preprocess_report(preprocess_cli, tmp_path):
    if not chromium_path():
        pytest.skip(CHROMIUM_MISSING)
    from PIL import Image, ImageStat
    out, _, summary, stats = preprocess_cli
    png = str(tmp_path / "report.png")
    text = re.sub(r"<[^>]+>", " ", render_page(os.path.join(out, "report.html"), png))
    for figure in _figures(summary, stats):
        assert f" {figure} " in text, figure
    assert ImageStat.Stat(Image.open(png).convert("L")).stddev[0] > 10
