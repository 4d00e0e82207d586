"""Deterministic generator of a taxi-fare-like CSV: the project's embedded default data.

The fare follows a documented formula plus Gaussian noise of known sigma, so the best
achievable RMSE of any model is known in advance (it is `NOISE_SIGMA`):

    trip_km   = haversine(pickup, dropoff)
    fare      = 3.00 + 1.75 * trip_km
                + 0.50 * (passenger_count - 1)
                + 2.50  if a weekday and 16 <= hour < 20   (rush-hour surcharge)
                + 1.00  if 20 <= hour or hour < 6           (night surcharge)
                + N(0, NOISE_SIGMA)

`payment_type` and `company` carry no signal (as in real taxi data, where they mostly
change the tip). Company names contain commas, so CSV quoting is exercised.

A share of dirty rows (`dirty_fraction`) is mixed in, each of a known kind (missing label,
unparsable number, wrong column count, bad datetime); `passenger_count` is sometimes
empty, which the default spec fills with its default instead of rejecting.

    python -m tools.datagen --rows 1000000 --output data/taxi.csv
"""
from __future__ import annotations

import argparse
import csv
import io
import logging
import os
from dataclasses import dataclass

import numpy as np

NOISE_SIGMA = 1.5
HEADER = (
    "key", "pickup_datetime", "pickup_longitude", "pickup_latitude",
    "dropoff_longitude", "dropoff_latitude", "passenger_count", "payment_type",
    "company", "fare_amount",
)
PAYMENT_TYPES = ("Credit Card", "Cash", "Mobile", "No Charge", "Dispute")
COMPANIES = (
    "Flash Cab", "Taxi Affiliation Services, LLC", "Yellow Cab", "Blue Ribbon Taxi Association",
    "City Service", "Sun Taxi", "Chicago Carriage Cab Corp", "Medallion Leasin",
    "Star North Management, LLC", "Globe Taxi", "Checker Taxi", "Nova Taxi Affiliation",
)
# Pickups fall in a box around Manhattan; trips are short, as city trips are.
LON_RANGE = (-74.05, -73.75)
LAT_RANGE = (40.60, 40.90)
# Dirty-row kinds and the reject reason the preprocess job is expected to give each.
DIRTY_KINDS = {
    "missing_label": "missing_value",
    "unparsable_number": "unparsable_number",
    "wrong_column_count": "wrong_column_count",
    "bad_datetime": "unparsable_datetime",
}


def haversine_km(lat1, lon1, lat2, lon2):
    """Great-circle distance in km (numpy; the TF twin lives in preprocessing.features.transform)."""
    r = 6371.0
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dp, dl = p2 - p1, np.radians(lon2) - np.radians(lon1)
    a = np.sin(dp / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * r * np.arcsin(np.sqrt(a))


def expected_fare(trip_km, passengers, hour, weekday):
    """The noise-free fare (numpy arrays); weekday is 0=Monday … 6=Sunday."""
    rush = (weekday < 5) & (hour >= 16) & (hour < 20)
    night = (hour >= 20) | (hour < 6)
    return 3.0 + 1.75 * trip_km + 0.5 * (passengers - 1) + 2.5 * rush + 1.0 * night


@dataclass
class GenerationStats:
    rows: int
    clean_rows: int
    dirty_by_kind: dict


def generate_rows(rows: int, seed: int = 42, dirty_fraction: float = 0.02):
    """Yields (csv_fields, dirty_kind_or_None) for `rows` rows, deterministically from `seed`."""
    rng = np.random.default_rng(seed)
    chunk = 100_000
    start_s = np.datetime64("2025-01-01T00:00:00").astype("datetime64[s]").astype(np.int64)
    year_s = 365 * 24 * 3600
    kinds = list(DIRTY_KINDS)
    for offset in range(0, rows, chunk):
        n = min(chunk, rows - offset)
        t = start_s + rng.integers(0, year_s, n)
        plon = rng.uniform(*LON_RANGE, n)
        plat = rng.uniform(*LAT_RANGE, n)
        dlon = np.clip(plon + rng.normal(0, 0.04, n), *LON_RANGE)
        dlat = np.clip(plat + rng.normal(0, 0.03, n), *LAT_RANGE)
        passengers = rng.choice([1, 1, 1, 1, 2, 2, 3, 4, 5, 6], n)
        payment = rng.choice(len(PAYMENT_TYPES), n, p=[0.55, 0.3, 0.1, 0.03, 0.02])
        company = rng.integers(0, len(COMPANIES), n)
        noise = rng.normal(0, NOISE_SIGMA, n)
        dirty = rng.random(n) < dirty_fraction
        dirty_kind = rng.integers(0, len(kinds), n)
        empty_passengers = rng.random(n) < (dirty_fraction / 4)
        dts = t.astype("datetime64[s]")
        hour = (t // 3600) % 24
        weekday = ((t // 86400) + 3) % 7  # 1970-01-01 was a Thursday (weekday 3).
        km = haversine_km(plat, plon, dlat, dlon)
        fare = np.round(expected_fare(km, passengers, hour, weekday) + noise, 2)
        for i in range(n):
            idx = offset + i
            fields = [
                f"trip-{idx:08d}",
                str(dts[i]).replace("T", " ") + " UTC",
                f"{plon[i]:.6f}", f"{plat[i]:.6f}", f"{dlon[i]:.6f}", f"{dlat[i]:.6f}",
                "" if empty_passengers[i] else str(passengers[i]),
                PAYMENT_TYPES[payment[i]],
                COMPANIES[company[i]],
                f"{fare[i]:.2f}",
            ]
            kind = None
            if dirty[i]:
                kind = kinds[dirty_kind[i]]
                if kind == "missing_label":
                    fields[9] = ""
                elif kind == "unparsable_number":
                    fields[2] = "n/a"
                elif kind == "wrong_column_count":
                    fields = fields[:-2]
                elif kind == "bad_datetime":
                    fields[1] = "2025-13-45 99:00:00"
            yield fields, kind


def write_csv(path: str, rows: int, seed: int = 42, dirty_fraction: float = 0.02) -> GenerationStats:
    """Writes the CSV (with header) to a local path or any Beam filesystem path (gs://)."""
    from apache_beam.io.filesystems import FileSystems

    dirty_by_kind = {k: 0 for k in DIRTY_KINDS}
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(HEADER)
    if "://" not in path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with FileSystems.create(path) as out:
        for i, (fields, kind) in enumerate(generate_rows(rows, seed, dirty_fraction)):
            writer.writerow(fields)
            if kind:
                dirty_by_kind[kind] += 1
            if i % 50_000 == 49_999:
                out.write(buf.getvalue().encode())
                buf.seek(0)
                buf.truncate()
        out.write(buf.getvalue().encode())
    return GenerationStats(rows, rows - sum(dirty_by_kind.values()), dirty_by_kind)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--dirty_fraction", type=float, default=0.02,
                        help="Share of deliberately bad rows; 0 turns them off.")
    parser.add_argument("--output", required=True, help="CSV path (local or gs://).")
    args = parser.parse_args(argv)
    if not 0 <= args.dirty_fraction < 1:
        parser.error("--dirty_fraction must be in [0, 1)")
    stats = write_csv(args.output, args.rows, args.seed, args.dirty_fraction)
    print(f"wrote {stats.rows} rows to {args.output} ({stats.clean_rows} clean; "
          f"dirty: {stats.dirty_by_kind}); noise sigma = {NOISE_SIGMA}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
