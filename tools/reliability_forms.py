"""Reliability cases of numbers and dates as other systems write them (rounds 12 and 13):
the taxi file's lines rewritten, for tools/reliability_cases.py."""
from __future__ import annotations

import csv as csv_module
import io
import re

from preprocessing import TAXI_SPEC as SPEC


def written_forms_cases(csv, lines):
    """Dates and numbers as other systems write them (round 12, 2026-12-06): year first with
    slashes and no seconds, and fares grouped in threes (a quoted "1,234") or in dollars."""
    text = "\n".join(lines) + "\n"
    n = len(lines) - 1
    slashed = re.sub(r"\b(\d{4})-(\d{2})-(\d{2}) (\d\d:\d\d):\d\d UTC\b", r"\1/\2/\3 \4", text)
    yield "inferred: pickup times as 2025/06/02 08:15", [
        "--input", csv("i_slashed.csv", slashed), "--label_column", "fare_amount"], n
    fare = lines[0].split(",").index("fare_amount")

    def grouped(bad: dict, dollars=False) -> str:
        """The file with its fares in cents grouped in threes ("1,234"), or in dollars with
        their sign ("$18.39"); the rows of `bad` ({row: text}) written otherwise."""
        rows = list(csv_module.reader(lines))
        for i, row in enumerate(rows[1:], 1):
            try:
                fare_text = f"${float(row[fare]):,.2f}" if dollars else \
                    f"{int(round(float(row[fare]) * 100)):,}"
            except (ValueError, IndexError):  # the corpus' own bad rows stay as they are
                continue
            row[fare] = bad.get(i, fare_text)
        out = io.StringIO()
        csv_module.writer(out, lineterminator="\n").writerows(rows)
        return out.getvalue()

    yield "inferred: fares in cents grouped in threes (\"1,234\"), 1 not", [
        "--input", csv("i_grouped.csv", grouped({3: "12,34"})), "--label_column",
        "fare_amount"], n
    yield "inferred: fares as dollars ($18.39), 1 US$", [
        "--input", csv("i_dollars.csv", grouped({3: "US$18.39"}, dollars=True)),
        "--label_column", "fare_amount"], n
    spec = open(SPEC).read().replace("{name: fare_amount, type: float",
                                     "{name: fare_amount, type: float, grouping: ','")
    yield "a spec's grouped fares, 3 not in threes", [
        "--input", csv("grouped_bad.csv", grouped({3: "12,34", 4: "1,2345", 5: ",123"})),
        "--schema_spec", csv("grouped.yaml", spec)], n


def marked_numbers_cases(csv, lines):
    """Numbers with marks in more rows than a stray (round 13, 2026-12-06): a ';' file of
    euro fares (`18,39 €`), dollar fares with negatives in parentheses, a fare label with 3%
    words, a longitude with 5% `GPS off`."""
    rows = list(csv_module.reader(lines))
    fare, lon = rows[0].index("fare_amount"), rows[0].index("pickup_longitude")
    n = len(rows) - 1

    def written(column, text, sep=","):
        out = io.StringIO()
        w = csv_module.writer(out, delimiter=sep, lineterminator="\n")
        w.writerow(rows[0])
        w.writerows(r[:column] + [text(i, r[column])] + r[column + 1:]
                    for i, r in enumerate(rows[1:], 1))
        return out.getvalue()

    def euros(i, v):
        return "18,39 EUR" if i == 3 else f"{float(v):,.2f} €".translate(
            str.maketrans(",.", ".,"))
    yield "inferred: ';' fares as 1.234,50 €, 1 not", [
        "--input", csv("i_euros.csv", written(fare, euros, ";")), "--delimiter", ";",
        "--label_column", "fare_amount"], n
    yield "inferred: fares as $18.39, 4 as ($18.39)", [
        "--input", csv("i_accounts.csv", written(fare, lambda i, v: f"(${float(v):,.2f})"
                                                 if i % 50 == 1 else f"${float(v):,.2f}")),
        "--label_column", "fare_amount"], n
    yield "inferred: a fare label with 3% words", [
        "--input", csv("i_words.csv", written(fare, lambda i, v: "see note" if i % 33 == 1
                                              else v)), "--label_column", "fare_amount"], n
    yield "inferred: 5% of longitudes 'GPS off'", [
        "--input", csv("i_gps.csv", written(lon, lambda i, v: "GPS off" if i % 20 == 1
                                            else v)), "--label_column", "fare_amount"], n


def unit_word_cases(csv, lines):
    """Numbers written with a unit word (round 14, 2026-12-06): fares as `18.39 USD` with one
    `18.39 EUR` (two words: the label stays text), passenger counts as `2 pax` with one
    `2 pax pax` and one `2 PAX`."""
    rows = list(csv_module.reader(lines))
    fare, count = rows[0].index("fare_amount"), rows[0].index("passenger_count")
    n = len(rows) - 1

    def written(column, text):
        out = io.StringIO()
        w = csv_module.writer(out, lineterminator="\n")
        w.writerow(rows[0])
        w.writerows(r[:column] + [text(i, r[column])] + r[column + 1:] if len(r) > column
                    else r for i, r in enumerate(rows[1:], 1))
        return out.getvalue()
    yield "inferred: fares as 18.39 USD, 1 EUR", [
        "--input", csv("i_usd.csv", written(fare, lambda i, v: f"{v} {'EUR' if i == 3 else 'USD'}")),
        "--label_column", "fare_amount"], n
    yield "inferred: passengers as 2 pax, 1 'pax pax', 1 PAX", [
        "--input", csv("i_pax.csv", written(count, lambda i, v: f"{v} " + {4: "pax pax", 6: "PAX"}
                                            .get(i, "pax"))), "--label_column", "fare_amount"], n
